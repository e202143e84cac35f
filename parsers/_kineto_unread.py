"""Device activity a Kineto trace holds that parsers/chrome.py does not read as GPU rows, found
in the bytes of a trace with no kernel, memcpy or memset (so `breakdown` never calls a trace
"without GPU activity" that has some): a note per category, with its count and why its events
are not rows."""
from __future__ import annotations

import re

from tracelab.core.note import UNREAD, Note

_CATEGORY = re.compile(rb'"cat"[ \t\n\r]*:[ \t\n\r]*"(' + b"|".join(re.escape(c.encode()) for c in UNREAD) + rb')"')


def unread_counts(data: bytes | bytearray) -> dict[str, int]:
    """Per UNREAD category found in the trace's text, how many events name it (its `"cat"` key)."""
    counts: dict[str, int] = {}
    for found in _CATEGORY.finditer(data):
        name = found.group(1).decode()
        counts[name] = counts.get(name, 0) + 1
    return counts


def unread_notes(data: bytes | bytearray) -> list[Note]:
    """A note per UNREAD category the trace holds: '77 cuda_profiler_range events: kernels ...'."""
    return [Note("unread_device_events", {"events": n, "category": name})
            for name, n in sorted(unread_counts(data).items())]
