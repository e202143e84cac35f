"""The findings' memory source (reports/findings.py SOURCES): what across.combine found in
the inputs' memory digests, per run. Memory is bytes, not time: an imbalance or fragmentation
has no time at stake (0, ranked after every finding about time); allocator calls inside steps
have their CPU time."""
from __future__ import annotations

from ..finding import Evidence, Finding
from .across import combine
from .html import SECTION, _runs, _with_memory


def memory_findings(ev: Evidence) -> list[Finding]:
    have, _ = _with_memory(ev.inputs)
    if not have:
        return []
    return [Finding(text, at_stake_ns, SECTION, evidence) for text, at_stake_ns, evidence in combine(_runs(have)).found]
