"""The gate's verdict per metric, candidate runs against baseline runs. Pure: RunSamples in,
a Gate out.

Samples: a timed metric's are the steps of every run of a side (steps as samples); its verdict
is the shift of the medians with its interval (reports/stats: the exact Mann-Whitney test and
Hodges-Lehmann interval at INTERVAL_LEVEL): beyond the noise where the interval excludes 0 and
the shift exceeds how far a run's level wanders between runs. Steps of one run share its
machine's state (its load, its clocks, its allocator), so their interval alone understates
how much two runs of one job differ; the wander is taken as the larger of the spread of a
side's repeats' medians (where a side holds several runs of one config) and NOISE_SIGMAS
robust standard deviations of one step (MAD_TO_SD x the median absolute deviation) of both
sides combined: without repeats, a run's level is assumed to move between runs as much as
one of its steps does. A counted metric (bytes,
launches) is beyond the noise where the two sides' steps do not overlap (every step of one
above every step of the other): its step-to-step spread is all the noise there is. A workload
figure (one value per run) has repeats as samples, judged as timed metrics are.

The smallest change this input could have detected, as a share of the baseline: the
interval's half width (or the counted metric's widest range), at least the repeats' spread.

A regression: a verdict in the worse direction, a change beyond the metric's threshold
(--max-regression, --metric), and, for a time other than the step's, a change of at least
MIN_LEAD_SHARE of the step time (a kernel class of 0.1% of the step doubling fails no build).
Its why: the groups (kernels, scopes, ranks, memory's live groups) whose share of the metric per
step grew the most, each with its share of the metric's change.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

import numpy as np
import pandas as pd

from tracelab.core.note import Note

from ..stats import MAD_TO_SD, MIN_LEAD_SHARE, NOISE_SIGMAS
from ..stats.tests import median_difference
from .samples import BYTES, COUNT, STEP_TIME, TIME, RunSamples

DEFAULT_MAX_REGRESSION = 0.05
TOP_CAUSES = 5  # per kind of cause (kernel, scope, rank, ...)
WORDS = {TIME: ("slower", "faster"), BYTES: ("grew", "shrank"), COUNT: ("more", "fewer"), "": ("worse", "better")}
WITHIN, TOO_FEW = "within noise", "too few samples"


@dataclass(frozen=True)
class Thresholds:
    """The largest change a metric may make before it fails: `default`, and per metric name or
    shell pattern (`gpu_time:*`) a share, or None where the metric is never failed on. An exact
    name wins over a pattern; of patterns, the last given."""

    default: float | None = DEFAULT_MAX_REGRESSION
    metrics: tuple[tuple[str, float | None], ...] = ()

    def of(self, metric: str) -> float | None:
        exact = [t for name, t in self.metrics if name == metric]
        if exact:
            return exact[-1]
        matched = [t for name, t in self.metrics if fnmatchcase(metric, name)]
        return matched[-1] if matched else self.default


@dataclass(frozen=True)
class Cause:
    by: str  # kernel, scope, rank, op, module
    name: str
    baseline: float  # per step, mean over the side's runs
    candidate: float
    share: float | None  # of the metric's change


@dataclass
class MetricVerdict:
    metric: str
    unit: str
    basis: str  # "steps" or "runs"
    baseline: float
    candidate: float
    relative: float | None
    low: float | None  # the shift's interval (candidate - baseline), where the samples give one
    high: float | None
    confidence: float | None
    p_value: float | None
    n_baseline: int
    n_candidate: int
    detectable: float | None  # the smallest relative change this input could have told from noise
    threshold: float | None
    verdict: str
    worse: bool
    regression: bool
    why: list[Cause] = field(default_factory=list)


@dataclass
class Gate:
    baseline: list[str]
    candidate: list[str]
    metrics: list[MetricVerdict]
    step_source: dict[str, str]  # side -> where its step time came from
    notes: list[Note] = field(default_factory=list)

    @property
    def regressions(self) -> list[MetricVerdict]:
        return [m for m in self.metrics if m.regression]

    @property
    def passed(self) -> bool:
        return not self.regressions


def gate(baseline: list[RunSamples], candidate: list[RunSamples], thresholds: Thresholds = Thresholds()) -> Gate:
    """Every metric both sides measured, judged (module docstring)."""
    notes = []
    names = [m for m in _metrics(baseline) if m in set(_metrics(candidate))]
    missing = [m for m in _metrics(baseline) + _metrics(candidate) if m not in names]
    if missing:
        notes.append(Note("one_side_only", {"metrics": list(dict.fromkeys(missing))}))
    notes += [Note("run_without_steps", where=(r.name,)) for r in baseline + candidate if r.steps.empty]
    step_ns = _median(_step_samples(baseline, STEP_TIME))
    out = [_judge(m, baseline, candidate, thresholds.of(m), step_ns) for m in names]
    sources = {side: "/".join(sorted({r.step_source for r in runs})) for side, runs in
               (("baseline", baseline), ("candidate", candidate))}
    if len(set(sources.values())) > 1:
        notes.append(Note("step_time_timed_differently", dict(sources)))
    return Gate([r.name for r in baseline], [r.name for r in candidate], out, sources, notes)


def _metrics(runs: list[RunSamples]) -> list[str]:
    """Metrics every run of the side measured, in the first run's order."""
    seen = [list(r.steps.columns) + list(r.figures) for r in runs]
    return [m for m in seen[0] if all(m in s for s in seen[1:])] if seen else []


def _step_samples(runs: list[RunSamples], metric: str) -> list[np.ndarray]:
    return [r.steps[metric].dropna().to_numpy(dtype=np.float64) for r in runs if metric in r.steps]


def _median(parts: list[np.ndarray]) -> float | None:
    values = np.concatenate(parts) if parts else np.empty(0)
    return float(np.median(values)) if len(values) else None


def _judge(metric: str, baseline: list[RunSamples], candidate: list[RunSamples], threshold: float | None,
           step_ns: float | None) -> MetricVerdict:
    first = baseline[0]
    unit, higher = first.units.get(metric, ""), metric in first.higher_is_better
    per_run = metric in first.figures
    a = np.array([r.figures[metric] for r in baseline]) if per_run else np.concatenate(_step_samples(baseline, metric))
    b = np.array([r.figures[metric] for r in candidate]) if per_run else np.concatenate(_step_samples(candidate, metric))
    if unit in (BYTES, COUNT) and not per_run:
        v = _counted(metric, unit, a, b)
    else:
        v = _timed(metric, unit, a, b, [] if per_run else [_step_samples(baseline, metric), _step_samples(candidate, metric)])
    v.basis, v.threshold = "runs" if per_run else "steps", threshold
    delta = v.candidate - v.baseline
    v.worse = v.verdict not in (WITHIN, TOO_FEW) and ((delta < 0) if higher else (delta > 0))
    v.verdict = v.verdict if v.verdict in (WITHIN, TOO_FEW) else WORDS[unit][0 if (delta > 0) else 1]
    material = unit != TIME or metric == STEP_TIME or step_ns is None or abs(delta) >= MIN_LEAD_SHARE * step_ns
    beyond = threshold is not None and (v.relative is None or abs(v.relative) > threshold)
    v.regression = v.worse and beyond and material
    if v.worse:
        v.why = causes(metric, baseline, candidate, delta)
    return v


def _timed(metric: str, unit: str, a: np.ndarray, b: np.ndarray, runs: list[list[np.ndarray]]) -> MetricVerdict:
    """The shift of the medians and its interval; within the repeats' spread is within noise."""
    s = median_difference(a, b)
    spread = max([_repeat_spread(side) for side in runs] + [_step_wander(a, b)])
    half = (s.high - s.low) / 2 / abs(s.median_a) if s.low is not None and s.median_a else None
    detectable = max(half, spread) if half is not None else None
    if s.low is None:
        verdict = TOO_FEW
    elif s.within_noise or (s.relative is not None and abs(s.relative) <= spread):
        verdict = WITHIN
    else:
        verdict = "beyond"
    return MetricVerdict(metric, unit, "", s.median_a, s.median_b, s.relative, s.low, s.high, s.confidence,
                         s.p_value, s.n_a, s.n_b, detectable, None, verdict, False, False)


def _step_wander(a: np.ndarray, b: np.ndarray) -> float:
    """NOISE_SIGMAS robust standard deviations of a step, both sides' combined, as a share of a's median."""
    sd = [MAD_TO_SD * float(np.median(np.abs(x - np.median(x)))) for x in (a, b)]
    mid = float(np.median(a))
    return NOISE_SIGMAS * float(np.hypot(*sd)) / abs(mid) if mid else 0.0


def _repeat_spread(side: list[np.ndarray]) -> float:
    """How far apart the medians of a side's runs lie, as a share of their median (0 with one run)."""
    medians = [float(np.median(x)) for x in side if len(x)]
    mid = float(np.median(medians)) if medians else 0.0
    return (max(medians) - min(medians)) / abs(mid) if len(medians) > 1 and mid else 0.0


def _counted(metric: str, unit: str, a: np.ndarray, b: np.ndarray) -> MetricVerdict:
    """Beyond the noise where the steps of the two sides do not overlap."""
    med_a, med_b = float(np.median(a)), float(np.median(b))
    widest = max(float(np.ptp(a)), float(np.ptp(b)))
    apart = b.min() > a.max() or b.max() < a.min()
    return MetricVerdict(metric, unit, "", med_a, med_b, (med_b / med_a - 1) if med_a else None, None, None, None, None,
                         len(a), len(b), widest / abs(med_a) if med_a else None, None,
                         "beyond" if apart else WITHIN, False, False)


def causes(metric: str, baseline: list[RunSamples], candidate: list[RunSamples], delta: float) -> list[Cause]:
    """The groups whose part of `metric` per step moved most the way the metric did, each kind's
    TOP_CAUSES, with their share of the metric's change `delta`."""
    a, b = _why_of(baseline, metric), _why_of(candidate, metric)
    if a.empty and b.empty:
        return []
    both = pd.concat({"baseline": a, "candidate": b}, axis=1).fillna(0.0)
    both["delta"] = both["candidate"] - both["baseline"]
    moved = both[np.sign(both["delta"]) == np.sign(delta)] if delta else both.iloc[:0]
    out = []
    for by, rows in moved.groupby(level="by", sort=False):
        for (_, name), row in rows.reindex(rows["delta"].abs().sort_values(ascending=False).index).head(TOP_CAUSES).iterrows():
            share = float(row["delta"] / delta) if delta else None
            out.append(Cause(str(by), str(name), float(row["baseline"]), float(row["candidate"]),
                             share if share is None or math.isfinite(share) else None))
    return out


def _why_of(runs: list[RunSamples], metric: str) -> pd.Series:
    """Per (by, name): the value per step, the mean over the runs (a run without the group counts 0)."""
    parts = [r.why[r.why["metric"] == metric].groupby(["by", "name"])["value"].sum() for r in runs]
    if not parts or all(p.empty for p in parts):
        return pd.Series(dtype="float64")
    return pd.concat(parts, axis=1).fillna(0.0).mean(axis=1)
