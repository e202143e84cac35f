"""How far each scenario's prediction has been from the step measured without the cause, on
real runs (benchmarks/RESULTS.md): the answer states it beside each prediction, so
that nobody reads a replay as exact. A scenario without a band has not been measured against
a run without its cause: its prediction is stated with "no band measured", never with a made-up
one or another scenario's.

The errors are those of the predicted step time against the measured one, (predicted -
measured) / measured. They are not applied to the prediction: they are what it was off by.

Each band is of one column of the answer (`column`), and says against what kind of step:
- `predicted_ns`, the profiled replay, where the band was measured on steps as profiled (a trace's
  own steps without the cause, or the same trace's steps where the cause was absent), or against
  a step the profiler cannot slow (one whole-step CUDA graph: the host off the path);
- `predicted_unprofiled_ns`, the prediction of the user's step, where the band was measured on the
  change made for real and timed with the profiler off;
- `unprofiled_step_ns`, the step without the profiler itself where it is estimated (profiler_cost.py's
  fits: the profiled step less the fitted cost against the same job timed without the profiler).
The renderers state it beside that column's figure, and name the column wherever both are shown.
"""
from __future__ import annotations

from dataclasses import dataclass

PROFILED, UNPROFILED = "predicted_ns", "predicted_unprofiled_ns"
ESTIMATED_STEP = "unprofiled_step_ns"  # the profiler cost fit's band (profiler_cost.py): of the step it estimates
COLUMN_WORDS = {PROFILED: "of the profiled prediction", UNPROFILED: "of the prediction without the profiler",
                ESTIMATED_STEP: "of the step estimated without the profiler"}
NO_BAND = "no band measured"


@dataclass(frozen=True)
class Band:
    low_frac: float
    high_frac: float
    measured: str  # on what, against what
    pair: str  # the runs it was measured on, in a few words: never the user's trace
    column: str  # the answer's column whose error it is (module docstring): said, never assumed

    def short(self) -> str:
        """'error -15% to -6% on our gloo CPU pairs': where the error was measured, so that nobody
        reads it as measured on the trace at hand."""
        span = (_percent(self.low_frac) if round(100 * self.low_frac) == round(100 * self.high_frac)
                else f"{_percent(self.low_frac)} to {_percent(self.high_frac)}")
        return f"error {span} on our {self.pair}" if self.pair else f"error {span} on our own runs"

    def text(self) -> str:
        """short(), the column it is of, and what it was measured on: for a line of its own,
        read beside both columns."""
        return f"{self.short()}, {COLUMN_WORDS[self.column]} ({self.measured})"

    def doc(self) -> dict:
        return {"low_frac": self.low_frac, "high_frac": self.high_frac, "measured": self.measured,
                "column": self.column}


def _percent(frac: float) -> str:
    return f"{100 * frac:+.0f}%"


BANDS = {
    # whatif-step-1gpu-torch: the profiled replay, 1.149 ms over its steps (its median step 1.146 ms,
    # +0.5%), against 1.140 ms timed without the profiler under one whole-step CUDA graph (H100). The
    # profiler cannot slow a step whose host is off the path, so the profiled replay is the prediction
    # measured against a step without it; the user-time column gives 1.140 ms on that trace.
    "no-host-gaps": Band(0.007, 0.007, "one H100 training step against the same step under one whole-step CUDA "
                                         "graph timed without the profiler; torch.compile's reduce-overhead, several "
                                         "graphs, ran 2.2x slower than that",
                         "H100 step pair, eager against captured", PROFILED),
    # three 2-rank gloo runs late every other step, under the profiler: each run's steps with the late
    # work replayed by balance against its steps without it (the same trace): -5.6%, -8.9%, -15.3%;
    # gloo-2cpu-equal: 13% claimed, no straggler
    "balance": Band(-0.153, -0.056, "2 gloo CPU ranks, 3 profiled runs, against their own steps without the late "
                                    "rank's work; it leans low because it evens the ranks' own noise too: on a CPU "
                                    "job without a straggler it still claimed 13%, on two 2-GPU jobs without one 0%",
                    "gloo CPU runs with a late rank", PROFILED),
    # whatif-stall-2gpu-torch, each stall step's profiled replay against its slowest rank's own step
    # range in the trace less the stall
    "remove": Band(-0.013, 0.010, "a host stall on one of 2 H100 DDP ranks, each profiled step against the slowest "
                                  "rank's own step range less the stall; removing 10 ms of GPU work from a host-bound "
                                  "rank: 0.2 ms predicted, -0.6 ms measured",
                   "2-H100 DDP runs with a host stall", PROFILED),
    # the same capture and reference, the stall found as untraced host time after its sync (not by its range)
    "no-host-stalls": Band(-0.013, 0.010, "a host stall after a sync on one of 2 H100 DDP ranks, each profiled step "
                                          "against the slowest rank's own step range less the stall",
                           "2-H100 DDP runs with a host stall", PROFILED),
    # ddp-naive-16cpu-torch (17 per-parameter all-reduces a step, waited for after the backward) against
    # ddp-naive-16cpu-after-none (--ddp bucketed, run for real with the profiler off): predicted
    # 12.77 ms without the profiler against 10.65 ms measured, the median of three runs of the change
    # that spread 9.98-17.69 ms. One pair of one job on CPUs: tests/test_whatif_bands.py recomputes it.
    "overlap-comm": Band(0.199, 0.199, "2-rank gloo DDP on 16 CPU cores, per-parameter all-reduces after the backward "
                                       "against bucketed DDP run for real with the profiler off; that change's runs "
                                       "spread -6% to +66% about the one taken",
                         "one gloo CPU pair, naive against bucketed DDP", UNPROFILED),
}


# forms of a scenario that model another change than the one its band was measured on: no band
# (balance's was measured on runs without the late rank's extra work, which `balance` removes;
# `balance:share` moves that work onto the other ranks, and no kept pair made that change for real)
OTHER_CHANGE = frozenset({("balance", "share")})


def band(name: str, arg: str = "") -> Band | None:
    """The measured band of a scenario (by name: `remove` for `remove:X`, its argument a pattern),
    None where none was measured, for that change (OTHER_CHANGE)."""
    return None if (name, arg) in OTHER_CHANGE else BANDS.get(name)
