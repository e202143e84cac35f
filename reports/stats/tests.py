"""The statistical tests (no scipy: an analyst's laptop need not have it, and the exact counts
are a few lines): p values and intervals, numbers in, numbers out.

Straggler tests (reports/verdicts.py, evidence.py): Wilcoxon's signed-rank test (exact up to
EXACT_UP_TO values, normal approximation above), the binomial tail, and Student's one-sided
t-test over steps as blocks (block_p).

Two runs (reports/runtable.py): is a difference more than their noise? Medians of per-step samples, the
exact Mann-Whitney test and the Hodges-Lehmann interval of the shift that goes with it
(distribution-free: 3 to 5 steps are too few to assume anything about their spread).

The interval: with samples a (n) and b (m), the n x m differences b_j - a_i sorted; the
interval is [D_(k), D_(nm+1-k)] for the largest k with P(U < k) <= (1 - level) / 2 under
no shift, so its confidence is at least `level` (and is reported exactly, since with so
few steps the attainable levels are coarse: 4 against 4 steps gives 97.1%). With too few
steps for any interval at that level (2 against 2), there is none, and the answer says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from . import INTERVAL_LEVEL


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


def shift_interval(a: np.ndarray, b: np.ndarray, level: float = INTERVAL_LEVEL) -> tuple[float, float, float] | None:
    """(low, high, confidence) of the shift b - a, or None with too few samples for `level`."""
    diffs = np.sort((np.asarray(b, dtype=np.float64)[:, None] - np.asarray(a, dtype=np.float64)[None, :]).ravel())
    counts = np.asarray(u_counts(len(a), len(b)), dtype=np.float64)
    tail = np.cumsum(counts) / counts.sum()  # tail[k - 1] = P(U < k)
    k = int((tail <= (1 - level) / 2).sum())
    if k == 0:
        return None
    return float(diffs[k - 1]), float(diffs[len(diffs) - k]), float(1 - 2 * tail[k - 1])


@dataclass(frozen=True)
class Shift:
    """The verdict of median_difference: b against a. `relative`: None where a's median is 0;
    `low`, `high`, `confidence`: the shift's interval, None where the samples cannot give one."""

    median_a: float
    median_b: float
    relative: float | None
    low: float | None
    high: float | None
    confidence: float | None
    p_value: float
    n_a: int
    n_b: int
    within_noise: bool


def median_difference(a, b, level: float = INTERVAL_LEVEL) -> Shift:
    """b against a: both medians, their relative change, the shift's interval and its
    confidence, the test's p, and `within_noise`: whether the interval holds 0 (without an
    interval: p >= 1 - level)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    med_a, med_b = float(np.median(a)), float(np.median(b))
    interval = shift_interval(a, b, level)
    p = mann_whitney_p(a, b)
    within = interval[0] <= 0 <= interval[1] if interval else p >= 1 - level
    low, high, confidence = interval if interval else (None, None, None)
    return Shift(med_a, med_b, (med_b / med_a - 1) if med_a else None, low, high, confidence, p, len(a), len(b),
                 bool(within))


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return float(sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1)))

EXACT_UP_TO = 100  # values; above, the signed-rank test's normal approximation (exact costs ~n^3)


def signed_rank_p(x: np.ndarray) -> float:
    """One-sided p of Wilcoxon's signed-rank test that the values lean positive: P(W+ >= the
    observed W+) when each value's sign is a coin toss, exact (counts of the subset sums of
    the ranks; tied values get average ranks, counted in halves) up to EXACT_UP_TO nonzero
    values, above that the normal approximation with the tie correction and a continuity
    correction (a job of 1,000 steps and 1,000 ranks would take hours exactly); zeros are dropped."""
    x = np.asarray(x, dtype=np.float64)
    x = x[x != 0]
    if not len(x):
        return 1.0
    ranks = pd.Series(np.abs(x)).rank().to_numpy()
    if len(x) > EXACT_UP_TO:
        return _signed_rank_normal_p(ranks, x > 0)
    ranks2 = np.rint(2 * ranks).astype(np.int64)  # doubled: whole numbers
    counts = np.zeros(int(ranks2.sum()) + 1)
    counts[0] = 1.0
    for r in ranks2:
        counts = counts + np.r_[np.zeros(r), counts[:-r]]
    return float(counts[int(ranks2[x > 0].sum()):].sum() / counts.sum())


def _signed_rank_normal_p(ranks: np.ndarray, positive: np.ndarray) -> float:
    """P(W+ >= observed) by the normal approximation: mean n(n+1)/4, variance n(n+1)(2n+1)/24
    less sum(t^3 - t)/48 over groups of t tied values; 0.5 continuity correction."""
    n = len(ranks)
    ties = pd.Series(ranks).value_counts().to_numpy(dtype=np.float64)
    var = n * (n + 1) * (2 * n + 1) / 24 - float((ties ** 3 - ties).sum()) / 48
    z = (float(ranks[positive].sum()) - 0.5 - n * (n + 1) / 4) / math.sqrt(var)
    return 0.5 * math.erfc(z / math.sqrt(2))


def t_sf(t: float, df: int) -> float:
    """P(T >= t) for Student's t with integer df (closed forms, Abramowitz & Stegun 26.7.3-4)."""
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    theta = math.atan(t / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:  # odd: 2/pi (theta + sin cos (1 + 2/3 cos^2 + ... )), the sum up to cos^(df-3)
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        inside = 2 / math.pi * (theta + s * math.cos(theta) * total)
    else:  # even: sin (1 + 1/2 cos^2 + 1.3/2.4 cos^4 + ...), up to cos^(df-2)
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        inside = s * total
    return float(min(1.0, max(0.0, (1 - inside) / 2)))  # inside = P(-t < T < t), signed by theta


def block_p(values: np.ndarray) -> float:
    """One-sided p that the per-step values lean positive (t-test, steps as blocks); 1 with
    fewer than 2 steps; 0 when every step is equal and positive."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        return 1.0
    sd = float(x.std(ddof=1))
    if sd == 0:
        return 0.0 if x[0] > 0 else 1.0
    return t_sf(float(x.mean()) / (sd / math.sqrt(len(x))), len(x) - 1)
