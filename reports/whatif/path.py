"""The critical path of a replay, and its composition per step. Pure.

After a replay every node's start is set by one edge (the latest: its chain predecessor, its
launch call, a node it waits on, or its measured start where pinned) and its end by its own
duration, a sync edge or its collective's last arrival. Walking those from the last node
back gives the path: a list of segments, each a span of time with what filled it:

- compute: a GPU op (a CPU op in a CPU-only trace) running;
- copy: a memcpy or memset running (the copy engines' work, a host-to-device input copy
  among them: not the kernels' compute, so a path of copies is not called GPU-bound);
- comm: a collective's transfer (from its last rank's arrival), or a CPU op enqueueing one;
- wait: the part of an unmatched collective (no peer among the inputs) beyond its fastest
  instance of the same name and size: waiting for a rank the inputs do not hold;
- launch: a launch call running, or the delay from a launch call's start to its op's start;
- host: the host between two calls (untraced host work, Python, CPU ops);
- sync: a synchronising call returning after the GPU op it waited on, or a CPU thread
  blocked until a collective ended;
- other: the GPU's own gap between queued ops, a wait on another stream, pinned starts (and
  where the path reaches a device node that started as measured, the time before it in the
  window; before a host chain's first call, that time is host time, untraced).

A step's window runs from the previous step's end (the end of its last GPU op, or CPU op in
a CPU-only trace, over all ranks) to its own, the first step's from its first node; a trace
without steps is one window from its first GPU op or launch of one (not a sync or other call
before any work) to its last op's end; the path's segments are cut at the windows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .chase import Chase
from .join import Graph
from .kinds import COLL, GPU, HOST_OP, LAUNCH, SYNC
from .replay import NEG, Params, Replayed, _group_max, _groups

CATEGORIES = ("compute", "copy", "comm", "launch", "host", "sync", "wait", "other")
_CHAIN, _XS, _XE, _ANCHOR = 0, 1, 2, 3
_OWN, _Y, _COLL = 0, 1, 2


@dataclass
class Path:
    """The path's segments (t0_ns, t1_ns, category, rank, chain, node, name), latest first."""

    segments: pd.DataFrame


def bindings(g: Graph, p: Params, r: Replayed) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node, the edge that set its start (_CHAIN.._ANCHOR) and its end (_OWN, _Y, _COLL),
    and its collective's last arrival (NEG where none)."""
    s, e = np.append(r.start_ns, NEG), np.append(r.end_ns, NEG)
    n = len(g)

    def at(a: np.ndarray, src: np.ndarray) -> np.ndarray:
        return a[np.where(src >= 0, src, n)]

    chain = np.where(r.pred >= 0, at(e, r.pred) + p.gap_ns, NEG)
    cands = np.vstack([chain, at(s, p.xs_src) + p.xs_off_ns, at(e, p.xe_src) + p.xe_off_ns,
                       np.where(p.pinned, g.start_ns, NEG)])
    last = np.where(p.group >= 0, _group_max(s, _groups(p.group))[np.maximum(p.group, 0)], NEG)
    ends = np.vstack([r.start_ns + p.dur_ns, at(e, p.y_src) + p.y_off_ns, np.where(p.group >= 0, last + p.dur_ns, NEG)])
    return np.argmax(cands, axis=0), np.argmax(ends, axis=0), last


def step_paths(g: Graph, p: Params, r: Replayed, win: pd.DataFrame, wait_est_ns: np.ndarray) -> dict[int, Path]:
    """Per step window, the critical path from the node that ends it back to its begin."""
    if not len(g) or not len(win):
        return {}
    hops = Hops(g, p, r, wait_est_ns)
    return {step: Path(hops.segments(hops.walk(node, begin), begin, g)) for step, node, begin, _ in last_nodes(g, r, win)}


def last_nodes(g: Graph, r: Replayed, win: pd.DataFrame):
    """Per window: (step, the node whose end ends it, begin_ns, end_ns)."""
    work = np.isin(g.kind, (GPU, COLL)) if not g.cpu_only else np.ones(len(g), bool)
    nodes = np.flatnonzero(work)
    by_step = nodes[np.lexsort((r.end_ns[nodes], g.step[nodes]))]  # by step, end, then node
    by_end = nodes[np.argsort(r.end_ns[nodes], kind="stable")]  # by end, then node
    keys = (g.step[by_step], r.end_ns[by_step], r.end_ns[by_end])
    for step, begin, end in zip(*(win[c].tolist() for c in ("step", "begin_ns", "end_ns"))):
        node = _first_ending(keys, by_step, by_end, step, end)
        yield int(step), int(np.argmax(np.where(work, r.end_ns, NEG))) if node is None else node, int(begin), end


def _first_ending(keys: tuple, by_step: np.ndarray, by_end: np.ndarray, step: int, end: int) -> int | None:
    """The first work node (by index) of `step` (any step where step < 0) that ends at `end`."""
    step_sorted, end_in_step, end_sorted = keys
    if step < 0:
        k = int(np.searchsorted(end_sorted, end, side="left"))
        return int(by_end[k]) if k < len(by_end) and end_sorted[k] == end else None
    a, b = np.searchsorted(step_sorted, step, side="left"), np.searchsorted(step_sorted, step, side="right")
    k = int(a + np.searchsorted(end_in_step[a:b], end, side="left"))
    return int(by_step[k]) if k < b and end_in_step[k] == end else None


_CODE = {c: i for i, c in enumerate(CATEGORIES)}
_C = {c: np.int8(i) for i, c in enumerate(CATEGORIES)}


class Hops:
    """The path's moves, made for every vertex at once (numpy): vertex 2*node is a node's start,
    2*node + 1 its end; each has the vertex the path goes to next (the edge that set its time) and
    the segments it adds on the way (one; two at an unmatched collective's end: comm, then wait).
    A start set by no edge (pinned at its measured start, _ANCHOR) ends the walk: the time before
    it back to the walk's stop is host time on a host chain, else other. `walk` is then a chase
    of integers (chase.py); the segments are gathered with numpy."""

    def __init__(self, g: Graph, p: Params, r: Replayed, wait_est_ns: np.ndarray):
        n = len(g)
        start_by, end_by, last = bindings(g, p, r)
        s, e = r.start_ns.astype(np.int64), r.end_ns.astype(np.int64)
        kind = g.kind
        host_kind = np.isin(kind, (LAUNCH, SYNC, HOST_OP))
        nxt = np.full(2 * n, -1, np.int64)
        t0 = np.zeros((2 * n, 2), np.int64)  # [vertex, first or second segment]
        t1 = np.zeros((2 * n, 2), np.int64)
        cat = np.zeros((2 * n, 2), np.int8)
        two = np.zeros(2 * n, bool)
        # ends (odd vertices)
        end_v = 2 * np.arange(n) + 1
        y = end_by == _Y
        t0[end_v[y], 0], t1[end_v[y], 0], cat[end_v[y], 0] = e[p.y_src[y]], e[y], _C["sync"]
        nxt[end_v[y]] = 2 * p.y_src[y] + 1
        coll = end_by == _COLL
        members = _members(p.group, r.start_ns)
        t0[end_v[coll], 0], t1[end_v[coll], 0], cat[end_v[coll], 0] = last[coll], e[coll], _C["comm"]
        nxt[end_v[coll]] = 2 * np.array([members[k] for k in p.group[coll].tolist()], dtype=np.int64)
        own = ~y & ~coll
        t0[end_v[own], 0], t1[end_v[own], 0], nxt[end_v[own]] = s[own], e[own], 2 * np.flatnonzero(own)
        comm_op = g.op_class == "communication"
        own_cat = np.select([(kind == GPU) & g.copy, kind == GPU, kind == COLL, kind == LAUNCH, kind == SYNC, comm_op],
                            [_C["copy"], _C["compute"], _C["comm"], _C["launch"], _C["sync"], _C["comm"]], _C["compute"])
        cat[end_v[own], 0] = own_cat[own]
        split = own & (kind == COLL)  # unmatched: the wait estimate first in time, listed second
        w = np.minimum(np.maximum(wait_est_ns[split], 0), e[split] - s[split])
        t0[end_v[split], 0] = s[split] + w
        t0[end_v[split], 1], t1[end_v[split], 1], cat[end_v[split], 1] = s[split], s[split] + w, _C["wait"]
        two[end_v[split]] = True
        # starts (even vertices)
        start_v = 2 * np.arange(n)
        gap_cat = np.where(host_kind, _C["host"], _C["other"]).astype(np.int8)
        for how, src, src_end, t_src, category in (
                (_CHAIN, r.pred, 1, e, gap_cat), (_XS, p.xs_src, 0, s, np.full(n, _C["launch"], np.int8)),
                (_XE, p.xe_src, 1, e, np.where(kind == HOST_OP, _C["sync"], _C["other"]).astype(np.int8))):
            on = start_by == how
            t0[start_v[on], 0], t1[start_v[on], 0] = t_src[src[on]], s[on]
            cat[start_v[on], 0], nxt[start_v[on]] = category[on], 2 * src[on] + src_end
        anchor = start_by == _ANCHOR
        t1[start_v[anchor], 0], cat[start_v[anchor], 0] = s[anchor], gap_cat[anchor]
        self.anchor = np.zeros(2 * n, bool)
        self.anchor[start_v[anchor]] = True
        self.t0, self.t1, self.cat, self.two = t0, t1, cat, two
        self.time = np.c_[s, e].ravel()  # vertex v's time: a node's start, then its end
        self.chase = Chase(nxt, self.time, self.anchor, 4 * n + 4)

    def walk(self, node: int, stop_ns: int) -> np.ndarray:
        """The vertices the path visits from `node`'s end back until it reaches `stop_ns` or a pinned start."""
        return self.chase.walk(2 * node + 1, stop_ns)

    def arrays(self, seen: np.ndarray, stop_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(t0_ns, t1_ns, category code, vertex) of the walk's segments, latest first."""
        v = np.asarray(seen, dtype=np.int64)
        two = self.two[v]
        pinned_last = bool(len(v)) and bool(self.anchor[v[-1]])
        if not two.any() and not (pinned_last and self.time[v[-1]] <= stop_ns):  # one segment per vertex, each kept
            t0 = self.t0[v, 0]
            if pinned_last:  # the time before a pinned start, back to the stop
                t0[-1] = stop_ns
            return t0, self.t1[v, 0], self.cat[v, 0], v
        keep = np.empty((len(v), 2), bool)
        keep[:, 0], keep[:, 1] = True, two
        t0 = self.t0[v]
        if pinned_last:  # the time before a pinned start, back to the stop
            t0[-1, 0] = stop_ns
            keep[-1, 0] = self.time[v[-1]] > stop_ns
        keep = keep.ravel()
        return (t0.ravel()[keep], self.t1[v].ravel()[keep], self.cat[v].ravel()[keep],
                np.repeat(v, 2)[keep])

    def segments(self, seen: np.ndarray, stop_ns: int, g: Graph) -> pd.DataFrame:
        t0, t1, cat, v = self.arrays(seen, stop_ns)
        node = v // 2
        return pd.DataFrame({"t0_ns": t0, "t1_ns": t1, "category": np.array(CATEGORIES, dtype=object)[cat],
                             "rank": g.rank[node], "chain": g.chain[node], "node": node, "name": g.name[node]})


def _members(group: np.ndarray, start: np.ndarray) -> dict[int, int]:
    """Per collective, its last-arriving member."""
    idx = np.flatnonzero(group >= 0)
    if not len(idx):
        return {}
    order = idx[np.lexsort((start[idx], group[idx]))]
    last = np.r_[group[order][1:] != group[order][:-1], True]
    return dict(zip(group[order][last].tolist(), order[last].tolist()))


def wait_estimate(g: Graph) -> np.ndarray:
    """Per unmatched collective, its time beyond the fastest of its rank's instances of the same
    name and size (the rest is taken as the transfer); 0 elsewhere."""
    out = np.zeros(len(g), np.int64)
    idx = np.flatnonzero((g.kind == COLL) & (g.group < 0))
    if not len(idx):
        return out
    dur = g.end_ns[idx] - g.start_ns[idx]
    keys = [g.rank[idx], pd.factorize(g.name[idx].astype(str))[0], np.nan_to_num(g.msg_bytes[idx], nan=-1)]
    order = np.lexsort(keys[::-1])  # by rank, name, size: each (rank, name, size) a run
    first = np.r_[True, np.any([k[order][1:] != k[order][:-1] for k in keys], axis=0)]
    run = np.cumsum(first) - 1
    least = np.minimum.reduceat(dur[order], np.flatnonzero(first))
    out[idx[order]] = dur[order] - least[run]
    return out


def windows(g: Graph, start_ns: np.ndarray, end_ns: np.ndarray) -> pd.DataFrame:
    """Per step (sorted): begin_ns and end_ns of its window (module docstring); one window,
    step -1, for a trace without steps."""
    work = np.isin(g.kind, (GPU, COLL)) if not g.cpu_only else np.ones(len(g), bool)
    # steps only where some work lies in one: a step range on a thread that launched nothing (HTA's
    # triton_example) leaves the work of the trace one window, as in tracelab idle, not none
    steps = g.step if (g.step[work] >= 0).any() else np.zeros(len(g), np.int64) - 1
    sel = work & ((steps >= 0) if (steps >= 0).any() else True)
    if not sel.any():
        return pd.DataFrame({"step": [], "begin_ns": [], "end_ns": []})
    step, at = np.unique(steps[sel], return_inverse=True)  # sorted
    ends = np.full(len(step), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(ends, at.reshape(-1), end_ns[sel].astype(np.int64))
    first = steps == step[0]
    if step[0] < 0:  # no steps: from the first work node or its launch call, not from a call before
        first = _work_or_launch(g, work)  # any work (vLLM's capture trace: a 115 ms sync on an idle GPU)
    begin = np.r_[start_ns[first].min(), ends[:-1]]
    return pd.DataFrame({"step": step.astype(np.int64), "begin_ns": begin.astype(np.int64), "end_ns": ends})


def _work_or_launch(g: Graph, work: np.ndarray) -> np.ndarray:
    """The work nodes and the launch calls of work nodes (mask)."""
    out = work.copy()
    launch = g.launch[work]
    out[launch[launch >= 0]] = True
    return out


def _inside_ns(seg: pd.DataFrame, b: int, e: int) -> np.ndarray:
    """Each segment's ns inside the window [b, e] (a segment running backwards counts negative)."""
    return _inside(seg["t0_ns"].to_numpy(), seg["t1_ns"].to_numpy(), b, e)


def _inside(t0: np.ndarray, t1: np.ndarray, b: int, e: int) -> np.ndarray:
    sign = np.where(t1 >= t0, 1, -1)
    return sign * np.clip(np.minimum(np.maximum(t0, t1), e) - np.maximum(np.minimum(t0, t1), b), 0, None)


def category_ns(g: Graph, p: Params, r: Replayed, win: pd.DataFrame, wait_est_ns: np.ndarray) -> pd.DataFrame:
    """Per window (step) and category, its critical path's ns inside it (_inside): columns step +
    CATEGORIES, as composition(step_paths(...)) has them. What a step's bound needs (bound.py),
    without composition's per-class detail and without a frame of segments per step."""
    out = category_matrix(g, p, r, win, wait_est_ns)
    return pd.DataFrame({"step": win["step"].to_numpy(dtype=np.int64), **{c: out[:, i] for i, c in enumerate(CATEGORIES)}})


def category_matrix(g: Graph, p: Params, r: Replayed, win: pd.DataFrame, wait_est_ns: np.ndarray) -> np.ndarray:
    """category_ns' numbers: [window, category] (CATEGORIES' order), int64."""
    out = np.zeros((len(win), len(CATEGORIES)), np.int64)
    hops = Hops(g, p, r, wait_est_ns) if len(g) and len(win) else None
    for k, (_, node, begin, end) in enumerate(last_nodes(g, r, win) if hops else ()):
        t0, t1, cat, _ = hops.arrays(hops.walk(node, begin), begin)
        np.add.at(out[k], cat.astype(np.int64), _inside(t0, t1, begin, end).astype(np.int64))  # integers: exact
    return out


def composition(paths: dict[int, Path], win: pd.DataFrame, g: Graph) -> pd.DataFrame:
    """Per window and category, its path's ns inside it (a segment running backwards, where
    concurrent host calls overlap, counts negative); columns step + CATEGORIES, the compute by
    op class (`compute_by_class`), and the ranks and chains the path runs through."""
    rows = []
    for step, b, e in win[["step", "begin_ns", "end_ns"]].itertuples(index=False):
        seg = paths[int(step)].segments
        ns = _inside_ns(seg, b, e)
        inside = ns != 0
        by = np.zeros(len(CATEGORIES), np.int64)
        codes = pd.Categorical(seg["category"].to_numpy(), categories=CATEGORIES).codes
        np.add.at(by, codes[inside], ns[inside].astype(np.int64))
        compute = inside & (codes == CATEGORIES.index("compute"))
        classes = (pd.Series(ns[compute]).groupby(g.op_class[seg["node"].to_numpy()[compute]]).sum() if compute.any()
                   else pd.Series(dtype=np.int64))
        rows.append({"step": int(step), **{c: int(by[i]) for i, c in enumerate(CATEGORIES)},
                     "compute_by_class": {str(k): int(v) for k, v in classes.sort_values(ascending=False).items()},
                     "ranks": sorted(set(seg["rank"].to_numpy()[inside].tolist())),
                     "chains": sorted(set(seg["chain"].to_numpy()[inside].tolist()))})
    return pd.DataFrame(rows)


def _sorted_spans(g: Graph, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Rank r's host spans by start on the joined clock: (start_ns, end_ns, name); None without any."""
    spans = g.ranks[r].host_spans
    if not len(spans):
        return None
    off = g.offsets_ns.get(r, 0)
    order = np.argsort(spans["start_ns"].to_numpy(), kind="stable")
    return (spans["start_ns"].to_numpy(dtype=np.int64)[order] + off, spans["end_ns"].to_numpy(dtype=np.int64)[order] + off,
            spans["name"].to_numpy(dtype=object)[order])


def host_names(g: Graph, seg: pd.DataFrame, sorted_spans: dict | None = None) -> np.ndarray:
    """Each segment's name, host time named by the innermost range, CPU op or OS call of its
    rank's host frame that covers its middle (the latest-begun of those covering it).
    `sorted_spans`: _sorted_spans by rank, filled as needed (a caller naming many steps' segments
    sorts each rank's spans once)."""
    return _naming_spans(g, seg, sorted_spans)[0]


def _naming_spans(g: Graph, seg: pd.DataFrame, sorted_spans: dict | None = None):
    """host_names, with the start and end (ns) of the span that names each host segment (-1 where
    none does)."""
    return _span_names(g, seg["name"].to_numpy(dtype=object), (seg["category"] == "host").to_numpy(),
                       seg["rank"].to_numpy(), seg["t0_ns"].to_numpy(), seg["t1_ns"].to_numpy(),
                       sorted_spans if sorted_spans is not None else {})


def _span_names(g: Graph, names: np.ndarray, host_mask: np.ndarray, rank: np.ndarray, t0_ns: np.ndarray,
                t1_ns: np.ndarray, known: dict):
    """_naming_spans on the segments' columns: `names` the names they have (kept where no span
    names them), `known` _sorted_spans by rank, filled as needed."""
    names = names.copy()
    start_ns, end_ns = np.full(len(names), -1, np.int64), np.full(len(names), -1, np.int64)
    host = np.flatnonzero(host_mask)
    for r in np.unique(rank[host]).tolist():
        if r not in known:
            known[r] = _sorted_spans(g, r)
        if known[r] is None:
            continue
        s0, s1, label = known[r]
        mine = host[rank[host] == r]
        names[mine] = "(no CPU op or range)"
        mid = (t0_ns[mine] + t1_ns[mine]) // 2
        at = np.searchsorted(s0, mid, side="right") - 1
        found = np.full(len(mine), -1)
        for back in range(16):  # nested spans: the innermost holding mid is among the last begun
            k = at - back
            hit = (found < 0) & (k >= 0) & (s1[np.maximum(k, 0)] > mid)
            found[hit] = k[hit]
        named = mine[found >= 0]
        names[named] = label[found[found >= 0]]
        start_ns[named], end_ns[named] = s0[found[found >= 0]], s1[found[found >= 0]]
    return names, start_ns, end_ns


def _named_pieces(g: Graph, seg: pd.DataFrame, spans: dict, rounds: int = 8) -> pd.DataFrame:
    """The segments (category, rank, name, t0_ns, t1_ns) with `name`, each host segment cut at the
    bounds of the span that names it, the pieces outside named again (by the span that holds
    them, a parent or none): a name is never given more of a segment than its span lasts.
    On the columns' arrays, each round's pieces kept as the rows they came from: a step's
    segments are cut in a few rounds, and a frame per round costs more than the cutting."""
    category, rank = seg["category"].to_numpy(dtype=object), seg["rank"].to_numpy()
    host = (seg["category"] == "host").to_numpy()
    t0, t1 = seg["t0_ns"].to_numpy(dtype=np.int64), seg["t1_ns"].to_numpy(dtype=np.int64)
    names, s0, s1 = _span_names(g, seg["name"].to_numpy(dtype=object), host, rank, t0, t1, spans)
    rows = np.arange(len(seg))
    for _ in range(rounds):
        over = (s0 >= 0) & (t0 < t1) & ((t0 < s0) | (t1 > s1))
        if not over.any():
            break
        lo, hi = t0[over] < s0[over], t1[over] > s1[over]  # a piece before the span, and after it
        rest = np.concatenate([rows[over][lo], rows[over][hi]])
        rest_t0 = np.concatenate([t0[over][lo], s1[over][hi]])
        rest_t1 = np.concatenate([s0[over][lo], t1[over][hi]])
        rest_names, r0, r1 = _span_names(g, np.concatenate([names[over][lo], names[over][hi]]), host[rest],
                                         rank[rest], rest_t0, rest_t1, spans)  # rest: rows of seg, as host and rank are
        keep = ~over
        rows = np.concatenate([rows[keep], rows[over], rest])
        t0 = np.concatenate([t0[keep], np.maximum(t0[over], s0[over]), rest_t0])
        t1 = np.concatenate([t1[keep], np.minimum(t1[over], s1[over]), rest_t1])
        names = np.concatenate([names[keep], names[over], rest_names])
        s0, s1 = np.concatenate([s0[keep], s0[over], r0]), np.concatenate([s1[keep], s1[over], r1])
    return pd.DataFrame({"category": category[rows], "rank": rank[rows], "name": names, "t0_ns": t0, "t1_ns": t1})


def top_items(paths: dict[int, Path], win: pd.DataFrame, g: Graph, n: int = 5) -> dict[int, list[dict]]:
    """Per step, the `n` (category, rank, name) with the most path time in its window (host
    time under the host span that holds it, never more than that span lasts: _named_pieces)."""
    out, spans = {}, {}
    for step, b, e in win[["step", "begin_ns", "end_ns"]].itertuples(index=False):
        seg = _named_pieces(g, paths[int(step)].segments, spans)
        ns = np.clip(np.minimum(seg["t1_ns"].to_numpy(), e) - np.maximum(seg["t0_ns"].to_numpy(), b), 0, None)
        frame = seg.assign(ns=ns)[ns > 0]
        agg = frame.groupby(["category", "rank", "name"], sort=False)["ns"].sum().sort_values(ascending=False).head(n)
        out[int(step)] = [{"what": c, "rank": int(r), "name": str(nm), "ns": int(v)} for (c, r, nm), v in agg.items()]
    return out
