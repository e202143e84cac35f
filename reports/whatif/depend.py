"""Which collectives' results the next op reads: the trace records no data flow, so it is
inferred from the pattern tensor parallelism leaves. Pure.

A collective is *sandwiched* where, on its rank, no compute runs while it does (nothing
independent was there to hide it behind), the device op that ended last before it began is
compute of the same step (what made its input) and the first device op to start after it
ended is compute of the same step (what reads its result). A step of a rank with at least
MIN_LAYERED sandwiched collectives repeats compute -> collective -> compute layer after layer:
tensor parallelism's all-reduces (or all-gathers, reduce-scatters) between layers, whose
result the next layer's matmul reads. Hiding those takes a fused or chunked kernel (AG-GEMM /
GEMM-RS), not a second stream: overlap-comm (scenarios.py) leaves them where they are.

DDP's gradient all-reduces are not sandwiched: they run beside the rest of the backward, or
one after another after it, once or a few times a step; overlap-comm hides them (an upper
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
from .kinds import COLL, GPU

MIN_LAYERED = 3  # sandwiched collectives per step and rank from which the step is layered (TP)
FUSED_WORDS = ("hiding them takes a fused or chunked kernel (AG-GEMM / GEMM-RS: the overlap workload), which our "
               "runs measured at 0.78-0.96x of unfused on the smallest shapes (decode's are smaller still)")


def dependent(g: Graph) -> np.ndarray:
    """Per node, whether it is a sandwiched collective of a layered step (module docstring)."""
    out = np.zeros(len(g), bool)
    if g.cpu_only:
        return out
    for r in np.unique(g.rank[g.kind == COLL]).tolist():
        out |= _of_rank(g, r)
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


def _of_rank(g: Graph, rank: int) -> np.ndarray:
    out = np.zeros(len(g), bool)
    dev = np.flatnonzero(np.isin(g.kind, (GPU, COLL)) & (g.rank == rank))
    compute = dev[(g.kind[dev] == GPU) & ~g.copy[dev]]
    if not len(compute):
        return out
    coll = dev[g.kind[dev] == COLL]
    by_end = compute[np.argsort(g.end_ns[compute], kind="stable")]
    by_start = compute[np.argsort(g.start_ns[compute], kind="stable")]
    before = np.searchsorted(g.end_ns[by_end], g.start_ns[coll], side="right") - 1  # compute that ended before it
    after = np.searchsorted(g.start_ns[by_start], g.end_ns[coll], side="left")  # compute that started after it
    ok = (before >= 0) & (after < len(by_start))
    prev, nxt = by_end[np.maximum(before, 0)], by_start[np.minimum(after, len(by_start) - 1)]
    ok &= (g.step[prev] == g.step[coll]) & (g.step[nxt] == g.step[coll])
    # nothing else of the rank's device work between the producer's end and the consumer's start
    ok &= _alone(g, dev, g.end_ns[prev], g.start_ns[nxt], coll)
    sandwiched = coll[ok]
    steps, counts = np.unique(g.step[sandwiched], return_counts=True)
    layered = steps[counts >= MIN_LAYERED]
    out[sandwiched[np.isin(g.step[sandwiched], layered)]] = True
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
