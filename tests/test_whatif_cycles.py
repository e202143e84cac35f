"""Cycles in the what-if dependency graph (reports/whatif/cycles.py): found before any replay,
named in one line, and broken where the trace's times are at fault; hand-made traces, each
beside a good one, every answer worked out by hand."""
from __future__ import annotations

import time

import numpy as np
import pytest

from tracelab.reports.whatif.analyse import whatif
from tracelab.reports.whatif.nodes import rank_graph
from tracelab.reports.whatif.cycles import find_cycle
from tracelab.reports.whatif.join import join
from tracelab.reports.whatif.kinds import GPU, SYNC
from tracelab.reports.whatif.replay import ReplayError, measured, replay

from helpers import host_rows, kernel_rows

ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
ALL_GATHER = "ncclDevKernel_AllGather_RING_LL"


def _two_threads(sync_start_ns: int):
    """K (stream 7) launched at 0 waits on K0 (stream 8, launched at 20 us, 30-40 us); a
    device sync from `sync_start_ns` to 300 us returns after K (100-200 us) ends. With the sync
    begun before K0's launch (another thread's call, overlapping it on the one host chain), the
    graph has a cycle: launch -> K0 -> K -> sync -> (host chain) -> launch."""
    events = kernel_rows([("K", 7, 100_000, 100_000, 0, 5), ("K0", 8, 30_000, 10_000, 20_000, 5)])
    host = host_rows([("sync", "cudaDeviceSynchronize", sync_start_ns, 300_000 - sync_start_ns),
                  ("step", "step 0", 0, 400_000)])
    return {0: rank_graph(events, host, 0)}


def _node(g, kind: int, name: str) -> int:
    return int(np.flatnonzero((g.kind == kind) & (g.name == name))[0])


def test_a_good_graph_has_no_cycle_and_replays_as_measured() -> None:
    g = join(_two_threads(25_000), {0: None})  # the sync begins after K0's launch: no overlap
    assert find_cycle(g, g.edges, g.chain, g.group) is None
    assert not [n for n in g.notes if n.code == "dependency_cycle"]
    r = replay(g, measured(g))
    assert np.array_equal(r.start_ns, g.start_ns) and np.array_equal(r.end_ns, g.end_ns)


def test_a_cycle_from_overlapping_host_threads_is_broken_at_its_inferred_wait() -> None:
    graphs = _two_threads(10_000)
    g = join(graphs, {0: None})
    k, sync = _node(g, GPU, "K"), _node(g, SYNC, "cudaDeviceSynchronize")
    [note] = [n.text for n in g.notes if n.code == "dependency_cycle"]
    assert "-[wait]-> rank 0 stream 7 K (step 0)" in note and "-[sync]-> rank 0 host cudaDeviceSynchronize" in note
    assert note.endswith("the wait edge into rank 0 stream 7 K (step 0) is dropped")
    assert g.edges.xe_src[k] == -1 and g.edges.pinned[k] and g.edges.y_src[sync] == k  # the sync edge stays
    assert find_cycle(g, g.edges, g.chain, g.group) is None
    r = replay(g, measured(g))  # K pinned at its measured start: the unchanged replay is still exact
    assert np.array_equal(r.start_ns, g.start_ns) and np.array_equal(r.end_ns, g.end_ns)
    t0 = time.process_time()
    w = whatif(graphs, {0: None}, ["no-host-gaps", "scale:K=2"])  # answers, fast, and says why it claims nothing
    assert time.process_time() - t0 < 2.0
    assert any(n.code == "dependency_cycle" and "contradict" in n.text for n in w.notes)


def test_a_cycle_left_in_the_graph_fails_at_once_naming_it() -> None:
    g = join(_two_threads(10_000), {0: None})
    k, k0 = _node(g, GPU, "K"), _node(g, GPU, "K0")
    p = measured(g)
    p.xe_src[k], p.xe_off_ns[k] = k0, 60_000  # the dropped wait, put back
    p.gap_ns[g.kind == SYNC] = 0
    p.gap_ns[:] = np.maximum(p.gap_ns, 0)  # no-host-gaps' closed gaps: the cycle's weight > 0, it cannot settle
    t0 = time.process_time()
    with pytest.raises(ReplayError) as e:
        replay(g, p)
    assert time.process_time() - t0 < 0.5
    text = str(e.value)
    assert "\n" not in text and "cycle" in text
    assert ("rank 0 stream 8 K0 (step 0) -[wait]-> rank 0 stream 7 K (step 0) -[sync]-> "
            "rank 0 host cudaDeviceSynchronize (step 0) -[chain]-> rank 0 host launch (step 0)") in text


def _crossing(order_r1: tuple[str, str]):
    """Two ranks, two collectives (all-reduce then all-gather on rank 0) on one stream; rank 1
    runs them in `order_r1`. Crossed, each waits on the other's last arrival: a cycle."""
    def rank(names, r):  # rank 1 10 ns behind (collectives.match numbers collectives by first arrival)
        ev = kernel_rows([(names[0], 7, 1000 + 10 * r, 100, 0, 1), (names[1], 7, 1100 + 10 * r, 100, 1, 1)], rank=r)
        ev["msg_bytes"] = 1000.0
        return rank_graph(ev, host_rows([("step", "step 0", 0, 5000)]), r)
    return {0: rank((ALL_REDUCE, ALL_GATHER), 0), 1: rank(order_r1, 1)}


def test_collectives_matched_in_crossing_orders_lose_one_match() -> None:
    good = join(_crossing((ALL_REDUCE, ALL_GATHER)), {0: 0, 1: 0})
    assert (good.group >= 0).sum() == 4 and not [n for n in good.notes if n.code == "dependency_cycle"]
    bad = join(_crossing((ALL_GATHER, ALL_REDUCE)), {0: 0, 1: 0})
    [note] = [n.text for n in bad.notes if n.code == "dependency_cycle"]
    assert note.count("-[collective]->") == 2 and "the collective edge into" in note
    assert (bad.group >= 0).sum() == 2  # one collective's match dropped: its members end as measured
    assert find_cycle(bad, bad.edges, bad.chain, bad.group) is None
    replay(bad, measured(bad))
