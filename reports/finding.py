"""One finding: a sentence with its number (reports/findings.py makes them, the report and
the CLI print them)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Finding:
    """One sentence with its number; `at_stake_ns` ranks it (the time it is about, over the
    capture); `section` is the id of the report section that proves it; `evidence` the
    numbers behind it (JSON-able)."""
    text: str
    at_stake_ns: int
    section: str
    evidence: dict[str, Any] = field(default_factory=dict)
