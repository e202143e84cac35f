"""Cycles in the what-if dependency graph (reports/whatif/cycles.py): found before any replay,
named in one line, and broken where the trace's times are at fault; hand-made traces, each
beside a good one, every answer worked out by hand."""
from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

from tracelab.reports.whatif.analyse import whatif
from tracelab.reports.whatif.nodes import rank_graph
from tracelab.reports.whatif.cycles import break_cycles, find_cycle
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


# ---- many cycles: the resumed order drops what a search from scratch per cycle drops ---------

KINDS = ("wait", "collective", "sync", "launch")  # least certain first


def _random_graph(seed: int, nodes: int = 90, chains: int = 5):
    """Nodes on `chains` chains at distinct random times, with random launch, wait and sync
    sources and collectives of 2-3 members: a graph of many cycles, some through one chain."""
    rng = np.random.default_rng(seed)
    start = rng.permutation(nodes * 10)[:nodes].astype(np.int64)
    src = [np.where(rng.random(nodes) < share, rng.integers(0, nodes, nodes), -1) for share in (0.3, 0.15, 0.15)]
    group = np.full(nodes, -1, np.int64)
    members = rng.permutation(nodes)[:30]
    for gid, m in enumerate(np.split(members, [3, 5, 8, 10, 13, 15, 18, 20, 23, 25, 28])):
        group[m] = gid
    edges = SimpleNamespace(xs_src=src[0], xe_src=src[1], y_src=src[2], xs_off_ns=np.zeros(nodes, np.int64),
                            xe_off_ns=np.zeros(nodes, np.int64), y_off_ns=np.zeros(nodes, np.int64),
                            pinned=np.zeros(nodes, bool))
    return SimpleNamespace(chain=rng.integers(0, chains, nodes), start_ns=start, end_ns=start + 5, edges=edges,
                           group=group, step=np.zeros(nodes, np.int64), name=np.array([f"n{i}" for i in range(nodes)]),
                           chain_labels=[f"chain {c}" for c in range(chains)])


def _scratch_drops(g) -> list[tuple[int, int, str]]:
    """Per cycle, from scratch: every chain's vertices (start, end per node, by start time) done in
    rounds over every edge until none moves; from the lowest stuck chain, its head's first
    waiting edge (launch, wait, sync, then collectives by source) to the chain it waits on, until
    a chain repeats; that loop's least certain edge (its first met walking back) is dropped."""
    chains = sorted(set(g.chain.tolist()))
    order = sorted(range(len(g.chain)), key=lambda i: (g.chain[i], g.start_ns[i]))
    place = {i: (chains.index(g.chain[i]), 2 * sum(g.chain[j] == g.chain[i] for j in order[:order.index(i)]))
             for i in order}
    length = [2 * int((g.chain == c).sum()) for c in chains]
    edges = []  # (target chain, target vertex, rank among the vertex's edges, source chain, source vertex, src, dst, kind)
    for kind, arr, src_end, dst_end in (("launch", g.edges.xs_src, 0, 0), ("wait", g.edges.xe_src, 1, 0),
                                        ("sync", g.edges.y_src, 1, 1)):
        for dst in np.flatnonzero(arr >= 0).tolist():
            s = int(arr[dst])
            edges.append((place[dst][0], place[dst][1] + dst_end, (0, len(edges)), place[s][0],
                          place[s][1] + src_end, s, dst, kind))
    for dst in np.flatnonzero(g.group >= 0).tolist():
        for s in np.flatnonzero(g.group == g.group[dst]).tolist():
            if s != dst:
                edges.append((place[dst][0], place[dst][1] + 1, (1, s), place[s][0], place[s][1], s, dst, "collective"))
    edges.sort(key=lambda e: e[:3])
    drops = []
    while True:
        ptr, moved = [0] * len(chains), True
        while moved:
            new = [min([e[1] for e in edges if e[0] == c and ptr[e[3]] <= e[4]] + [length[c]]) for c in range(len(chains))]
            moved, ptr = new != ptr, new
        stuck = [c for c in range(len(chains)) if ptr[c] < length[c]]
        if not stuck:
            return drops
        head = {c: next(e for e in edges if e[0] == c and e[1] == ptr[c] and ptr[e[3]] <= e[4]) for c in stuck}
        seen, c = [], stuck[0]
        while c not in seen:
            seen.append(c)
            c = head[c][3]
        loop = [head[c] for c in seen[seen.index(c):]][::-1]
        weakest = min(loop, key=lambda e: KINDS.index(e[7]))
        edges.remove(weakest)
        drops.append(weakest[5:])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_many_cycles_are_broken_as_a_search_from_scratch_breaks_them(seed) -> None:
    expected = _scratch_drops(_random_graph(seed))
    g = _random_graph(seed)
    notes = break_cycles(g)
    assert len(expected) > 5 and any(kind == "collective" for _, _, kind in expected)
    assert [n.values["edge_kind"] for n in notes[:3]] == [kind for _, _, kind in expected[:3]]
    assert [n.values["node"] for n in notes[:3]] == [f"chain {g.chain[d]} n{d} (step 0)" for _, d, _ in expected[:3]]
    assert notes[3].values["cycles"] == len(expected) - 3
    fresh = _random_graph(seed)
    for kind, arr in (("launch", fresh.edges.xs_src), ("wait", fresh.edges.xe_src), ("sync", fresh.edges.y_src)):
        arr[[d for _, d, k in expected if k == kind]] = -1
    for _, d, k in expected:
        if k == "collective" and fresh.group[d] >= 0:  # its match dropped: each member ends as measured
            fresh.group[fresh.group == fresh.group[d]] = -1
    for k in ("xs_src", "xe_src", "y_src"):
        assert np.array_equal(getattr(g.edges, k), getattr(fresh.edges, k))
    assert np.array_equal(g.group, fresh.group) and g.acyclic
    assert find_cycle(g, g.edges, g.chain, g.group) is None
