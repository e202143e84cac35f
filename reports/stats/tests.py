"""Is a difference between two runs more than their noise? Medians of per-step samples, the
exact Mann-Whitney test and the Hodges-Lehmann interval of the shift that goes with it
(distribution-free: 3 to 5 steps are too few to assume anything about their spread).
No scipy: an analyst's laptop need not have it, and the exact counts are a few lines.

The interval: with samples a (n) and b (m), the n x m differences b_j - a_i sorted; the
interval is [D_(k), D_(nm+1-k)] for the largest k with P(U < k) <= (1 - level) / 2 under
no shift, so its confidence is at least `level` (and is reported exactly, since with so
few steps the attainable levels are coarse: 4 against 4 steps gives 97.1%). With too few
steps for any interval at that level (2 against 2), there is none, and the answer says so.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

LEVEL = 0.95


@lru_cache(maxsize=256)
def u_counts(n: int, m: int) -> tuple[int, ...]:
    """How many of the C(n+m, n) orderings of two samples of sizes n and m give each value of
    the Mann-Whitney U (0 .. n*m): the Gaussian binomial coefficient's terms, by recursion on
    whether the largest value belongs to the first sample (adds m) or the second."""
    if n == 0 or m == 0:
        return (1,)
    with_first, with_second = u_counts(n - 1, m), u_counts(n, m - 1)
    out = [0] * (n * m + 1)
    for u, c in enumerate(with_first):
        out[u + m] += c
    for u, c in enumerate(with_second):
        out[u] += c
    return tuple(out)


def mann_whitney_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided exact p that samples a and b come from one distribution (ties count a half)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    u = float((b[:, None] > a[None, :]).sum() + 0.5 * (b[:, None] == a[None, :]).sum())
    counts = np.asarray(u_counts(len(a), len(b)), dtype=np.float64)
    values = np.arange(len(counts))
    low, high = counts[values <= u].sum(), counts[values >= u].sum()
    return float(min(1.0, 2 * min(low, high) / counts.sum()))


def shift_interval(a: np.ndarray, b: np.ndarray, level: float = LEVEL) -> tuple[float, float, float] | None:
    """(low, high, confidence) of the shift b - a, or None with too few samples for `level`."""
    diffs = np.sort((np.asarray(b, dtype=np.float64)[:, None] - np.asarray(a, dtype=np.float64)[None, :]).ravel())
    counts = np.asarray(u_counts(len(a), len(b)), dtype=np.float64)
    tail = np.cumsum(counts) / counts.sum()  # tail[k - 1] = P(U < k)
    k = int((tail <= (1 - level) / 2).sum())
    if k == 0:
        return None
    return float(diffs[k - 1]), float(diffs[len(diffs) - k]), float(1 - 2 * tail[k - 1])


def median_difference(a, b, level: float = LEVEL) -> dict:
    """b against a: both medians, their difference (b - a) and relative change, the shift's
    interval and its confidence (None when the samples cannot give one), the test's p, and
    `within_noise`: whether the interval holds 0 (without an interval: p >= 1 - level)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    med_a, med_b = float(np.median(a)), float(np.median(b))
    interval = shift_interval(a, b, level)
    p = mann_whitney_p(a, b)
    within = interval[0] <= 0 <= interval[1] if interval else p >= 1 - level
    return {"median_a": med_a, "median_b": med_b, "diff": med_b - med_a,
            "relative": (med_b / med_a - 1) if med_a else None, "low": interval and interval[0],
            "high": interval and interval[1], "confidence": interval and interval[2], "p_value": p,
            "n_a": len(a), "n_b": len(b), "within_noise": bool(within)}
