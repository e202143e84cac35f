"""The gate's verdict per metric, candidate runs against baseline runs. Pure: RunSamples in,
a Gate out.

Samples: each run's steps (steps as samples within a run) and the runs of a side (repeats as
samples across runs); a workload figure has one value per run, judged with MIN_FIGURE_RUNS
runs a side. The noise model (noise.py) takes a run's level as its median step, with what its
own autocorrelated steps leave uncertain, and adds how far runs of one job move apart:
measured from repeats where a side has them and from the baseline's earlier versions a store
kept (history), never below one step's spread and a stated floor (`run_noise`, for times, memory
and figures: an allocator's state differs between runs too; launches, counted, get none). A metric is beyond the noise where a t test on the levels says
so; the smallest change this input could have detected is that interval's half width. The
gate fails on any of its metrics, so each is judged at 1 - (1 - INTERVAL_LEVEL) / m, m the
metrics that may fail it (Bonferroni): an unchanged job fails the gate in at most
1 - INTERVAL_LEVEL of its pairs, whatever the count of metrics, where the noise model holds.

A regression: a verdict in the worse direction, a change beyond the metric's threshold
(--max-regression, --metric), and, for a time other than the step's, a change of at least
MIN_LEAD_SHARE of the step time (a kernel class of 0.1% of the step doubling fails no build).
Its why: the groups (kernels, scopes, ranks, memory's live groups) whose share of the metric per
step grew the most, each with its share of the metric's change. A trace's peak allocated where
its allocated total climbs over the run's steps (blocks allocated and never freed in the trace)
is `unreliable`: never failed on; the peak above each step's start is the memory metric then.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

import numpy as np
import pandas as pd

from tracelab.core.note import Note

from ..stats import INTERVAL_LEVEL, MIN_LEAD_SHARE
from .noise import MIN_VERSIONS, RUN_NOISE, shift
from .samples import BYTES, COUNT, STEP_TIME, TIME, TRACED_STEP_TIME, RunSamples

DEFAULT_MAX_REGRESSION = 0.05
MIN_FIGURE_RUNS = 2
TOP_CAUSES = 5  # per kind of cause (kernel, scope, rank, ...)
WORDS = {TIME: ("slower", "faster"), BYTES: ("grew", "shrank"), COUNT: ("more", "fewer"), "": ("worse", "better")}
WITHIN, TOO_FEW, UNRELIABLE = "within noise", "too few samples", "unreliable"
# sides' loads that say the machine, not only the code, differed between them (_load_note)
BUSY_LOAD_PER_CPU = 0.5
LOAD_RATIO = 2.0
MIN_LOAD_PER_CPU = 0.05


@dataclass(frozen=True)
class Thresholds:
    """The largest change a metric may make before it fails: `default`, and per metric name or
    shell pattern (`gpu_time:*`) a share, or None where the metric is never failed on. An exact
    name wins over a pattern; of patterns, the last given. `run_noise`: how far runs of one job
    are taken to differ where no side has repeats (noise.py)."""

    default: float | None = DEFAULT_MAX_REGRESSION
    metrics: tuple[tuple[str, float | None], ...] = ()
    run_noise: float = RUN_NOISE

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
    run_floor: float | None = None  # one run's sd between runs from its steps and --run-noise, relative
    run_spread: float | None = None  # the repeats' sd between runs of a side, measured, relative; None: one run a side
    run_history: float | None = None  # the kept versions' sd between times, measured, relative; None: no history
    noise_source: str = ""  # what set the interval: "floor 12% (steps + 10%)", "3+3 repeats", "4 kept baselines"


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


def gate(baseline: list[RunSamples], candidate: list[RunSamples], thresholds: Thresholds = Thresholds(),
         history: list[list[RunSamples]] = ()) -> Gate:
    """Every metric both sides measured, judged (module docstring). `history`: the baseline's
    earlier versions a store kept, oldest first, each its runs."""
    timed = {side: "/".join(sorted({r.step_source for r in runs})) for side, runs in
             (("baseline", baseline), ("candidate", candidate))}
    notes = [Note("step_time_timed_differently", dict(timed))] if len(set(timed.values())) > 1 else []
    baseline, candidate, history = one_step_source(baseline, candidate, history)
    names = [m for m in _metrics(baseline) if m in set(_metrics(candidate))]
    missing = [m for m in _metrics(baseline) + _metrics(candidate) if m not in names]
    if missing:
        notes.append(Note("one_side_only", {"metrics": list(dict.fromkeys(missing))}))
    notes += [Note("run_without_steps", where=(r.name,)) for r in baseline + candidate if r.steps.empty]
    step_ns = _median(_step_samples(baseline, STEP_TIME))
    history = [v for v in history if v]
    figures = set(baseline[0].figures) if baseline and not _figures_judged(baseline, candidate, history) else set()
    judged = sum(thresholds.of(m) is not None and m not in figures for m in names)
    level = family_level(judged)
    out = [_judge(m, baseline, candidate, thresholds.of(m), step_ns, thresholds.run_noise, level, history)
           for m in names]
    step = next((m for m in out if m.metric == STEP_TIME), None)
    notes.append(_noise_note(len(baseline), len(candidate), thresholds.run_noise, level, judged, step, len(history)))
    notes += _source_note(out) + _unreliable_notes(out, baseline + candidate)
    sources = {side: "/".join(sorted({r.step_source for r in runs})) for side, runs in
               (("baseline", baseline), ("candidate", candidate))}
    notes += _load_note(baseline, candidate)
    return Gate([r.name for r in baseline], [r.name for r in candidate], out, sources, notes)


def one_step_source(baseline: list[RunSamples], candidate: list[RunSamples], history=()) -> tuple:
    """The runs as given where all timed their step alike; else every run's step time is its
    traced span, the one a profiled run always has: a step timed without the profiler against one
    the profiler stretched would read the profiler's cost as a regression (or its absence as a
    gain). A run with no traced span (one under backend none) then has no step time, and the
    step is not judged (one side only)."""
    runs = [*baseline, *candidate, *(r for version in history for r in version)]
    if len({r.step_source for r in runs}) <= 1:
        return baseline, candidate, history
    return ([_traced(r) for r in baseline], [_traced(r) for r in candidate],
            [[_traced(r) for r in version] for version in history])


def _traced(run: RunSamples) -> RunSamples:
    if run.step_source == "traced" or STEP_TIME not in run.steps:
        return run
    steps = run.steps.drop(columns=[STEP_TIME])
    if TRACED_STEP_TIME not in steps:
        return dataclasses.replace(run, steps=steps, step_source="none")
    steps = steps.rename(columns={TRACED_STEP_TIME: STEP_TIME})
    order = [STEP_TIME] + [c for c in steps.columns if c != STEP_TIME]
    return dataclasses.replace(run, steps=steps[order], step_source="traced")


def _load_note(baseline: list[RunSamples], candidate: list[RunSamples]) -> list[Note]:
    """gate_load_differs where the two sides ran on a machine busy by other work to clearly
    different degrees (run.json's load per CPU: the busier side at least BUSY_LOAD_PER_CPU and
    LOAD_RATIO times the other's): the noise floor is that of one machine at one load, and other
    work slows every step by itself, so a time verdict there may be the machine's. Said, not
    judged: the verdicts stand."""
    sides = [[r.load_per_cpu for r in runs if r.load_per_cpu is not None] for runs in (baseline, candidate)]
    if not all(sides):
        return []
    base, cand = (float(np.median(s)) for s in sides)
    low, high = sorted((base, cand))
    if high < BUSY_LOAD_PER_CPU or high < LOAD_RATIO * max(low, MIN_LOAD_PER_CPU):
        return []
    return [Note("gate_load_differs", {"baseline_load_per_cpu": base, "candidate_load_per_cpu": cand})]


def _figures_judged(baseline: list[RunSamples], candidate: list[RunSamples], history: list[list[RunSamples]]) -> bool:
    """A workload figure, one value a run, is judged with MIN_FIGURE_RUNS runs a side, or a
    history of MIN_VERSIONS versions: with one run, its steps cannot say how far it moves between
    runs (its runs' spread or its kept versions' does, beside the floor)."""
    return min(len(baseline), len(candidate)) >= MIN_FIGURE_RUNS or len(history) + 1 >= MIN_VERSIONS


def family_level(metrics: int) -> float:
    """Each metric's confidence level, so that the gate's as a whole is INTERVAL_LEVEL (Bonferroni)."""
    return 1 - (1 - INTERVAL_LEVEL) / max(metrics, 1)


def _noise_note(n_baseline: int, n_candidate: int, run_noise: float, level: float, judged: int,
                step: MetricVerdict | None, versions: int = 0) -> Note:
    """How the noise between runs was had: from history (the step time's kept versions' spread
    and floor), from repeats (their spread and floor), or not measured (the floor alone)."""
    values = {"metrics": judged, "level": level, "gate_level": INTERVAL_LEVEL, "run_noise": run_noise}
    if versions + 1 >= MIN_VERSIONS:
        spread = {"step_history": step.run_history, "step_floor": step.run_floor} if step is not None else {}
        return Note("gate_noise_history", {"versions": versions + 1, "baseline_runs": n_baseline,
                                           "candidate_runs": n_candidate, **values, **spread})
    if n_baseline > 1 or n_candidate > 1:
        spread = {"step_spread": step.run_spread, "step_floor": step.run_floor} if step is not None else {}
        return Note("gate_noise_repeats", {"baseline_runs": n_baseline, "candidate_runs": n_candidate, **values, **spread})
    return Note("gate_noise_floor", {**values, "versions": versions + 1, "min_versions": MIN_VERSIONS})


def _source_note(metrics: list[MetricVerdict]) -> list[Note]:
    """Which noise set each metric's interval: the floor, the repeats or the kept versions."""
    by = {}
    for m in metrics:
        if m.noise_source:
            by.setdefault(m.noise_source, []).append(m.metric)
    return [Note("gate_noise_sources", {"sources": by})] if by else []


def _unreliable_notes(metrics: list[MetricVerdict], runs: list[RunSamples]) -> list[Note]:
    """Why a metric was judged unreliable: the most its allocated total climbed in one run."""
    out = []
    for m in (m for m in metrics if m.verdict == UNRELIABLE):
        climbs = {r.name: r.climbs[m.metric] for r in runs if m.metric in r.climbs}
        top = max(climbs, key=climbs.get)
        out.append(Note("gate_peak_unreliable", {"metric": m.metric, "runs": len(climbs), "climb_bytes": climbs[top],
                                                 "run": top}))
    return out


def _metrics(runs: list[RunSamples]) -> list[str]:
    """Metrics every run of the side measured, in the first run's order."""
    seen = [list(r.steps.columns) + list(r.figures) for r in runs]
    return [m for m in seen[0] if all(m in s for s in seen[1:])] if seen else []


def _step_samples(runs: list[RunSamples], metric: str) -> list[np.ndarray]:
    return [r.steps[metric].dropna().to_numpy(dtype=np.float64) for r in runs if metric in r.steps]


def _median(parts: list[np.ndarray]) -> float | None:
    values = np.concatenate(parts) if parts else np.empty(0)
    return float(np.median(values)) if len(values) else None


def _samples(runs: list[RunSamples], metric: str, per_run: bool) -> list[np.ndarray]:
    """Each run's samples of the metric: its steps, or its one workload figure."""
    return [np.array([r.figures[metric]], dtype=np.float64) for r in runs] if per_run else _step_samples(runs, metric)


def _judge(metric: str, baseline: list[RunSamples], candidate: list[RunSamples], threshold: float | None,
           step_ns: float | None, run_noise: float, level: float, history: list[list[RunSamples]]) -> MetricVerdict:
    first = baseline[0]
    unit, higher = first.units.get(metric, ""), metric in first.higher_is_better
    per_run = metric in first.figures
    a, b = _samples(baseline, metric, per_run), _samples(candidate, metric, per_run)
    kept = [_samples(v, metric, per_run) for v in history if metric in set(_metrics(v))]
    counted = unit == COUNT and not per_run  # the same work launches the same kernels on any run: no floor
    v = _verdict(metric, unit, a, b, 0.0 if counted else run_noise, level, kept)
    if per_run and not _figures_judged(baseline, candidate, history):
        v.verdict = TOO_FEW  # one value a side: nothing measures how far it moves between runs
    if any(metric in r.climbs for r in baseline + candidate):
        v.verdict = UNRELIABLE  # the trace missed frees (or the job leaks): its peak moves with when they fell
    v.basis, v.threshold = "runs" if per_run else "steps", threshold
    delta = v.candidate - v.baseline
    v.worse = v.verdict not in (WITHIN, TOO_FEW, UNRELIABLE) and ((delta < 0) if higher else (delta > 0))
    v.verdict = v.verdict if v.verdict in (WITHIN, TOO_FEW, UNRELIABLE) else WORDS[unit][0 if (delta > 0) else 1]
    material = unit != TIME or metric == STEP_TIME or step_ns is None or abs(delta) >= MIN_LEAD_SHARE * step_ns
    beyond = threshold is not None and (v.relative is None or abs(v.relative) > threshold)
    v.regression = v.worse and beyond and material
    if v.worse:
        v.why = causes(metric, baseline, candidate, delta)
    return v


def _verdict(metric: str, unit: str, a: list[np.ndarray], b: list[np.ndarray], run_noise: float,
             level: float, history: list[list[np.ndarray]] = ()) -> MetricVerdict:
    """The levels, their change and its interval (noise.shift), and whether it is beyond the noise."""
    n_a, n_b = sum(map(len, a)), sum(map(len, b))
    s = shift(a, b, run_noise, level, history)
    if s is None:
        return MetricVerdict(metric, unit, "", math.nan, math.nan, None, None, None, None, None, n_a, n_b, None,
                             None, TOO_FEW, False, False)
    floor = "floor" if s.floor is None else f"floor {s.floor:.0%} (steps + {run_noise:.0%})"
    source = {"floor": floor, "repeats": f"{len(a)}+{len(b)} repeats",
              "history": f"{len(history) + 1} kept baselines"}[s.source]
    scale = abs(s.level_a)
    low, high = (None, None) if s.low is None else (s.low * scale, s.high * scale)
    return MetricVerdict(metric, unit, "", s.level_a, s.level_b, s.relative, low, high, level, s.p_value,
                         n_a, n_b, s.detectable, None, WITHIN if s.within_noise else "beyond", False, False,
                         run_floor=s.floor, run_spread=s.spread, run_history=s.history, noise_source=source)


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
