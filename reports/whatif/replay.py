"""The discrete-event replay of a Graph (join.py) under a set of durations and offsets
(`Params`: the measured ones, or a scenario's). Pure, numpy.

Every node starts at the latest of: its chain predecessor's end plus its gap, its launch
call's start plus its offset, the end of a node it waits on plus its offset, and, pinned,
its measured start; it ends `dur_ns` later, or later still where a sync edge or its
collective (the last rank's arrival, plus its own transfer) holds it.

Along one chain that is a max-plus recurrence, e[i] = max(e[i-1] + gap[i] + dur[i], b[i])
with b[i] the node's own bound from other chains, solved for a whole chain at once:
e = C + cummax(b - C), C the running sum of gap + dur. From nothing known (`cold`), each
chain is solved one stretch at a time (`by_frontier`): as far as the nodes it reads are known,
in the chain-by-chain order of cycles.py, so every node is solved once and the cost stays
linear in the trace, however often the longest path switches chains. From the measured times
(`cold=False`, where little changes), chains are solved whole, in turn, until none changes (a
chain again only when a chain it reads from changed); where that takes thousands of rounds,
`in_order` solves the same recurrence once per node in Python. All give the same answer, since
a graph without cycles (checked first: cycles.py) has one.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .cycles import ReplayError, _cross, _positions, check
from .edges import EdgeArrays
from .join import Graph

NEG = -(1 << 60)
MAX_ROUNDS = 100_000
# chain solves (nodes) per node after which replay() switches to in_order(): a CPU-only trace's
# threads take turns at every collective, one round each (13k rounds of 100k-node chains took
# minutes); each node once, in Python, costs about what 200 rounds of numpy do
WORK_PER_NODE = 64


@dataclass
class Params(EdgeArrays):
    """What one replay runs on: the edges (EdgeArrays) with each node's duration, chain and
    collective (-1: none), in ns."""

    dur_ns: np.ndarray
    chain: np.ndarray
    group: np.ndarray
    # per host node, the host stalls' time its gap still holds (scenarios.py: no-host-gaps keeps it,
    # no-host-stalls takes it off); None until a scenario first needs it
    stall_ns: np.ndarray | None = None

    def copy(self) -> "Params":
        return replace(self, **{k: None if v is None else v.copy() for k, v in self.__dict__.items()})


def measured(g: Graph) -> Params:
    """The Params that put every node where it was measured."""
    ed = g.edges
    dur = np.where(g.group >= 0, g.transfer_ns, g.end_ns - g.start_ns).astype(np.int64)
    dur = np.where(ed.y_src >= 0, np.minimum(dur, ed.y_off_ns), dur)  # a sync that waited: its return latency
    return Params(dur_ns=dur,
                  chain=g.chain.copy(), gap_ns=ed.gap_ns.copy(), xs_src=ed.xs_src.copy(), xs_off_ns=ed.xs_off_ns.copy(),
                  xe_src=ed.xe_src.copy(), xe_off_ns=ed.xe_off_ns.copy(), y_src=ed.y_src.copy(),
                  y_off_ns=ed.y_off_ns.copy(), pinned=ed.pinned.copy(), group=g.group.copy())


@dataclass
class Replayed:
    start_ns: np.ndarray
    end_ns: np.ndarray
    order: np.ndarray  # nodes by chain, then measured start
    pred: np.ndarray  # chain predecessor per node (-1: first)
    rounds: int


def replay(g: Graph, p: Params, cold: bool = True) -> Replayed:
    """Start and end of every node under `p` (module docstring). Solved from nothing known
    (`cold`), or from the measured times (fewer rounds where little changes; same answer).
    ReplayError at once where the graph has a cycle (cycles.py)."""
    check(g, p)
    n = len(g)
    order = g.chain_order(p.chain)
    bounds = np.flatnonzero(np.r_[True, p.chain[order][1:] != p.chain[order][:-1], True])
    chains = [order[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    pred = np.full(n, -1, np.int64)
    for idx in chains:
        pred[idx[1:]] = idx[:-1]
    s = np.append(np.full(n, NEG, np.int64) if cold else g.start_ns.astype(np.int64), NEG)
    e = np.append(np.full(n, NEG, np.int64) if cold else g.end_ns.astype(np.int64), NEG)
    src = {k: np.where(getattr(p, k) >= 0, getattr(p, k), n) for k in ("xs_src", "xe_src", "y_src")}
    chain_of = np.full(n + 1, -1, np.int64)
    chain_of[order] = np.repeat(np.arange(len(chains)), [len(c) for c in chains])
    readers = _Readers(chains, src, chain_of, p.group)  # made when a chain first changes (never, where none does)
    prepared = [_prepare(idx, g, p, src) for idx in chains]
    if cold:
        s[:n], e[:n], rounds = by_frontier(g, p, chains, prepared)
        return Replayed(s[:n], e[:n], order, pred, rounds)
    gr = _groups(p.group)
    dirty = set(range(len(chains)))
    rounds, work = 0, 0
    while dirty:
        rounds += 1
        if rounds > MAX_ROUNDS:
            raise ReplayError(None, f"the replay did not settle in {MAX_ROUNDS} rounds")
        if work > WORK_PER_NODE * n:  # ranks' chains taking turns for thousands of rounds: node by node instead
            s[:n], e[:n] = in_order(chains, prepared, p.group, n)
            break
        gmax = _group_max(s, gr)
        for c in sorted(dirty):
            dirty.discard(c)
            work += len(chains[c])
            if _solve(chains[c], prepared[c], s, e, gmax):
                dirty |= readers[c]
                if gr.count:
                    gmax = _group_max(s, gr)
    return Replayed(s[:n], e[:n], order, pred, rounds)


def _prepare(idx: np.ndarray, g: Graph, p: Params, src: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    gap = p.gap_ns[idx].astype(np.int64)
    gap[0] = 0
    anchor = np.where(p.pinned[idx], g.start_ns[idx], NEG)
    if p.xs_src[idx[0]] < 0 and p.xe_src[idx[0]] < 0:  # a chain's first node bound by nothing starts as measured
        anchor[0] = g.start_ns[idx[0]]
    return {"anchor": anchor, "xs": src["xs_src"][idx],
            "xs_off": p.xs_off_ns[idx], "xe": src["xe_src"][idx], "xe_off": p.xe_off_ns[idx], "y": src["y_src"][idx],
            "y_off": p.y_off_ns[idx], "gap": gap, "dur": p.dur_ns[idx].astype(np.int64),
            "cum": np.cumsum(gap + p.dur_ns[idx]) - p.dur_ns[idx][0],
            "group": np.where(p.group[idx] >= 0, p.group[idx], -1), "grouped": bool((p.group[idx] >= 0).any())}


def _solve(idx: np.ndarray, c: dict[str, np.ndarray], s: np.ndarray, e: np.ndarray, gmax: np.ndarray) -> bool:
    """One chain's starts and ends from the current values of the others; whether they changed."""
    x = np.maximum(np.maximum(c["anchor"], s[c["xs"]] + c["xs_off"]), e[c["xe"]] + c["xe_off"])
    y = e[c["y"]] + c["y_off"]
    if c["grouped"]:
        y = np.maximum(y, np.where(c["group"] >= 0, gmax[c["group"]] + c["dur"], NEG))
    b = np.maximum(x + c["dur"], y)
    end = c["cum"] + np.maximum.accumulate(np.maximum(b - c["cum"], NEG // 2))
    start = np.maximum(np.r_[NEG, end[:-1]] + c["gap"], x)
    if np.array_equal(end, e[idx]) and np.array_equal(start, s[idx]):
        return False
    s[idx], e[idx] = start, end
    return True


def by_frontier(g: Graph, p: Params, chains: list[np.ndarray], prepared: list[dict[str, np.ndarray]]
                ) -> tuple[np.ndarray, np.ndarray, int]:
    """Every node's start and end, and the passes taken: each chain solved one stretch at a time,
    as far as the nodes its stretch reads are known (its cross edges, by target place: _Frontier),
    so each node once; a stretch's recurrence picks up from the end before it."""
    n = len(g)
    f = _Frontier(g, p, len(chains))
    s, e, x = np.full(n + 1, NEG, np.int64), np.full(n + 1, NEG, np.int64), np.full(n + 1, NEG, np.int64)
    gmax = np.full(max(int(p.group.max()) + 1, 1) if n else 1, NEG, np.int64)
    passes = 0
    while f.left():
        passes += 1
        moved = False
        for c in f.open_chains():
            while (v1 := f.reach(c)) > f.done[c]:
                _stretch(chains[c], prepared[c], f.done[c], v1, s, e, x, gmax)
                f.done[c], moved = v1, True
        if not moved:
            raise ReplayError(None, "the replay did not settle: the graph has a cycle")
    return s[:n], e[:n], passes


class _Frontier:
    """Per chain, its vertices done (2 per node: start, end, in chain order) and its cross edges
    sorted by target place, with a pointer to the first not yet passed."""

    def __init__(self, g: Graph, p: Params, count: int):
        cidx, pos, self.length = _positions(g, p.chain)
        x = _cross(p, p.group)
        vdst, dchain = 2 * pos[x.dst] + x.dst_end, cidx[x.dst]
        by = np.lexsort((vdst, dchain))
        self.vdst, self.vsrc, self.schain = vdst[by], (2 * pos[x.src] + x.src_end)[by], cidx[x.src][by]
        self.bounds = np.searchsorted(dchain[by], np.arange(count + 1)).tolist()
        self.ptr = self.bounds[:-1]
        self.done = np.zeros(count, np.int64)
        self.blocked = [(-1, 0)] * count  # the source chain and vertex a chain last waited on

    def left(self) -> bool:
        return bool((self.done < self.length).any())

    def open_chains(self) -> list[int]:
        """The chains not done whose last wait is over."""
        return [c for c in np.flatnonzero(self.done < self.length).tolist()
                if self.blocked[c][0] < 0 or self.done[self.blocked[c][0]] > self.blocked[c][1]]

    def reach(self, c: int) -> int:
        """How many of chain c's vertices are known now: up to its first cross edge from a
        vertex not done, looked for in windows that double (each edge passed once)."""
        j, end, width = self.ptr[c], self.bounds[c + 1], 64
        while j < end:
            hi = min(end, j + width)
            ok = self.done[self.schain[j:hi]] > self.vsrc[j:hi]
            if not ok.all():
                j += int(ok.argmin())
                break
            j, width = hi, 2 * width
        self.ptr[c] = j
        if j == end:
            self.blocked[c] = (-1, 0)
            return int(self.length[c])
        self.blocked[c] = (int(self.schain[j]), int(self.vsrc[j]))
        return int(self.vdst[j])


def _stretch(idx: np.ndarray, c: dict[str, np.ndarray], v0: int, v1: int, s: np.ndarray, e: np.ndarray,
             x: np.ndarray, gmax: np.ndarray) -> None:
    """_solve's recurrence over one chain's vertices v0..v1-1 (vertex 2k: node k's start, 2k+1: its
    end), every node they read known: the starts' own bounds, then the ends (the running max picked
    up from the end before), then the starts, each after its predecessor's end."""
    sa, sb, ea, eb = (v0 + 1) // 2, (v1 + 1) // 2, v0 // 2, v1 // 2
    ks, ke = slice(sa, sb), slice(ea, eb)
    x[idx[ks]] = np.maximum(np.maximum(c["anchor"][ks], s[c["xs"][ks]] + c["xs_off"][ks]), e[c["xe"][ks]] + c["xe_off"][ks])
    if eb > ea:
        y = e[c["y"][ke]] + c["y_off"][ke]
        if c["grouped"]:  # the collective's members' starts are all known (cycles.py's edges)
            y = np.maximum(y, np.where(c["group"][ke] >= 0, gmax[c["group"][ke]] + c["dur"][ke], NEG))
        term = np.maximum(np.maximum(x[idx[ke]] + c["dur"][ke], y) - c["cum"][ke], NEG // 2)
        if ea:
            term[0] = max(term[0], e[idx[ea - 1]] - c["cum"][ea - 1])
        e[idx[ke]] = c["cum"][ke] + np.maximum.accumulate(term)
    if sb > sa:
        before = e[idx[sa - 1:sb - 1]] if sa else np.r_[NEG, e[idx[:sb - 1]]]
        s[idx[ks]] = np.maximum(before + c["gap"][ks], x[idx[ks]])
        if c["grouped"]:
            gid = c["group"][ks]
            np.maximum.at(gmax, gid[gid >= 0], s[idx[ks]][gid >= 0])


@dataclass
class _Groups:
    """The matched collectives' members, sorted by collective, and where each collective begins."""

    members: np.ndarray
    ids: np.ndarray
    starts: np.ndarray
    count: int


def _groups(group: np.ndarray) -> _Groups:
    members = np.flatnonzero(group >= 0)
    members = members[np.argsort(group[members], kind="stable")]
    ids = group[members]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else np.empty(0, np.int64)
    return _Groups(members, ids, starts, int(group.max()) + 1 if len(members) else 0)


def _group_max(s: np.ndarray, gr: _Groups) -> np.ndarray:
    """Per collective, its last rank's arrival (the latest start of its members)."""
    out = np.full(max(gr.count, 1), NEG, np.int64)
    if len(gr.members):
        out[gr.ids[gr.starts]] = np.maximum.reduceat(s[gr.members], gr.starts)
    return out


class _Readers:
    """_readers of a replay's chains, made the first time a chain's readers are asked for."""

    def __init__(self, *args):
        self.args, self.made = args, None

    def __getitem__(self, c: int) -> set[int]:
        if self.made is None:
            self.made = _readers(*self.args)
        return self.made[c]


def _readers(chains: list[np.ndarray], src: dict[str, np.ndarray], chain_of: np.ndarray, group: np.ndarray
             ) -> list[set[int]]:
    """Per chain, the chains that read its nodes' times (to solve again when it changes)."""
    readers: list[set[int]] = [set() for _ in chains]
    for c, idx in enumerate(chains):
        for k in ("xs_src", "xe_src", "y_src"):
            for other in np.unique(chain_of[src[k][idx]]).tolist():
                if other >= 0 and other != c:
                    readers[other].add(c)
    with_groups = [c for c, idx in enumerate(chains) if (group[idx] >= 0).any()]
    for c in with_groups:
        readers[c] |= set(with_groups) - {c}
    return readers


def in_order(chains: list[np.ndarray], prepared: list[dict[str, np.ndarray]], group: np.ndarray, n: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """Every node's start and end (_solve's recurrence, term by term), each chain walked while the
    nodes it reads are known: a start once its launch source's start and wait source's end are,
    an end once its sync source's end and every member's start of its collective are."""
    s, e = [NEG] * n + [NEG], [NEG] * n + [NEG]  # index n: "no source"
    s_known, e_known = [False] * n + [True], [False] * n + [True]
    size = np.bincount(group[group >= 0]).tolist() if (group >= 0).any() else []
    started, gmax = [0] * len(size), [NEG] * len(size)
    cols = [{k: v.tolist() for k, v in c.items() if k != "grouped"} for c in prepared]
    nodes = [idx.tolist() for idx in chains]
    pos, run, x_of = [0] * len(chains), [0] * len(chains), [0] * len(chains)
    left = n
    while left:
        moved = False
        for c, idx in enumerate(nodes):
            k, col, grouped = pos[c], cols[c], prepared[c]["grouped"]
            while k < len(idx):
                i = idx[k]
                if not s_known[i]:
                    xs, xe = col["xs"][k], col["xe"][k]
                    if not (s_known[xs] and e_known[xe]):
                        break
                    x = max(col["anchor"][k], s[xs] + col["xs_off"][k], e[xe] + col["xe_off"][k])
                    s[i], s_known[i], x_of[c] = max((e[idx[k - 1]] if k else NEG) + col["gap"][k], x), True, x
                    if (gid := col["group"][k]) >= 0:
                        started[gid], gmax[gid] = started[gid] + 1, max(gmax[gid], s[i])
                    moved = True
                y, gid = col["y"][k], col["group"][k]
                if not e_known[y] or (gid >= 0 and started[gid] < size[gid]):
                    break
                bound = e[y] + col["y_off"][k]
                if grouped:
                    bound = max(bound, gmax[gid] + col["dur"][k] if gid >= 0 else NEG)
                term = max(max(x_of[c] + col["dur"][k], bound) - col["cum"][k], NEG // 2)
                run[c] = term if k == 0 else max(run[c], term)
                e[i], e_known[i] = col["cum"][k] + run[c], True
                k, left, moved = k + 1, left - 1, True
            pos[c] = k
        if not moved:
            raise ReplayError(None, "the replay did not settle: the graph has a cycle")
    return np.array(s[:n], dtype=np.int64), np.array(e[:n], dtype=np.int64)
