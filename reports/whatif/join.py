"""Ranks' graphs (nodes.py, edges.py) joined into one, on one clock, with their collectives
matched (reports/collectives.match: the i-th collective of one process group, name and size
on each rank; its transfer starts when its last rank arrives). Pure.

The clock is the one `tracelab steps` uses: the traces' epoch starts, or offsets estimated
from the collectives' ends where none is given or the ends then disagree.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pandas as pd

from tracelab.core.note import Note

from ..timeline import collectives as C
from ..timeline.intervals import clock_offsets
from .cycles import break_cycles
from .edges import Edges, chain_order, rank_edges
from .kinds import COLL, GPU, HOST_OP, NONE
from .nodes import RankGraph


@dataclass
class Graph:
    """Every rank's nodes as one set of arrays (global indices), their edges, and the
    matched collectives: `group` (NONE where unmatched), `transfer_ns` (end - last arrival)."""

    rank: np.ndarray
    kind: np.ndarray
    chain: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    step: np.ndarray
    name: np.ndarray
    scope: np.ndarray
    op_class: np.ndarray
    msg_bytes: np.ndarray
    roof_ns: np.ndarray
    event_row: np.ndarray
    launch: np.ndarray
    copy: np.ndarray  # bool: a memcpy or memset
    edges: Edges
    group: np.ndarray
    transfer_ns: np.ndarray
    group_ranks: np.ndarray  # per node, the ranks of its collective (0 unmatched)
    chain_labels: list[str]
    ranks: dict[int, RankGraph]
    cpu_only: bool
    offsets_ns: dict[int, int]
    clock: str
    notes: list[Note] = field(default_factory=list)
    acyclic: bool = False  # set by cycles.break_cycles once no cycle is left
    _orders: list = field(default_factory=list, init=False, repr=False, compare=False)  # chain_order's (chain, order)

    def __len__(self) -> int:
        return len(self.kind)

    def work(self) -> np.ndarray:
        """Per node, whether it is the job's own work: a GPU op, or in a CPU-only trace a CPU
        operator (there the host's operators are the work)."""
        return (self.kind == HOST_OP) if self.cpu_only else (self.kind == GPU)

    def chain_order(self, chain: np.ndarray | None = None) -> np.ndarray:
        """The nodes by `chain` (the graph's own where None), then measured start, then end: the
        order the cycle check and every replay walk the chains in, sorted once per distinct
        chains (the graph's times are not written once joined). Callers read it, never write it."""
        chain = self.chain if chain is None else chain
        for known, order in self._orders:
            if np.array_equal(known, chain):
                return order
        order = np.lexsort((self.end_ns, self.start_ns, chain))
        self._orders.append((chain.copy(), order))
        return order


_ARRAYS = ("rank", "kind", "chain", "start_ns", "end_ns", "step", "name", "scope", "op_class", "msg_bytes",
           "roof_ns", "event_row", "launch", "copy")
_EDGE_ARRAYS = ("gap_ns", "xs_src", "xs_off_ns", "xe_src", "xe_off_ns", "y_src", "y_off_ns", "pinned",
                "launch_floor_ns", "unexplained_ns", "launch_bound")


def join(graphs: Mapping[int, RankGraph], epochs: Mapping[int, int | None]) -> Graph:
    """One Graph of the ranks' graphs (rank -> RankGraph), on one clock."""
    ranks = sorted(graphs)
    offsets = clock_offsets([{"rank": r, "trace_start_epoch_ns": epochs.get(r)} for r in ranks]) or {}
    clock = "epoch" if offsets else "trace start"
    parts, edge_parts, labels, orders, base, chain_base = [], [], [], [], 0, 0
    for r in ranks:
        g = graphs[r]
        orders.append(chain_order(g) + base)  # a rank's chains follow the rank before's, each by its own times
        ed = rank_edges(g, orders[-1] - base)
        parts.append(_shifted(g, base, chain_base, offsets.get(r, 0)))
        edge_parts.append(_edges_shifted(ed, base))
        labels += [f"rank {r} {label}" for label in g.chain_labels]
        base, chain_base = base + len(g), chain_base + len(g.chain_labels)
    arrays = {k: _joined([p[k] for p in parts], np.empty(0)) for k in _ARRAYS}
    edges = Edges(**{k: _joined([p[k] for p in edge_parts], np.empty(0, np.int64)) for k in _EDGE_ARRAYS})
    out = Graph(**arrays, edges=edges, group=np.full(base, NONE, np.int64), transfer_ns=np.zeros(base, np.int64),
                group_ranks=np.zeros(base, np.int64), chain_labels=labels, ranks=dict(graphs),
                cpu_only=bool(ranks) and all(graphs[r].cpu_only for r in ranks), offsets_ns=offsets, clock=clock,
                notes=[n.about(rank=r) for r in ranks for n in graphs[r].notes])
    _match(out, epochs_given=bool(offsets))  # moves a rank's times all by one offset: its order stays
    out._orders.append((out.chain.copy(), np.concatenate(orders) if orders else np.empty(0, np.int64)))
    out.notes += break_cycles(out)
    return out


def _joined(parts: list[np.ndarray], empty: np.ndarray) -> np.ndarray:
    """The ranks' arrays end to end; one rank's as it is (nothing writes to a joined graph's node
    arrays but _match's times, which _shifted made new: a copy of 20k names per rank saved)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else empty


def _shifted(g: RankGraph, base: int, chain_base: int, offset: int) -> dict[str, np.ndarray]:
    def local(a: np.ndarray) -> np.ndarray:
        return np.where(a >= 0, a + base, NONE)

    return {"rank": np.full(len(g), g.rank, np.int64), "kind": g.kind, "chain": g.chain.astype(np.int64) + chain_base,
            "start_ns": g.start_ns + offset, "end_ns": g.end_ns + offset, "step": g.step, "name": g.name,
            "scope": g.scope, "op_class": g.op_class, "msg_bytes": g.msg_bytes, "roof_ns": g.roof_ns, "event_row": g.event_row,
            "launch": local(g.launch), "copy": g.copy}


def _edges_shifted(ed: Edges, base: int) -> dict[str, np.ndarray]:
    out = {k: getattr(ed, k) for k in _EDGE_ARRAYS}
    for k in ("xs_src", "xe_src", "y_src"):
        out[k] = np.where(out[k] >= 0, out[k] + base, NONE)
    return out


def _comm_rows(g: Graph) -> pd.DataFrame:
    node = np.flatnonzero(g.kind == COLL)
    pg = np.concatenate([rg.process_group for rg in g.ranks.values()]) if g.ranks else np.empty(0, dtype=object)
    return pd.DataFrame({"rank": g.rank[node], "process_group": pg[node], "kernel": g.name[node].astype(str),
                         "msg_bytes": g.msg_bytes[node], "step": pd.Series(g.step[node]).where(g.step[node] >= 0).astype("Int64").array,
                         "arrival_ns": g.start_ns[node], "end_ns": g.end_ns[node], "node": node})


def _match(g: Graph, epochs_given: bool) -> None:
    """Sets group, transfer_ns and group_ranks; puts ranks on the collectives' clock where needed."""
    if len(g.ranks) < 2:  # one rank: nothing to match (its idle bound, made per rank)
        return
    rows = _comm_rows(g)
    if len(set(rows["rank"])) < 2:
        return
    coll = C.match(rows, None, ("node",))
    check = C.clock_check(coll)
    if len(coll) and (not epochs_given or not check["agree"]):
        extra = C.end_offsets(coll)
        for r, d in extra.items():
            g.start_ns[g.rank == r] += d
            g.end_ns[g.rank == r] += d
            g.offsets_ns[r] = g.offsets_ns.get(r, 0) + d
        g.clock = "estimated from collective ends"
        coll = C.match(_comm_rows(g), None, ("node",))
    if not len(coll):
        return
    node = coll["node"].to_numpy(dtype=np.int64)
    g.group[node] = coll["collective"].to_numpy(dtype=np.int64)
    g.transfer_ns[node] = (coll["end_ns"] - coll["last_arrival_ns"]).to_numpy(dtype=np.int64)
    g.group_ranks[node] = coll["ranks"].to_numpy(dtype=np.int64)
    bad = int((g.transfer_ns[node] < 0).sum())
    if bad:
        g.notes.append(Note("collective_ends_early", {"collectives": bad}))
        g.transfer_ns[node] = np.maximum(g.transfer_ns[node], 0)
