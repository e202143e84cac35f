"""What a finding is, and what the findings' sources read (reports/findings/findings.py gathers them;
findings_more.py and runs/findings_runs.py add sources): kept apart so that each source module
imports it, never the module that gathers them."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

import pandas as pd

from tracelab.core.schema import Memo

from ..align.align import Comparison, compare
from ..jsonout import strict
from ..runtable import info_beside
from ..fmt import duration as ms  # noqa: F401  the findings' old name for it; new code: reports/fmt.py
from ..ranks import Input

# section ids of the report (reports/html/html.py puts them on its headings)
SECTIONS = {"steps": "steps", "overlap": "overlap", "comparison": "comparison", "runs": "runs",
            "totals": "op-classes", "idle": "idle", "roofline": "roofline",
            "memory": "memory"}


@dataclass(frozen=True)
class Finding:
    """One sentence with its number; `at_stake_ns` ranks it (the time it is about, over the
    capture); `section` is the id of the report section that proves it; `evidence` the
    numbers behind it (JSON-able). `code` names its cause, stable for JSON users ("host_bound",
    "straggler", ...: CODES) and `values` its numbers, units in their names (`saving_ns`,
    `bound_ns`, `share`), with `run` (its run's name, "" for the one unnamed run, None for a
    finding across runs) and `rank` where it is about one: what a program reads instead of
    parsing `text`, which is the sentence rendered from them. `text_for`: where the sentence
    says a step is host-bound, its writer, called with the verdict the what-if replay gives after
    the sources ran (under_profiler_only: the profiler's own host cost made it host-bound; `text`
    is what it writes for False)."""
    text: str
    at_stake_ns: int
    section: str
    evidence: dict[str, Any] = field(default_factory=dict)
    code: str = ""
    values: dict[str, Any] = field(default_factory=dict)
    text_for: Callable[[bool], str] | None = field(default=None, compare=False, repr=False)

    @property
    def run(self) -> str | None:
        return self.values.get("run")

    def as_json(self) -> dict[str, Any]:
        """code, values and text (strict JSON: null, never NaN), with its section and time at stake."""
        return strict({"code": self.code, "values": self.values, "text": self.text, "section": self.section,
                       "at_stake_ns": self.at_stake_ns})


# every finding's code: its cause, one per source (memory's three are the memory topic's)
CODES = frozenset({"straggler", "alternating", "straggler_totals", "exposed_comm", "cpu_comm", "idle", "idle_share",
                   "roofline", "difference", "profiler_cost", "tf32", "alignment", "host_bound", "ddp_bucket",
                   "memory_imbalance", "fragmentation", "allocator_misses", "data_loader", "busy_bound", "host_stall",
                   "copy_bound"})


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

    def run_json(self, label: str) -> dict | None:
        """The run.json of the run folder input `label` was read from, None for a bare trace."""
        return info_beside(next((i.path for i in self.inputs if i.label == label), ""), self.runs)

    @cached_property
    def per_input(self) -> pd.DataFrame:
        """Per input: label, group, rank, and its timeline (span, communication, exposed) where timed."""
        t = self.comparison.totals[["label", "group", "rank"]]
        tl = self.comparison.timeline
        return t.merge(tl, on="label", how="left") if len(tl) else t


