"""The findings' memory source (reports/findings.py SOURCES): what across.combine found in
the inputs' memory digests, per run. Memory is bytes, not time: an imbalance or fragmentation
has no time at stake (0, ranked after every finding about time); allocator calls inside steps
have their CPU time."""
from __future__ import annotations

from ..findings.finding import Evidence, Finding
from .across import SECTION, by_run, combine, with_memory


def memory_findings(ev: Evidence) -> list[Finding]:
    have, _ = with_memory(ev.inputs)
    if not have:
        return []
    return [Finding(text, at_stake_ns, SECTION, evidence, _code(evidence), {"run": evidence["input"], **evidence})
            for text, at_stake_ns, evidence in combine(by_run(have)).found]


def _code(evidence: dict) -> str:
    """The finding's cause, by the numbers across.py gives it (one set per kind of finding)."""
    return ("memory_imbalance" if "peak_bytes" in evidence else "fragmentation" if "reserved_bytes" in evidence
            else "allocator_misses")
