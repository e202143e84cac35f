"""Which collectives' results the next op reads: the trace records no data flow, so it is
inferred from the pattern tensor parallelism leaves. Pure.

A collective is *sandwiched* where, on its rank, no compute runs while it does (nothing
independent was there to hide it behind), the device op that ended last before it began is
compute of the same step (what made its input), the first device op to start after it
ended is compute of the same step (what reads its result), and at least two compute ops began
since the rank's collective before it ended (a layer: what read that one's result and what made
this one's input). In a CPU-only trace the compute is the rank's CPU operators, less the one that
issues each collective to gloo's worker thread. A step of a rank with at least
MIN_LAYERED sandwiched collectives repeats compute -> collective -> compute layer after layer:
tensor parallelism's all-reduces (or all-gathers, reduce-scatters) between layers, whose
result the next layer's matmul reads. Hiding those takes a fused or chunked kernel (AG-GEMM /
GEMM-RS), not a second stream: overlap-comm (scenarios.py) leaves them where they are.

DDP's gradient all-reduces are not sandwiched: they run beside the rest of the backward, or
one after another after it (a loop over the gradients, each all-reduce followed by its division:
one op between two, no layer), once or a few times a step; overlap-comm hides them (an upper
bound: that the gradients could be reduced earlier is what bucketing achieves), all but the
last of each rank's step (`last_of_steps`): the step consumes every result before it ends (the
optimizer reads the reduced gradients), so what waited on its last collective still waits. That
collective ends no sooner than its last rank arrives (the replay's collective edge, join.py):
overlap hides transfers behind compute, never the wait for a rank that has not arrived, and a
step cannot get shorter by hiding more than its collectives' transfers.
"""
from __future__ import annotations

import numpy as np

from tracelab.core.note import Note

from .join import Graph
from .kinds import COLL, GPU, HOST_OP

MIN_LAYERED = 3  # sandwiched collectives per step and rank from which the step is layered (TP)
FUSED_WORDS = ("hiding them takes a fused or chunked kernel (AG-GEMM / GEMM-RS: the overlap workload), which our "
               "runs measured at 0.78-0.96x of unfused on the smallest shapes (decode's are smaller still)")


def dependent(g: Graph) -> np.ndarray:
    """Per node, whether it is a sandwiched collective of a layered step (module docstring)."""
    out = np.zeros(len(g), bool)
    compute = _compute(g)
    for r in np.unique(g.rank[g.kind == COLL]).tolist():
        out |= _of_rank(g, r, compute)
    return out


def last_of_steps(g: Graph, among: np.ndarray) -> np.ndarray:
    """Per node, whether it is the collective of `among` that ended last on its rank in its step
    (module docstring): one per rank and step, the nodes outside every step counted as one step."""
    idx = np.flatnonzero(among & (g.kind == COLL))
    out = np.zeros(len(g), bool)
    if not len(idx):
        return out
    idx = idx[np.lexsort((g.end_ns[idx], g.step[idx], g.rank[idx]))]  # by rank, step, then end: the last wins
    key_rank, key_step = g.rank[idx], g.step[idx]
    last = np.r_[(key_rank[1:] != key_rank[:-1]) | (key_step[1:] != key_step[:-1]), True]
    out[idx[last]] = True
    return out


def _compute(g: Graph) -> np.ndarray:
    """Per node, whether it is compute that can make or read a collective's data: a GPU kernel
    (not a copy); in a CPU-only trace a CPU operator, less those that issue a collective (gloo's
    `c10d::allreduce_` returns as its worker thread starts the transfer: it is the collective's
    launch, not work beside it)."""
    if not g.cpu_only:
        return (g.kind == GPU) & ~g.copy
    out = g.kind == HOST_OP
    launches = g.edges.xs_src[g.kind == COLL]
    out[launches[launches >= 0]] = False
    return out


def _of_rank(g: Graph, rank: int, is_compute: np.ndarray) -> np.ndarray:
    out = np.zeros(len(g), bool)
    mine = g.rank == rank
    compute = np.flatnonzero(mine & is_compute)
    if not len(compute):
        return out
    coll = np.flatnonzero(mine & (g.kind == COLL))
    dev = np.union1d(compute, coll)
    by_end = compute[np.argsort(g.end_ns[compute], kind="stable")]
    by_start = compute[np.argsort(g.start_ns[compute], kind="stable")]
    before = np.searchsorted(g.end_ns[by_end], g.start_ns[coll], side="right") - 1  # compute that ended before it
    after = np.searchsorted(g.start_ns[by_start], g.end_ns[coll], side="left")  # compute that started after it
    ok = (before >= 0) & (after < len(by_start))
    prev, nxt = by_end[np.maximum(before, 0)], by_start[np.minimum(after, len(by_start) - 1)]
    ok &= (g.step[prev] == g.step[coll]) & (g.step[nxt] == g.step[coll])
    # nothing else of the rank's device work between the producer's end and the consumer's start
    ok &= _alone(g, dev, g.end_ns[prev], g.start_ns[nxt], coll)
    ok &= _layer_before(g, coll, g.start_ns[by_start])
    sandwiched = coll[ok]
    steps, counts = np.unique(g.step[sandwiched], return_counts=True)
    layered = steps[counts >= MIN_LAYERED]
    out[sandwiched[np.isin(g.step[sandwiched], layered)]] = True
    return out


def _layer_before(g: Graph, coll: np.ndarray, compute_starts_ns: np.ndarray) -> np.ndarray:
    """Per collective of one rank, whether at least two compute ops began between the end of the
    rank's collective before it and its own start: one that reads the earlier result and one that
    makes this input, as a layer between tensor parallelism's collectives does. A loop of
    collectives with one op between (per-gradient all-reduces, each followed by its division) is
    one compute -> collective -> compute pattern too, but each input was ready before the loop
    began, so bucketing hides them: they are not a layer's."""
    by_start = np.argsort(g.start_ns[coll], kind="stable")
    order = coll[by_start]
    prev_end = np.r_[np.iinfo(np.int64).min, np.maximum.accumulate(g.end_ns[order])[:-1]]
    between = (np.searchsorted(compute_starts_ns, g.start_ns[order], side="left")
               - np.searchsorted(compute_starts_ns, prev_end, side="left"))
    out = np.zeros(len(coll), bool)
    out[by_start] = between >= 2
    return out


def _alone(g: Graph, dev: np.ndarray, lo: np.ndarray, hi: np.ndarray, coll: np.ndarray) -> np.ndarray:
    """Per collective, whether it is the only device op of `dev` overlapping (lo, hi): no compute
    ran beside it and no other op came between its producer and its consumer."""
    start = np.sort(g.start_ns[dev])
    end = np.sort(g.end_ns[dev])
    # ops overlapping (lo, hi): begun before hi, less those ended by lo
    n = np.searchsorted(start, hi, side="left") - np.searchsorted(end, lo, side="right")
    return n == 1


def note(g: Graph, hidden: np.ndarray) -> Note | None:
    """overlap-comm's note on the collectives it left in place, None where it left none."""
    n_dep, n_all = int(hidden.sum()), int((g.kind == COLL).sum())
    if not n_dep:
        return None
    return Note("overlap_dependent", {"dependent": n_dep, "collectives": n_all, "fused": FUSED_WORDS})
