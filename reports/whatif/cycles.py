"""Cycles in the dependency graph, found before any replay. Pure, numpy.

The replay (replay.py) settles only on a graph without a cycle. A cycle means the trace's times
contradict its dependencies somewhere: calls of concurrent host threads that overlap on the one
host chain (the trace keeps no launching thread), a stream wait inferred from an op still
running (edges.TAIL_NS), a kernel stamped before its launch call, collectives matched across
ranks in orders that cross. Under the measured times such a cycle settles (its offsets add up
to at most 0), but a scenario that lengthens an op or closes a gap on it makes it grow without
end: the replay would run MAX_ROUNDS before giving up.

The check is a topological order over chains: every node has a start and an end vertex, in
chain order (S0 E0 S1 E1 ...); the cross edges are launch (start -> start), wait (end ->
start), sync (end -> end) and collective (each member's start -> every member's end). A chain
advances while its next vertex's cross edges come from vertices already done; when no chain
advances and some are not done, each stuck chain's head waits on another stuck chain: walking
those waits gives the cycle. A chain is looked at again only when the chain it waits on moves
past its head's source, so the order costs about one pass over the edges, however many cycles
break_cycles drops on the way (each drop frees one chain; the rest stay where they are).

`break_cycles` (join.py) drops, per cycle, its least certain cross edge (an inferred wait
first, then a collective's match, a sync, a launch) and says so; `check` (replay.py) raises
ReplayError at once, naming the cycle, where one remains.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracelab.core.errors import TracelabError
from tracelab.core.note import Note

EDGE_KINDS = ("wait", "collective", "sync", "launch")  # least certain first: the one a cycle loses
MAX_BREAKS = 1000


class ReplayError(TracelabError):
    """The graph has a cycle (a bug, or a trace whose times contradict) or the replay did not settle."""


@dataclass
class _Cross:
    """The cross edges: source and target node, whether each end is the node's end vertex, kind."""

    src: np.ndarray
    src_end: np.ndarray
    dst: np.ndarray
    dst_end: np.ndarray
    kind: np.ndarray  # index into EDGE_KINDS


@dataclass
class Cycle:
    """One cycle: its hops in order, each (target node, source node, edge kind), the source
    reached from the previous hop's target along its chain."""

    hops: list[tuple[int, int, str]]

    def text(self, g) -> str:
        """'rank 0 host launch (step 3) -[launch]-> rank 0 stream 7 ... -[chain]-> ...' in one line."""
        words = [_node(g, self.hops[0][1])]
        for k, (dst, src, kind) in enumerate(self.hops):
            if k and src != self.hops[k - 1][0]:
                words.append(f"-[chain]-> {_node(g, src)}")
            words.append(f"-[{kind}]-> {_node(g, dst)}")
        if self.hops[-1][0] != self.hops[0][1]:
            words.append(f"-[chain]-> {_node(g, self.hops[0][1])}")
        return " ".join(words)

    def weakest(self) -> tuple[int, int, str]:
        return min(self.hops, key=lambda h: EDGE_KINDS.index(h[2]))


def _node(g, i: int) -> str:
    step = int(g.step[i])
    where = f"step {step}" if step >= 0 else "no step"
    return f"{g.chain_labels[int(g.chain[i])]} {g.name[i]} ({where})"  # the label names the rank


def _cross(edges, group: np.ndarray) -> _Cross:
    parts = []
    for arr, src_end, dst_end, kind in ((edges.xs_src, False, False, "launch"), (edges.xe_src, True, False, "wait"),
                                        (edges.y_src, True, True, "sync")):
        dst = np.flatnonzero(arr >= 0)
        parts.append((arr[dst].astype(np.int64), src_end, dst, dst_end, EDGE_KINDS.index(kind)))
    members = np.flatnonzero(group >= 0)
    members = members[np.argsort(group[members], kind="stable")]
    ids = group[members]
    bounds = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1], True]) if len(ids) else np.zeros(1, np.int64)
    src_g, dst_g = [], []
    for a, b in zip(bounds[:-1], bounds[1:]):  # every member's start -> every other member's end
        m = members[a:b]
        s, d = np.repeat(m, len(m)), np.tile(m, len(m))
        src_g.append(s[s != d])
        dst_g.append(d[s != d])
    if src_g:
        parts.append((np.concatenate(src_g), False, np.concatenate(dst_g), True, EDGE_KINDS.index("collective")))
    return _Cross(np.concatenate([p[0] for p in parts]), np.concatenate([np.full(len(p[0]), p[1]) for p in parts]),
                  np.concatenate([p[2] for p in parts]), np.concatenate([np.full(len(p[2]), p[3]) for p in parts]),
                  np.concatenate([np.full(len(p[0]), p[4], np.int8) for p in parts]))


def _positions(g, chain: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node, its chain's index (0..C-1) and its place in the chain (the replay's order);
    per chain, its number of vertices (2 per node)."""
    order = g.chain_order(chain) if hasattr(g, "chain_order") else np.lexsort((g.end_ns, g.start_ns, chain))
    c_sorted = chain[order]
    first = np.r_[True, c_sorted[1:] != c_sorted[:-1]] if len(order) else np.zeros(0, bool)
    cidx = np.empty(len(order), np.int64)
    cidx[order] = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    pos = np.empty(len(order), np.int64)
    pos[order] = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    return cidx, pos, 2 * np.diff(np.r_[starts, len(order)])


def find_cycle(g, edges, chain: np.ndarray, group: np.ndarray) -> Cycle | None:
    """A cycle of the graph `g` under these edges, chains and collectives (module docstring), or None."""
    return _Search(g, edges, chain, group).next_cycle()


def check(g, p) -> None:
    """ReplayError at once, naming the cycle in one line, where the replay's Params `p` have one.
    Free where `p` only drops edges of the joined graph (acyclic after break_cycles) or splits its
    chains into ordered parts, as every scenario does: neither can make a cycle."""
    if _within(g, p):
        return
    cycle = find_cycle(g, p, p.chain, p.group)
    if cycle is not None:
        raise ReplayError(None, f"the dependency graph has a cycle, so no replay can settle: {cycle.text(g)}")


class _Search:
    """The chain-by-chain topological order, resumable after an edge is dropped (the chains'
    progress only grows as edges go). Each chain's head is its first live cross edge whose source
    is not done; a chain moves on only when the chain its head waits on passes that source, so
    a drop re-walks the chains it frees, never the whole graph. The order settles where it
    would by rounds over every edge: the same least fixed point, reached in any order."""

    def __init__(self, g, edges, chain: np.ndarray, group: np.ndarray):
        self.cidx, self.pos, self.length = _positions(g, chain)
        self.x = _cross(edges, group)
        vsrc = 2 * self.pos[self.x.src] + self.x.src_end
        vdst = 2 * self.pos[self.x.dst] + self.x.dst_end
        dchain = self.cidx[self.x.dst]
        self.by = np.lexsort((vdst, dchain))  # edges by target chain, then place, then index (a stable sort)
        # beside `by`: each edge's source chain, source and target places, and whether it is live
        self.schain, self.vsrc, self.vdst = self.cidx[self.x.src][self.by], vsrc[self.by], vdst[self.by]
        self.live = np.ones(len(self.by), bool)
        chains = np.arange(len(self.length))
        self.first = np.searchsorted(dchain[self.by], chains)  # per chain, its edges: first:end of `by`
        self.end = np.searchsorted(dchain[self.by], chains, side="right")
        self.head = self.first.copy()  # per chain, its first edge not known to be done
        self.ptr = np.zeros(len(self.length), np.int64)  # per chain, the vertices done (its head's target)
        self.todo = dict.fromkeys(chains.tolist())  # the chains whose head may move

    def drop(self, src: int, dst: int, kind: str) -> None:
        c = int(self.cidx[dst])
        lo = self.first[c] + np.searchsorted(self.vdst[self.first[c]:self.end[c]], 2 * self.pos[dst])
        hi = self.first[c] + np.searchsorted(self.vdst[self.first[c]:self.end[c]], 2 * self.pos[dst] + 1, "right")
        k = self.by[lo:hi]  # the edges into dst's two vertices
        hit = (self.x.kind[k] == EDGE_KINDS.index(kind)) & (self.x.dst[k] == dst) & (self.x.src[k] == src)
        self.live[lo + np.flatnonzero(hit)] = False
        self.todo[c] = None

    def next_cycle(self) -> Cycle | None:
        while self.todo:
            c = next(iter(self.todo))
            del self.todo[c]
            if self._advance(c):
                self.todo.update(dict.fromkeys(self._waiting_on(c).tolist()))
        stuck = np.flatnonzero(self.ptr < self.length)
        return self._walk(int(stuck[0])) if len(stuck) else None

    def _advance(self, c: int) -> bool:
        """Moves chain c's head to its first live edge whose source is not done, looking at
        ever longer runs of its edges; whether its place moved. An edge within one chain is done
        where its source comes before its target: the chain passes it on its way."""
        i, end, step = int(self.head[c]), int(self.end[c]), 64
        while i < end:
            j = min(i + step, end)
            src, vsrc = self.schain[i:j], self.vsrc[i:j]
            done = ~self.live[i:j] | np.where(src == c, vsrc < self.vdst[i:j], self.ptr[src] > vsrc)
            waits = np.flatnonzero(~done)
            if len(waits):
                i += int(waits[0])
                break
            i, step = j, 4 * step
        self.head[c] = i
        place = self.vdst[i] if i < end else self.length[c]
        moved = place != self.ptr[c]
        self.ptr[c] = place
        return bool(moved)

    def _waiting_on(self, c: int) -> np.ndarray:
        """The chains whose head waits on a vertex of chain c that is now done."""
        w = np.flatnonzero(self.head < self.end)
        h = self.head[w]
        return w[(self.schain[h] == c) & (self.vsrc[h] < self.ptr[c])]

    def _walk(self, c: int) -> Cycle:
        """From stuck chain c, follow each head's edge to the chain it waits on until one repeats."""
        seen: list[int] = []
        while c not in seen:
            seen.append(c)
            c = int(self.schain[self.head[c]])
        hops = [self._hop(int(self.by[self.head[c]])) for c in seen[seen.index(c):]]
        return Cycle(hops[::-1])

    def _hop(self, k: int) -> tuple[int, int, str]:
        return int(self.x.dst[k]), int(self.x.src[k]), EDGE_KINDS[self.x.kind[k]]


def _within(g, p) -> bool:
    """Whether every edge of `p` is one of the joined graph's (or none), its collectives a subset
    of the graph's, and each of its chains a part of one chain of the graph (same order)."""
    if not getattr(g, "acyclic", False):
        return False
    ed = g.edges
    for k in ("xs_src", "xe_src", "y_src"):
        mine = getattr(p, k)
        if not ((mine < 0) | (mine == getattr(ed, k))).all():
            return False
    if not ((p.group < 0) | (p.group == g.group)).all():
        return False
    if np.array_equal(p.chain, g.chain):  # the graph's own chains
        return True
    order = np.argsort(p.chain, kind="stable")
    same_p = p.chain[order][1:] == p.chain[order][:-1]
    return bool((g.chain[order][1:][same_p] == g.chain[order][:-1][same_p]).all())


def break_cycles(g) -> list[Note]:
    """Drops, per cycle of the joined graph `g` (measured edges), its least certain edge, and
    says which (module docstring); raises nothing: the graph is acyclic after."""
    search = _Search(g, g.edges, g.chain, g.group)
    notes, members = [], None
    for _ in range(MAX_BREAKS):
        cycle = search.next_cycle()
        if cycle is None:
            g.acyclic = True
            return _summary(notes)
        dst, src, kind = cycle.weakest()
        members = members or _members(g.group)
        _drop(g, src, dst, kind, members)
        search.drop(src, dst, kind)
        notes.append(Note("dependency_cycle", {"cycle": cycle.text(g), "edge_kind": kind, "node": _node(g, dst)}))
    raise ReplayError(None, f"more than {MAX_BREAKS} cycles in the dependency graph, e.g. {cycle.text(g)}")


def _summary(notes: list[Note]) -> list[Note]:
    if len(notes) <= 3:
        return notes
    return notes[:3] + [Note("more_cycles", {"cycles": len(notes) - 3})]


def _members(group: np.ndarray):
    """gid -> the nodes of that collective, looked up without a pass over every node (a
    collective loses its match whole, so the lookup stays true as they go)."""
    at = np.flatnonzero(group >= 0)
    at = at[np.argsort(group[at], kind="stable")]
    ids = group[at]
    return lambda gid: at[np.searchsorted(ids, gid):np.searchsorted(ids, gid, "right")]


def _drop(g, src: int, dst: int, kind: str, members) -> None:
    ed = g.edges
    if kind in ("launch", "wait"):  # the node keeps its measured start as its least
        src_arr, off_arr = (ed.xs_src, ed.xs_off_ns) if kind == "launch" else (ed.xe_src, ed.xe_off_ns)
        src_arr[dst], off_arr[dst] = -1, 0
        ed.pinned[dst] = True
    elif kind == "sync":
        ed.y_src[dst] = -1
        ed.y_off_ns[dst] = 0
    else:  # the collective's match: each member ends as measured
        gid = int(g.group[dst])
        if gid >= 0:  # else a cycle through another of its members took its match already
            g.group[members(gid)] = -1
