"""How far each scenario's prediction has been from the step measured without the cause, on
real runs (benchmarks/RESULTS.md): the answer states it beside each prediction, so
that nobody reads a replay as exact. A scenario without a band has not been measured against
a run without its cause: its prediction is stated with no band, never with a made-up one.

The errors are those of the predicted step time against the measured one, (predicted -
measured) / measured. They are not applied to the prediction: they are what it was off by.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Band:
    low_frac: float
    high_frac: float
    measured: str  # on what, against what
    pair: str = ""  # the runs it was measured on, in a few words: never the user's trace

    def short(self) -> str:
        """'error -15% to -6% on our gloo CPU pairs': where the error was measured, so that nobody
        reads it as measured on the trace at hand."""
        span = (f"{100 * self.low_frac:+.0f}%" if round(100 * self.low_frac) == round(100 * self.high_frac)
                else f"{100 * self.low_frac:+.0f}% to {100 * self.high_frac:+.0f}%")
        return f"error {span} on our {self.pair}" if self.pair else f"error {span} on our own runs"

    def text(self) -> str:
        return f"{self.short()} ({self.measured})"

    def doc(self) -> dict:
        return {"low_frac": self.low_frac, "high_frac": self.high_frac, "measured": self.measured}


BANDS = {
    # whatif-step-1gpu-torch: 1.149 ms predicted, 1.140 ms timed under one whole-step CUDA graph (H100)
    "no-host-gaps": Band(0.007, 0.007, "one H100 training step against the same step under one whole-step CUDA "
                                         "graph; torch.compile's reduce-overhead, several graphs, ran 2.2x slower "
                                         "than that", "H100 step pair, eager against captured"),
    # three 2-rank gloo runs, late every other step: -5.6%, -8.9%, -15.3%; gloo-2cpu-equal: 13% claimed, no straggler
    "balance": Band(-0.153, -0.056, "2 gloo CPU ranks, 3 runs, against the steps without the late rank; it leans "
                                    "low because it evens the ranks' own noise too: on a CPU job without a "
                                    "straggler it still claimed 13%, on two 2-GPU jobs without one 0%",
                 "gloo CPU runs with a late rank"),
    # whatif-stall-2gpu-torch, each stall step against its slowest rank's own step range less the stall
    "remove": Band(-0.013, 0.010, "a host stall on one of 2 H100 DDP ranks, each step against the slowest rank's "
                                  "own step range less the stall; removing 10 ms of GPU work from a host-bound "
                                  "rank: 0.2 ms predicted, -0.6 ms measured", "2-H100 DDP runs with a host stall"),
    # the same capture and reference, the stall found as untraced host time after its sync (not by its range)
    "no-host-stalls": Band(-0.013, 0.010, "a host stall after a sync on one of 2 H100 DDP ranks, each step against "
                                          "the slowest rank's own step range less the stall",
                           "2-H100 DDP runs with a host stall"),
}


# forms of a scenario that model another change than the one its band was measured on: no band
# (balance's was measured on runs without the late rank's extra work, which `balance` removes;
# `balance:share` moves that work onto the other ranks)
OTHER_CHANGE = frozenset({("balance", "share")})


def band(name: str, arg: str = "") -> Band | None:
    """The measured band of a scenario (by name: `remove` for `remove:X`, its argument a pattern),
    None where none was measured, for that change (OTHER_CHANGE)."""
    return None if (name, arg) in OTHER_CHANGE else BANDS.get(name)
