"""One rank's replay started from the measured times (what the path_bounds digest runs: bound.py)
gives every node the same start and end as one started from nothing, in fewer rounds: the
graph is acyclic once join has broken its cycles, so the replay has one solution, whatever it
starts from. Checked on Kineto and nsys captures, with steps and without, CPU-only and GPU;
a graph whose cycle join broke, beside them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tracelab
from tracelab.reports.whatif.nodes import rank_graph
from tracelab.reports.whatif.bound import rank_path_bounds
from tracelab.reports.whatif.join import join
from tracelab.reports.whatif.replay import measured, replay
from helpers import slow_after

DATA = Path(__file__).parent / "data"
CAPTURES = ["gloo-2cpu-alternating", "ddp-2gpu-late-torch", "ddp-2gpu-late-nsys", "decode-1gpu-steps-torch",
            "graph-1gpu-torch", "idle-sync-1gpu-torch", "decode-compile-cpu-torch"]


def _graphs(name: str):
    for p in tracelab.load_many(DATA / name):
        yield p, join({0: rank_graph(p.events, p.host, 0)}, {0: None})


@slow_after(1)
@pytest.mark.parametrize("name", CAPTURES)
def test_the_replay_from_measured_times_is_the_cold_one(name: str) -> None:
    for _, g in _graphs(name):
        assert len(g)
        cold, warm = replay(g, measured(g)), replay(g, measured(g), cold=False)
        assert np.array_equal(cold.start_ns, warm.start_ns) and np.array_equal(cold.end_ns, warm.end_ns)
        assert np.array_equal(cold.pred, warm.pred) and warm.rounds <= cold.rounds


@pytest.mark.slow
def test_the_bound_is_that_of_the_cold_replay(monkeypatch) -> None:
    """rank_path_bounds with its replay forced cold: the same table."""
    from tracelab.reports.whatif import bound

    [p, *_] = tracelab.load_many(DATA / "ddp-2gpu-late-torch")
    fast = rank_path_bounds(p.events, p.host)
    monkeypatch.setattr(bound, "replay", lambda g, base, cold=True: replay(g, base))
    slow = rank_path_bounds(p.events, p.host)
    assert len(fast) and fast.equals(slow)
