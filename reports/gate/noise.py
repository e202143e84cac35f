"""The gate's noise model: how far a metric's level may move between two runs of one job by
chance, and so whether the candidate's moved further. Pure numbers in, a Shift out.

A run's level is the median of its steps (a workload figure: its one value), compared on a log
scale, so that a change is a ratio. The level of a run holds two kinds of noise:

- within the run, the uncertainty of that median from its own steps. Steps are autocorrelated
  (a slow spell of a loaded machine lasts several steps), so n steps count as
  n_eff = n (1 - r) / (1 + r) independent ones, r their lag-1 autocorrelation (at least 0);
  the median's standard error is sqrt(pi/2) x sd / sqrt(n_eff), sd robust (MAD x 1.4826).
- between runs: a run's level moves with its machine's state (its load, clocks, allocator, a
  fresh machine's first run) more than its steps' median does. The floor of that movement is
  one run's own: its median's variance, one step's variance (whatever slows a step for a while,
  a run may meet for all of its steps) and a stated floor, `run_noise`, the relative standard
  deviation of a run's level between runs that steps do not show (RUN_NOISE unless the user
  says: `--run-noise`). Launches per step get no stated floor (the caller's run_noise=0): the
  same work launches the same kernels on any run; memory gets it, as an allocator's state
  differs between runs. With one run a side nothing else measures it.
- with repeats (several runs of one config a side), the runs' spread about their side's mean,
  pooled over the sides, measures it too. A CI baseline is made at another time than its
  candidate, and two or three runs of one time tell the spread between times badly, so the
  noise is the larger of the two, never the spread alone: the change must be beyond both the
  floor (the normal, its variance taken as known) and the measured spread (Student's t on the
  runs' levels). That is an intersection-union test: its p the larger of the two p's, its
  interval the wider, its false alarms at most 1 - level where either holds (runs as far apart
  as the floor says at most, or the runs' levels normal and independent).
- with history (the earlier versions a baseline store kept of the baseline, each accepted at
  another time), the versions' levels, the baseline's own the latest, measure the spread
  between times itself: their sd (a version's level the mean of its runs' levels; Student's t
  on versions - 1 degrees of freedom), each side's level taken as one time's (the difference's
  variance twice a version's, whatever the runs a side). Where it is wider than the floor it
  joins the test as the repeats' spread does: the noise is the largest of the floor and the
  measured spreads, the test the intersection of theirs. Versions that agree within the floor
  say only that the floor holds for this job: the floor's normal stays the test (a spread
  measured on a few versions, on Student's t with its few degrees of freedom, would make the
  interval wider than the floor's though it is narrower). A real change accepted into the store
  widens it until it leaves the kept versions.

The test is on the mean log levels (scipy.stats): beyond the noise where its two-sided p is
under 1 - level. The smallest change this input could detect is the interval's half width at
that level, as a ratio: a change that large would just have been told from noise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..stats import INTERVAL_LEVEL, MAD_TO_SD, RUN_NOISE

MEDIAN_SE = math.sqrt(math.pi / 2)  # a median's standard error over the mean's, for normal samples
MIN_VERSIONS = 3  # kept versions (the baseline's own among them) that measure the spread between times: 2+ degrees of freedom
MAX_LAG1 = 0.9  # autocorrelation above this is taken as this (n_eff of a tenth of the steps)


@dataclass(frozen=True)
class Shift:
    """b's level against a's: the levels (geometric means of the runs' medians), the change as a
    ratio minus 1, its interval at `level`, the test's p, the smallest detectable change; the sd
    of one run's level between runs, relative: `floor` (its steps' and run_noise), `spread` (the
    repeats', measured; None with one run a side), `history` (the kept versions', measured;
    None without) and which of them set the interval (`source`)."""

    level_a: float
    level_b: float
    relative: float | None
    low: float | None  # of the ratio minus 1
    high: float | None
    p_value: float | None
    detectable: float | None
    within_noise: bool
    floor: float | None = None
    spread: float | None = None
    history: float | None = None  # the kept versions' sd, relative; None without history
    source: str = "floor"  # the noise whose interval was the widest: floor, repeats or history


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


@dataclass(frozen=True)
class Noise:
    """A run level's variance between runs, by one source, and its degrees of freedom (inf: taken as known)."""

    var: float
    df: float

    def test(self, d: float, runs: float, level: float) -> tuple[float, float]:
        """(two-sided p of a difference d of the sides' mean levels, the interval's half width);
        runs: 1/n_a + 1/n_b."""
        from scipy import stats  # here, not at import: ~1.4 s of CPU that a report of one run never needs

        se = math.sqrt(self.var * runs)
        dist = stats.t(self.df) if math.isfinite(self.df) else stats.norm()
        p = (1.0 if d == 0 else 0.0) if se == 0 else float(2 * dist.sf(abs(d) / se))
        return p, float(dist.ppf((1 + level) / 2)) * se


def run_noise_of(a: list[tuple[float, float, float]], b: list[tuple[float, float, float]],
                 floor: float) -> tuple[Noise, Noise | None]:
    """(the floor: one run's median variance and step variance, the mean over the runs, plus the
    stated floor, taken as known; the repeats' spread about their side's mean, pooled over both
    sides, with its degrees of freedom, or None with one run a side)."""
    prior = Noise(float(np.mean([w + step for _, w, step in a + b])) + floor, math.inf)
    df = len(a) + len(b) - 2
    if df == 0:
        return prior, None
    squares = sum(float(np.sum((np.array([r[0] for r in side]) - np.mean([r[0] for r in side])) ** 2)) for side in (a, b))
    return prior, Noise(squares / df, df)


def history_noise(versions: list[float]) -> Noise | None:
    """The kept versions' levels' variance about their mean, with versions - 1 degrees of
    freedom; None with fewer than MIN_VERSIONS."""
    if len(versions) < MIN_VERSIONS:
        return None
    return Noise(float(np.var(versions, ddof=1)), len(versions) - 1)


SOURCES = ("floor", "repeats", "history")


def shift(a: list[np.ndarray], b: list[np.ndarray], run_noise: float = RUN_NOISE,
          level: float = INTERVAL_LEVEL, history: list[list[np.ndarray]] = ()) -> Shift | None:
    """b's runs against a's runs, each run its samples (steps, or its one value); None where a side
    has none. `history`: the earlier kept versions of a's, oldest first, each its runs' samples.
    On the log scale where every value is positive, else (a count of zero, an idle of none) on
    the values' own scale, the floor then a share of a's level. Beyond the noise only where
    beyond the floor and beyond every measured spread too (module docstring)."""
    a, b = [x for x in a if len(x)], [x for x in b if len(x)]
    if not a or not b:
        return None
    history = [runs for runs in ([x for x in v if len(x)] for v in history) if runs]
    logs = all((x > 0).all() for x in a + b + [x for v in history for x in v])
    f = np.log if logs else np.asarray
    la, lb = [run_level(f(x)) for x in a], [run_level(f(x)) for x in b]
    ma, mb = float(np.mean([r[0] for r in la])), float(np.mean([r[0] for r in lb]))
    prior, measured = run_noise_of(la, lb, math.log1p(run_noise) ** 2 if logs else (run_noise * ma) ** 2)
    kept = history_noise([float(np.mean([run_level(f(x))[0] for x in v])) for v in history] + [ma]) if history else None
    d, runs = mb - ma, 1 / len(la) + 1 / len(lb)
    beyond = kept is not None and kept.var * 2.0 > prior.var * runs  # wider than the floor: a measured fact of the job
    tests = {name: n.test(d, 2.0 if name == "history" else runs, level)
             for name, n in zip(SOURCES, (prior, measured, kept if beyond else None)) if n is not None}
    p, half = max(t[0] for t in tests.values()), max(t[1] for t in tests.values())
    source = max(tests, key=lambda name: tests[name][1])
    sds = [None if n is None else math.sqrt(n.var) for n in (prior, measured, kept)]
    if logs:  # a side's level: its one run's median as it is, else the geometric mean of its runs' medians
        level_a, level_b = (float(np.median(x[0])) if len(x) == 1 else math.exp(m) for x, m in ((a, ma), (b, mb)))
        floor, spread, kept_sd = (None if x is None else math.expm1(x) for x in sds)
        return Shift(level_a, level_b, math.expm1(d), math.expm1(d - half), math.expm1(d + half), p,
                     math.expm1(half), p >= 1 - level, floor, spread, kept_sd, source)
    share = (lambda x: x / abs(ma)) if ma else (lambda x: None)
    floor, spread, kept_sd = (None if x is None else share(x) for x in sds)
    return Shift(ma, mb, share(d), share(d - half), share(d + half), p, share(half), p >= 1 - level, floor, spread,
                 kept_sd, source)
