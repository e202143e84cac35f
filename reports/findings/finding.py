"""What a finding is, and what the findings' sources read (reports/findings/findings.py gathers them;
findings_more.py and findings_runs.py add sources): kept apart so that each source module
imports it, never the module that gathers them."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pandas as pd

from tracelab.schema import Memo

from ..compare.compare import Comparison, compare
from ..fmt import duration as ms  # noqa: F401  the findings' old name for it; new code: reports/fmt.py
from ..session import Input

# section ids of the report (reports/html/html.py puts them on its headings)
SECTIONS = {"steps": "steps", "overlap": "overlap", "comparison": "comparison", "runs": "runs",
            "totals": "op-classes", "idle": "idle", "roofline": "roofline",
            "memory": "memory"}


@dataclass(frozen=True)
class Finding:
    """One sentence with its number; `at_stake_ns` ranks it (the time it is about, over the
    capture); `section` is the id of the report section that proves it; `evidence` the
    numbers behind it (JSON-able)."""
    text: str
    at_stake_ns: int
    section: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class Evidence(Memo):
    """What the sources read, made once per command: the labelled inputs, their Comparison
    (any --by: only its by-independent parts and its who-waits are read here), and the run
    folders' (name, run.json)."""
    inputs: list[Input]
    comparison: Comparison
    runs: list[tuple[str, dict]] = field(default_factory=list)
    # Memo.shared's: what several sources derive from one input alike (its GEMM kernels), made once per command
    memo: dict = field(default_factory=dict, repr=False, compare=False)

    @cached_property
    def kernels(self) -> pd.DataFrame:
        """The comparison aligned on kernel, whatever --by the command was given, so that
        every command states the same differences."""
        c = self.comparison
        return c.table if c.by == "kernel" else compare(self.inputs, "kernel")

    @cached_property
    def per_input(self) -> pd.DataFrame:
        """Per input: label, group, rank, and its timeline (span, communication, exposed) where timed."""
        t = self.comparison.totals[["label", "group", "rank"]]
        tl = self.comparison.timeline
        return t.merge(tl, on="label", how="left") if len(tl) else t


