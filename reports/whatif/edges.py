"""The edges of one rank's graph (nodes.py), with offsets taken from the measured times so
that the unchanged replay puts every node where it was measured. Pure.

A device node has two candidate edges: its chain predecessor's end (queued behind its
stream) and its launch call's start (launched onto an idle stream). The measured start fixes
one of them: the edge with the smaller residual over its floor (the rank's least launch-to-
start delay, or no gap on the stream) binds and keeps its measured offset, but a node that
started before its launch call returned (or within UNEXPLAINED_NS of it) and later than that
after its predecessor's end is bound by the call; the other edge gets its floor, so a scenario
that moves the other edge earlier cannot make the node start early and one that moves it later
delays it as it should. A device node that started more than
UNEXPLAINED_NS after both (waiting on another stream's event) takes a wait edge from the
latest op of another chain of its rank that ended before it, where one did and that explains
more; else the delay stays on its binding edge, as measured: launch latency where its launch
binds (but what it waited past UNEXPLAINED_NS after its launch call returned is `unexplained_ns`:
a HIP kernel queued behind an event for 463 ms is no launch latency that a faster host removes),
and `unexplained_ns` where only its chain (or nothing) does. A step where unexplained delays add
up to more than MAX_UNEXPLAINED of the step claims no saving (an edge is missing).

A synchronising call that was still running when a GPU op it could wait on (launched before
the call began) ended gets a sync edge from the latest such op: it returns `y_off_ns` (its
measured return latency) after that op's end. In a CPU-only trace, a host op that began
after a collective of its rank ended, with its thread idle since before that end, waits on it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .kinds import COLL, GPU, HOST_OP, NONE, SYNC
from .nodes import RankGraph

UNEXPLAINED_NS = 20_000
TAIL_NS = 200_000  # an op may start this long before a running op of another stream ends (its SMs freeing)
MAX_UNEXPLAINED = 0.02
LAUNCH_FLOOR_PCT = 5  # the percentile of launch-to-start delays taken as the least
PAIRS = 1 << 20  # (late node, candidate) pairs _explain weighs at once


@dataclass
class EdgeArrays:
    """Per node: the chain gap, the launch (start->start), wait (end->start) and sync (end->end)
    edges' sources (-1: none) and offsets, and whether it is pinned at its measured start."""

    gap_ns: np.ndarray
    xs_src: np.ndarray
    xs_off_ns: np.ndarray
    xe_src: np.ndarray
    xe_off_ns: np.ndarray
    y_src: np.ndarray
    y_off_ns: np.ndarray
    pinned: np.ndarray


@dataclass
class Edges(EdgeArrays):
    """One rank's (or, joined, every rank's) edges as measured, and what the builder found."""

    launch_floor_ns: np.ndarray  # per node, its rank's least launch-to-start delay
    unexplained_ns: np.ndarray
    launch_bound: np.ndarray  # bool: a device node whose launch edge binds


def chain_order(g: RankGraph) -> np.ndarray:
    """Node indices sorted by chain, then measured start (then end)."""
    return np.lexsort((g.end_ns, g.start_ns, g.chain))


def predecessors(chain: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Per node, its chain predecessor in `order` (NONE for a chain's first)."""
    pred = np.full(len(chain), NONE, np.int64)
    same = chain[order[1:]] == chain[order[:-1]]
    pred[order[1:][same]] = order[:-1][same]
    return pred


def rank_edges(g: RankGraph, order: np.ndarray | None = None) -> Edges:
    """The edges of one rank's nodes (module docstring); `order`: chain_order(g), where the caller has it."""
    n, s, e = len(g), g.start_ns, g.end_ns
    big = np.iinfo(np.int64).max // 4
    pred = predecessors(g.chain, chain_order(g) if order is None else order)
    has_pred = pred >= 0
    gap = np.where(has_pred, s - e[np.maximum(pred, 0)], 0).astype(np.int64)
    device = np.isin(g.kind, (GPU, COLL))
    launched = device & (g.launch >= 0)
    lat = np.where(launched, s - s[np.maximum(g.launch, 0)], big)
    floor = int(np.percentile(lat[launched & (lat >= 0)], LAUNCH_FLOOR_PCT)) if (launched & (lat >= 0)).any() else 0
    res_q = np.where(has_pred, gap, big)
    res_l = np.where(launched, lat - floor, big)
    # an op that started before its launch call returned (or within UNEXPLAINED_NS of it: a blocking
    # copy staging pageable memory, a launch that waited for room in the queue) was held by that
    # call, not by its stream, however long after its predecessor's end it started
    call_end = np.where(launched, e[np.maximum(g.launch, 0)], big)
    in_call = launched & (s <= call_end + UNEXPLAINED_NS) & (res_q > UNEXPLAINED_NS)
    launch_bound = launched & ((res_l < res_q) | in_call)
    queued = device & has_pred & ~launch_bound & (gap >= 0)
    queue_gap = int(np.median(gap[queued])) if queued.any() else 0  # the device's own gap between queued ops
    ed = Edges(gap_ns=gap, xs_src=np.where(launched, g.launch, NONE).astype(np.int64),
               xs_off_ns=np.where(launch_bound, lat, np.minimum(floor, lat)) * launched,
               xe_src=np.full(n, NONE, np.int64), xe_off_ns=np.zeros(n, np.int64), y_src=np.full(n, NONE, np.int64),
               y_off_ns=np.zeros(n, np.int64), pinned=~has_pred & ~launched, launch_floor_ns=np.full(n, floor, np.int64),
               unexplained_ns=np.zeros(n, np.int64), launch_bound=launch_bound)
    ed.gap_ns[launch_bound & has_pred] = np.minimum(queue_gap, gap[launch_bound & has_pred])
    _explain(g, ed, pred, device & ~ed.pinned, np.minimum(res_q, res_l))
    if g.cpu_only:
        _cpu_waits(g, ed, pred)
    else:
        _sync_waits(g, ed)
    return ed


def _explain(g: RankGraph, ed: Edges, pred: np.ndarray, device: np.ndarray, residual: np.ndarray) -> None:
    """Device nodes that started UNEXPLAINED_NS after both edges: a wait edge from the op of
    another chain of the rank whose end is nearest their start (one that ended before: an
    event; one still running, up to TAIL_NS before its end: its SMs freeing), where that
    explains more; else their delay stays as measured."""
    late = np.flatnonzero(device & (residual > UNEXPLAINED_NS))
    if not len(late):
        return
    dev = np.flatnonzero(np.isin(g.kind, (GPU, COLL)))
    by_end = dev[np.argsort(g.end_ns[dev], kind="stable")]
    ends = g.end_ns[by_end]
    lo = np.searchsorted(ends, g.start_ns[late] - residual[late], side="left")
    hi = np.maximum(np.searchsorted(ends, g.start_ns[late] + TAIL_NS, side="right"), lo)
    found = np.full(len(late), NONE, np.int64)
    for part in _parts(hi - lo, PAIRS):
        found[part] = _nearest_end(g, late[part], by_end, lo[part], hi[part])
    hit, j = late[found >= 0], found[found >= 0]
    missed = late[found < 0]
    wait = g.start_ns[hit] - g.end_ns[j]
    ed.xe_src[hit], ed.xe_off_ns[hit] = j, wait
    _relax(g, ed, pred, hit)
    ed.unexplained_ns[hit] = np.maximum(0, wait - UNEXPLAINED_NS)
    bound = missed[ed.launch_bound[missed]]  # its delay is launch latency, as measured, until its call returned
    ed.unexplained_ns[bound] = np.maximum(0, g.start_ns[bound] - g.end_ns[g.launch[bound]] - UNEXPLAINED_NS)
    missed = missed[~ed.launch_bound[missed]]
    ed.unexplained_ns[missed] = residual[missed]


def _parts(sizes: np.ndarray, most: int) -> list[slice]:
    """Consecutive slices of `sizes` each summing to at most `most` (or one element alone)."""
    out, begin, total = [], 0, 0
    for k, n in enumerate(sizes.tolist()):
        if k > begin and total + n > most:
            out.append(slice(begin, k))
            begin, total = k, 0
        total += n
    return out + [slice(begin, len(sizes))] if len(sizes) else out


def _nearest_end(g: RankGraph, late: np.ndarray, by_end: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per late node, the device op among by_end[lo:hi] of another chain begun before it whose end
    is nearest its start (the first in by_end's order of equals), NONE where there is none:
    every (node, candidate) pair at once."""
    size = hi - lo
    owner = np.repeat(np.arange(len(late)), size)  # pair -> late node, candidates in by_end order
    cand = by_end[np.repeat(lo - np.r_[0, np.cumsum(size)[:-1]], size) + np.arange(int(size.sum()))]
    i = late[owner]
    ok = (g.chain[cand] != g.chain[i]) & (g.start_ns[cand] < g.start_ns[i])
    owner, cand, i = owner[ok], cand[ok], i[ok]
    order = np.lexsort((np.abs(g.end_ns[cand] - g.start_ns[i]), owner))  # stable: the first of equals
    first = order[np.r_[True, owner[order][1:] != owner[order][:-1]]] if len(order) else order
    out = np.full(len(late), NONE, np.int64)
    out[owner[first]] = cand[first]
    return out


def _relax(g: RankGraph, ed: Edges, pred: np.ndarray, i: np.ndarray) -> None:
    """Nodes i are bound by their wait edge: their chain and launch edges drop to their floors."""
    chained = i[pred[i] >= 0]
    ed.gap_ns[chained] = np.minimum(ed.gap_ns[chained], 0)  # no gap on the stream: the wait explains the delay
    launched = i[ed.xs_src[i] >= 0]
    ed.xs_off_ns[launched] = np.minimum(ed.launch_floor_ns[launched],
                                        g.start_ns[launched] - g.start_ns[ed.xs_src[launched]])
    ed.launch_bound[i] = False


def _sync_waits(g: RankGraph, ed: Edges) -> None:
    """Sync calls: the latest GPU op launched before the call that ended while it ran."""
    sync = np.flatnonzero(g.kind == SYNC)
    dev = np.flatnonzero(np.isin(g.kind, (GPU, COLL)) & (g.launch >= 0))
    if not len(sync) or not len(dev):
        return
    launch_start = g.start_ns[g.launch[dev]]
    order = np.argsort(launch_start, kind="stable")
    dev, launch_start = dev[order], launch_start[order]
    run_max = np.maximum.accumulate(g.end_ns[dev])
    arg = _running_argmax(g.end_ns[dev])
    k = np.searchsorted(launch_start, g.start_ns[sync], side="right") - 1
    sync, k = sync[k >= 0], k[k >= 0]
    op = np.where(run_max[k] <= g.end_ns[sync], dev[arg[k]], NONE)
    for at in np.flatnonzero(op < 0).tolist():  # something launched earlier outlived the call (another stream)
        i, j = int(sync[at]), int(k[at])
        fits = dev[: j + 1][g.end_ns[dev[: j + 1]] <= g.end_ns[i]]
        if len(fits):  # the latest that did not
            op[at] = int(fits[np.argmax(g.end_ns[fits])])
    waited = (op >= 0) & (g.end_ns[np.maximum(op, 0)] > g.start_ns[sync])
    sync, op = sync[waited], op[waited]
    ed.y_src[sync], ed.y_off_ns[sync] = op, g.end_ns[sync] - g.end_ns[op]


def _running_argmax(values: np.ndarray) -> np.ndarray:
    """Per position, the index of the largest value so far (the first of ties)."""
    run = np.maximum.accumulate(values)
    new = np.r_[True, values[1:] > run[:-1]]
    idx = np.where(new, np.arange(len(values)), 0)
    return np.maximum.accumulate(idx)


def _cpu_waits(g: RankGraph, ed: Edges, pred: np.ndarray) -> None:
    """CPU-only: a host op whose thread was idle across the end of a collective of its rank
    (begun before the op) waits on the latest such collective."""
    coll = np.flatnonzero(g.kind == COLL)
    host = np.flatnonzero((g.kind == HOST_OP) & (pred >= 0))
    if not len(coll) or not len(host):
        return
    by_end = coll[np.argsort(g.end_ns[coll], kind="stable")]
    ends = g.end_ns[by_end]
    j = np.searchsorted(ends, g.start_ns[host], side="right") - 1
    ok = j >= 0
    host, j = host[ok], j[ok]
    c = by_end[j]
    waited = (ends[j] > g.end_ns[pred[host]]) & (g.start_ns[c] < g.start_ns[host])
    host, c = host[waited], c[waited]
    ed.xe_src[host] = c
    ed.xe_off_ns[host] = g.start_ns[host] - g.end_ns[c]
    ed.gap_ns[host] = np.minimum(ed.gap_ns[host], 0)
