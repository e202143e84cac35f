"""The critical path's walk by doubling (reports/whatif/chase.py) visits the vertices a plain
loop over `next` does, stop for stop: on every step window of captures of one and two ranks
(Kineto, nsys, CPU-only), from every node's end to a few stops, and on small made-up chains
with pinned starts, a vertex whose next is -1 (the list's last, as the loop reads it) and a
loop that only the longest-walk limit ends."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tracelab
from tracelab.reports.whatif.nodes import rank_graph
from tracelab.reports.whatif.chase import Chase
from tracelab.reports.whatif.join import join
from tracelab.reports.whatif.path import Hops, last_nodes, wait_estimate, windows
from tracelab.reports.whatif.replay import measured, replay

DATA = Path(__file__).parent / "data"


def _loop(nxt: list[int], time: list[int], stop_at: list[bool], most: int, v: int, stop_ns: int) -> list[int]:
    seen: list[int] = []
    for _ in range(most):
        if time[v] <= stop_ns and seen:
            break
        seen.append(v)
        if stop_at[v]:
            break
        v = nxt[v]
    return seen


def _same(chase: Chase, nxt: np.ndarray, v: int, stop_ns: int) -> None:
    want = _loop(nxt.tolist(), chase.time.tolist(), chase.stop_at.tolist(), chase.most, v, stop_ns)
    assert chase.walk(v, stop_ns).tolist() == want


@pytest.mark.parametrize("name", ["ddp-2gpu-late-torch", "gloo-2cpu-alternating", "idle-sync-1gpu-nsys"])
def test_the_walk_is_the_loops(name: str) -> None:
    profiles = tracelab.load_many(DATA / name)
    g = join({p.rank: rank_graph(p.events, p.host, p.rank) for p in profiles},
             {p.rank: p.meta.trace_start_epoch_ns for p in profiles})
    base = measured(g)
    r = replay(g, base)
    win = windows(g, r.start_ns, r.end_ns)
    hops = Hops(g, base, r, wait_estimate(g))
    nxt = hops.chase.nxt
    walks = 0
    for _, node, begin, _ in last_nodes(g, r, win):
        _same(hops.chase, nxt, 2 * node + 1, begin)
        walks += len(hops.walk(node, begin)) > 1
    assert walks  # the paths go somewhere
    for v in np.linspace(0, 2 * len(g) - 1, 25).astype(int).tolist():
        for stop in (-(1 << 62), int(hops.time[v]) - 1_000_000, int(hops.time[v])):
            _same(hops.chase, nxt, v, stop)


def test_made_up_chains() -> None:
    time = np.array([0, 10, 20, 30, 40, 50], np.int64)
    nxt = np.array([-1, 0, 1, 2, 3, 4], np.int64)  # 0's next is -1: the list's last (5)
    pinned = np.array([False, False, False, True, False, False])
    chase = Chase(nxt, time, pinned, 4 * 6)
    for v in range(6):
        for stop in (-5, 0, 15, 30, 60):
            _same(chase, nxt, v, stop)
    assert chase.walk(5, -5).tolist() == [5, 4, 3]  # ends after the pinned vertex
    assert chase.walk(5, 25).tolist() == [5, 4, 3]
    assert chase.walk(5, 45).tolist() == [5]
    loop = Chase(np.array([1, 0]), np.array([5, 5]), np.zeros(2, bool), 7)  # a cycle: the limit ends it
    assert loop.walk(0, 0).tolist() == [0, 1, 0, 1, 0, 1, 0] == _loop([1, 0], [5, 5], [False, False], 7, 0, 0)
