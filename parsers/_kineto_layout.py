"""Where the events of a Kineto trace lie in its bytes (parsers/_kineto_json reads them run by
run): runs of whole events of `traceEvents`, cut at the separator the trace's writer puts between
two events. A separator can also stand inside an event (a list of objects in its args, a name):
the reader's decode of each run refuses a wrong cut, so a cut is a guess that is always checked."""
from __future__ import annotations

import re

_EVENTS_KEY = re.compile(rb'"traceEvents"[ \t\n\r]*:[ \t\n\r]*\[')  # JSON's whitespace only


def cut(data: bytes | bytearray, run_bytes: int, separators: tuple[bytes, ...]
        ) -> tuple[list[tuple[int, int]], bytes, bytes] | None:
    """Runs of whole events cut from the bytes, run_bytes or more each, at a separator
    (`separators`: the first found after the array's first byte), with the text before
    traceEvents' key and the text from after the last run to the end; None where the
    bytes cannot be cut so (not a bytearray, no `"traceEvents": [` after a `{` or `,`, no
    separator, or too few events for one run)."""
    if not isinstance(data, bytearray) or (key := data.find(b'"traceEvents"')) < 0:
        return None
    found = _EVENTS_KEY.match(data, key)
    head = bytes(data[:key])
    if found is None or not head.rstrip(b" \t\n\r").endswith((b"{", b",")):  # a key, not text in a string
        return None
    start = found.end()
    window = bytes(data[start:start + run_bytes])
    sep = next((s for s in separators if s in window), None)
    if sep is None:
        return None
    runs, comma = [], sep.index(b",")
    while (at := data.find(sep, start + run_bytes)) >= 0:
        runs.append((start, at + comma))
        start = at + comma + 1
    return (runs, head, bytes(data[start:])) if runs else None
