"""The gate's noise model: how far a metric's level may move between two runs of one job by
chance, and so whether the candidate's moved further. Pure numbers in, a Shift out.

A run's level is the median of its steps (a workload figure: its one value), compared on a log
scale, so that a change is a ratio. The level of a run holds two kinds of noise:

- within the run, the uncertainty of that median from its own steps. Steps are autocorrelated
  (a slow spell of a loaded machine lasts several steps), so n steps count as
  n_eff = n (1 - r) / (1 + r) independent ones, r their lag-1 autocorrelation (at least 0);
  the median's standard error is sqrt(pi/2) x sd / sqrt(n_eff), sd robust (MAD x 1.4826).
- between runs: a run's level moves with its machine's state (its load, clocks, allocator, a
  fresh machine's first run) more than its steps' median does. Without repeats nothing
  measures it, so it is taken as one step's variance (whatever slows a step for a while, a
  run may meet for all of its steps) plus a stated floor: `run_noise`, the relative standard
  deviation of a run's level between runs that steps do not show (RUN_NOISE unless the user
  says: `--run-noise`). With repeats (several runs of one config a side), the runs' spread
  about their side's mean measures both kinds together, pooled over the sides, with that
  same prior weighing in as PRIOR_DF degrees of freedom more (two runs a side alone would
  trust one lucky agreement). Launches per step get no floor (the caller's run_noise=0): the
  same work launches the same kernels on any run; memory gets it, as an allocator's state
  differs between runs.

The test is Student's t on the mean log levels (scipy.stats; the normal where the floor alone
makes the variance): beyond the noise where its two-sided p is under 1 - level. The smallest
change this input could detect is the interval's half width at that level, as a ratio: a
change that large would just have been told from noise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ..stats import INTERVAL_LEVEL, MAD_TO_SD

RUN_NOISE = 0.10  # relative sd of a run's level between runs of one job, where no side has repeats
MEDIAN_SE = math.sqrt(math.pi / 2)  # a median's standard error over the mean's, for normal samples
PRIOR_DF = 4  # with repeats, the floor weighs as much as the spread of 5 runs would (4 degrees of freedom)
MAX_LAG1 = 0.9  # autocorrelation above this is taken as this (n_eff of a tenth of the steps)


@dataclass(frozen=True)
class Shift:
    """b's level against a's: the levels (geometric means of the runs' medians), the change as a
    ratio minus 1, its interval at `level`, the test's p, the smallest detectable change."""

    level_a: float
    level_b: float
    relative: float | None
    low: float | None  # of the ratio minus 1
    high: float | None
    p_value: float | None
    detectable: float | None
    within_noise: bool


def effective_steps(x: np.ndarray) -> float:
    """n (1 - r) / (1 + r), r the lag-1 autocorrelation of the steps, clipped to [0, MAX_LAG1]."""
    n = len(x)
    if n < 3 or np.ptp(x[:-1]) == 0 or np.ptp(x[1:]) == 0:  # no correlation without spread
        return float(n)
    r = float(np.corrcoef(x[:-1], x[1:])[0, 1])
    r = min(max(r if math.isfinite(r) else 0.0, 0.0), MAX_LAG1)
    return n * (1 - r) / (1 + r)


def run_level(values: np.ndarray) -> tuple[float, float, float]:
    """(the run's median, that median's variance from its own samples alone, one sample's variance)."""
    if len(values) < 2:
        return float(np.median(values)), 0.0, 0.0
    sd = MAD_TO_SD * float(np.median(np.abs(values - np.median(values))))
    return float(np.median(values)), (MEDIAN_SE * sd) ** 2 / effective_steps(values), sd ** 2


def run_variance(a: list[tuple[float, float, float]], b: list[tuple[float, float, float]],
                 floor: float) -> tuple[float, float]:
    """(variance of one run's level about its side's, its degrees of freedom). Without repeats:
    the median's own variance, one step's variance and the floor, taken as known (inf). With repeats: the runs'
    spread about their side's mean, pooled over both sides, with that same prior weighing as
    PRIOR_DF more degrees of freedom: two or three runs a side tell the spread badly alone."""
    prior = float(np.mean([w + step for _, w, step in a + b])) + floor
    df = len(a) + len(b) - 2
    if df == 0:
        return prior, math.inf
    squares = sum(float(np.sum((np.array([r[0] for r in side]) - np.mean([r[0] for r in side])) ** 2)) for side in (a, b))
    return (squares + PRIOR_DF * prior) / (df + PRIOR_DF), df + PRIOR_DF


def shift(a: list[np.ndarray], b: list[np.ndarray], run_noise: float = RUN_NOISE,
          level: float = INTERVAL_LEVEL) -> Shift | None:
    """b's runs against a's runs, each run its samples (steps, or its one value); None where a side
    has none. On the log scale where every value is positive, else (a count of zero, an idle of
    none) on the values' own scale, the floor then a share of a's level."""
    a, b = [x for x in a if len(x)], [x for x in b if len(x)]
    if not a or not b:
        return None
    logs = all((x > 0).all() for x in a + b)
    f = np.log if logs else np.asarray
    la, lb = [run_level(f(x)) for x in a], [run_level(f(x)) for x in b]
    ma, mb = float(np.mean([r[0] for r in la])), float(np.mean([r[0] for r in lb]))
    floor = math.log1p(run_noise) ** 2 if logs else (run_noise * ma) ** 2
    var, df = run_variance(la, lb, floor)
    d, se = mb - ma, math.sqrt(var * (1 / len(la) + 1 / len(lb)))
    dist = stats.t(df) if math.isfinite(df) else stats.norm()
    half = float(dist.ppf((1 + level) / 2)) * se
    p = (1.0 if d == 0 else 0.0) if se == 0 else float(2 * dist.sf(abs(d) / se))
    if logs:  # a side's level: its one run's median as it is, else the geometric mean of its runs' medians
        level_a, level_b = (float(np.median(x[0])) if len(x) == 1 else math.exp(m) for x, m in ((a, ma), (b, mb)))
        return Shift(level_a, level_b, math.expm1(d), math.expm1(d - half), math.expm1(d + half), p,
                     math.expm1(half), p >= 1 - level)
    share = (lambda x: x / abs(ma)) if ma else (lambda x: None)
    return Shift(ma, mb, share(d), share(d - half), share(d + half), p, share(half), p >= 1 - level)
