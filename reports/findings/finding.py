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


# what a finding that names a fix says instead where the replay of that fix gains nothing (fix_writer)
NO_GAIN = "it is not on the critical path (that runs through other work): this change gains nothing now"


@dataclass(frozen=True)
class Said:
    """What the what-if replay decided about a finding after its source wrote it, for its writer to
    word: `replayed`, a replay gave its saving (an upper bound it states then goes: one number per
    cause); `fix_offered`, the replay of the fix it names gains time (else it says why not, never
    the fix); `under_profiler_only`, the profiler's own host cost made its steps host-bound."""
    replayed: bool = False
    fix_offered: bool = True
    under_profiler_only: bool = False


def fix_writer(head: str, fix: str, no_gain: str = NO_GAIN, tail: str = "") -> Callable[[Said], str]:
    """The writer of a sentence `head` + the fix + `tail`, the fix replaced by `no_gain` (why it
    gains nothing) where its replay says so."""
    return lambda said: f"{head}{fix if said.fix_offered else no_gain}{tail}"


@dataclass(frozen=True)
class Finding:
    """One sentence with its number; `at_stake_ns` ranks it (the time it is about, over the
    capture); `section` is the id of the report section that proves it; `evidence` the
    numbers behind it (JSON-able). `code` names its cause, stable for JSON users ("host_bound",
    "straggler", ...: CODES) and `values` its numbers, units in their names (`saving_ns`,
    `bound_ns`, `share`), with `run` (its run's name, "" for the one unnamed run, None for a
    finding across runs) and `rank` where it is about one: what a program reads instead of
    parsing `text`, which is the sentence rendered from them. `write`: where the sentence depends on
    what the what-if replay decides after the sources ran (a fix said only where it gains, an upper
    bound dropped once replayed, a step host-bound only under the profiler), its writer, called with
    that decision (Said); `text` is what it writes for Said()."""
    text: str
    at_stake_ns: int
    section: str
    evidence: dict[str, Any] = field(default_factory=dict)
    code: str = ""
    values: dict[str, Any] = field(default_factory=dict)
    write: Callable[[Said], str] | None = field(default=None, compare=False, repr=False)

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


