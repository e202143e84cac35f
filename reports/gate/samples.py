"""Each run's metrics as samples, one value per step (or one per run for the workload's own
figures), and the tables that explain a change (GPU time by kernel, scope and rank; memory
live at the peak by group). Pure: a run's ranks and run.json in, frames out.

A run's step is the job's: its time is the slowest rank's (max over ranks), its GPU time,
exposed communication, idle and launches the ranks' sum, its memory peak the highest rank's.
The step time is the unprofiled one where the run folder's results record it (the same
steps timed with the profiler off: the profiler's own cost is no regression), else the
traced span of the step (first GPU activity to last).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracelab.core.schema import RankData, kind_mask

from ..runtable import RESULTS, results_of
from ..timeline.collectives import activity
from ..timeline.steps import shared_step_rows

STEP_TIME = "step_time"
TRACED_STEP_TIME = "traced_step_time"
TIME, BYTES, COUNT, VALUE = "ns", "bytes", "count", ""  # metric units
WHYS = ("kernel", "scope")  # the groups of GPU time a time metric's change is explained by
COMM = "communication"


@dataclass
class RankGate:
    """What the gate needs of one rank, made in the worker that parsed it: per step its span,
    kernels, compute and exposed communication (steps.step_rows), and its GPU time per step by
    op class x kernel and op class x scope (time and count)."""

    steps: pd.DataFrame
    groups: pd.DataFrame  # step, by, name, op_class, dur_ns, count


def rank_gate(rank: RankData) -> RankGate:
    """RankGate of one rank (load_many's reduce). GPU time is the kernels' (a CPU run's: its
    operators', as `tracelab steps` counts them)."""
    rows = activity(rank.events)
    rows = rows[kind_mask(rows, ("kernel", "cpu_op")) & rows["step"].notna().to_numpy()]
    frame = pd.DataFrame({"step": rows["step"].to_numpy(dtype=np.int64, na_value=0),
                          "op_class": rows["op_class"].astype(str).to_numpy(),
                          "dur_ns": rows["dur_ns"].to_numpy(dtype=np.int64), "count": 1})
    parts = []
    for by in WHYS:
        names = rows[by].astype(object).where(rows[by].notna(), rows["name"].astype(object)).astype(str).to_numpy()
        g = frame.assign(name=names).groupby(["step", "op_class", "name"], sort=False)[["dur_ns", "count"]].sum()
        parts.append(g.reset_index().assign(by=by))
    steps = shared_step_rows(rank) if len(rows) else pd.DataFrame(columns=["step", "kernels", "span_ns"])
    return RankGate(steps, pd.concat(parts, ignore_index=True) if parts else pd.DataFrame())


DIGESTS = {"gate": rank_gate}  # made for the report and the gate command only (reports/ranks.FINDINGS leaves it out)
GATE_DIGESTS = ("idle", "memory")  # the registry's digests the gate reads beside its own


@dataclass
class RunSamples:
    """One run: `steps` (index: step; columns: metric names; values per step), `figures` (metric
    -> one value for the run), its ranks, what explains a change (`why`: by, name, metric,
    value per step) and the units and directions of its metrics."""

    name: str
    steps: pd.DataFrame
    figures: dict[str, float]
    why: pd.DataFrame
    units: dict[str, str]
    higher_is_better: set[str] = field(default_factory=set)
    step_source: str = "traced"
    load_per_cpu: float | None = None  # the machine's busiest load average per CPU during the run (run.json)
    climbs: dict[str, float] = field(default_factory=dict)  # metric -> bytes its allocated total climbed over the steps


def run_samples(name: str, ranks: list[tuple[int, dict]], info: dict | None) -> RunSamples:
    """The samples of one run from its ranks' digests ((rank, {digest name: digest})) and run.json."""
    gates = [(r, d["gate"]) for r, d in ranks]
    cols, units, why = {}, {}, []
    _time_metrics(gates, cols, units, why)
    _idle_metrics([(r, d.get("idle")) for r, d in ranks], cols, units, why)
    climbs = _memory_metrics([(r, d.get("memory")) for r, d in ranks], info, cols, units, why)
    source = "traced"
    unprofiled = _unprofiled_ns(info)
    if unprofiled is not None:
        if STEP_TIME in cols:  # the traced span stays, beside: it is what the why explains
            cols[TRACED_STEP_TIME], units[TRACED_STEP_TIME] = cols[STEP_TIME], TIME
        units[STEP_TIME] = TIME
        cols[STEP_TIME], source = pd.Series(unprofiled, index=pd.RangeIndex(len(unprofiled), name="step")), "unprofiled"
    figures, higher = _figures(info)
    order = [STEP_TIME] * (STEP_TIME in cols) + [k for k in cols if k != STEP_TIME]
    steps = pd.DataFrame({k: cols[k] for k in order})  # a run under none: its unprofiled steps alone
    units.update({k: VALUE for k in figures})
    return RunSamples(name, steps, figures, pd.concat(why, ignore_index=True) if why else _no_why(),
                      units, higher, source, _load_per_cpu(info), climbs)


def _load_per_cpu(info: dict | None) -> float | None:
    """The higher of run.json's load averages per CPU at the run's start and end (None where
    the run did not record them: made by an older tracelab, or a trace alone)."""
    loads = (info or {}).get("load_per_cpu")
    values = [v for v in (loads.values() if isinstance(loads, dict) else ()) if isinstance(v, (int, float))]
    return float(max(values)) if values else None


def _no_why() -> pd.DataFrame:
    return pd.DataFrame(columns=["metric", "by", "name", "value"])


def _per_step(values: pd.DataFrame, by: list[str], column: str) -> pd.Series:
    """Mean per step of `column` summed over rows of each `by` key: what a group adds to a step."""
    n = max(values["step"].nunique(), 1)
    return values.groupby(by, sort=False)[column].sum() / n


def _time_metrics(gates: list[tuple[int, RankGate]], cols: dict, units: dict, why: list) -> None:
    """Traced step time, GPU time by class, exposed communication and launches per step, and their causes."""
    steps = pd.concat([g.steps.assign(rank=r) for r, g in gates if len(g.steps)], ignore_index=True) \
        if any(len(g.steps) for _, g in gates) else None
    groups = pd.concat([g.groups.assign(rank=r) for r, g in gates if len(g.groups)], ignore_index=True) \
        if any(len(g.groups) for _, g in gates) else None
    if steps is None or groups is None:
        return
    steps = steps.astype({"step": "int64"})
    cols[STEP_TIME] = steps.groupby("step")["span_ns"].max().astype("float64")
    cols["exposed_comm"] = steps.groupby("step")["exposed_comm_ns"].sum().astype("float64")
    cols["launches"] = steps.groupby("step")["kernels"].sum().astype("float64")
    units.update({STEP_TIME: TIME, "exposed_comm": TIME, "launches": COUNT})
    kernels = groups[groups["by"] == "kernel"]
    for op_class, rows in kernels.groupby("op_class"):
        metric = f"gpu_time:{op_class}"
        cols[metric] = rows.groupby("step")["dur_ns"].sum().reindex(cols[STEP_TIME].index, fill_value=0).astype("float64")
        units[metric] = TIME
        for by in WHYS:
            why.append(_named(_per_step(groups[(groups["by"] == by) & (groups["op_class"] == op_class)], ["name"],
                                        "dur_ns"), metric, by))
        why.append(_named(_per_step(rows, ["rank"], "dur_ns"), metric, "rank"))
    work = groups[groups["op_class"] != COMM]  # a rank waiting at a collective is not the cause of a slower step
    for by in WHYS:
        why.append(_named(_per_step(work[work["by"] == by], ["name"], "dur_ns"), STEP_TIME, by))
    why.append(_named(_per_step(steps, ["rank"], "compute_ns"), STEP_TIME, "rank"))
    why.append(_named(_per_step(steps, ["rank"], "exposed_comm_ns"), "exposed_comm", "rank"))
    why.append(_named(_per_step(kernels[kernels["op_class"] == COMM], ["name"], "dur_ns"), "exposed_comm", "kernel"))
    why.append(_named(_per_step(kernels, ["name"], "count"), "launches", "kernel"))
    why.append(_named(_per_step(steps, ["rank"], "kernels"), "launches", "rank"))


def _named(values: pd.Series, metric: str, by: str) -> pd.DataFrame:
    return pd.DataFrame({"metric": metric, "by": by, "name": values.index.astype(str), "value": values.to_numpy()})


def _idle_metrics(idles: list[tuple[int, object]], cols: dict, units: dict, why: list) -> None:
    """GPU idle per step by cause (reports/idle), summed over ranks; by rank for the why."""
    from ..timeline.causes import CAUSES

    frames = [i.steps.assign(rank=r) for r, i in idles if i is not None and len(i.steps) and i.steps["step"].notna().any()]
    if not frames:
        return
    steps = pd.concat(frames, ignore_index=True).astype({"step": "int64"})
    for cause in CAUSES:
        metric = f"idle:{cause.removeprefix('idle_').removesuffix('_ns')}"
        cols[metric] = steps.groupby("step")[cause].sum().astype("float64")
        units[metric] = TIME
        why.append(_named(_per_step(steps, ["rank"], cause), metric, "rank"))


PEAK, ABOVE_START = "peak_allocated", "peak_above_start"
MEMORY = ((PEAK, "peak_allocated_bytes"), ("peak_reserved", "reserved_bytes"), (ABOVE_START, "above_start_bytes"))
COUNTERS = {PEAK: "step_peak_allocated_bytes", "peak_reserved": "step_peak_reserved_bytes"}  # train rows' lists
START_COUNTER = "step_start_allocated_bytes"
HELD_BEFORE = "before_trace"  # memory's live group of what was allocated before the trace began


def _memory_metrics(memories: list[tuple[int, object]], info: dict | None, cols: dict, units: dict,
                    why: list) -> dict[str, float]:
    """Per step, the highest rank's peak allocated and reserved, and its peak above what it held at
    the step's start (peak_above_start: what the step itself allocates at most; exact for a
    deterministic step, whatever is held over from earlier steps, or counted as held where a trace
    misses frees); torch.cuda's own counters where the run folder's results hold them, else the
    trace's memory rows. The why: the ranks, and the groups live at each rank's peak (reports/memory).
    Returns the trace's peak allocated's climb where it climbs (climbed_bytes): a peak then unreliable."""
    frames = [m.steps.assign(rank=r) for r, m in memories if m is not None and len(m.steps) and m.steps["step"].notna().any()]
    climbs = {}
    if frames:
        steps = pd.concat(frames, ignore_index=True).astype({"step": "int64"})
        numeric = {c: pd.to_numeric(steps[c], errors="coerce").astype("float64")
                   for c in ("peak_allocated_bytes", "reserved_bytes", "allocated_start_bytes")}
        steps = steps.assign(**numeric, above_start_bytes=numeric["peak_allocated_bytes"] - numeric["allocated_start_bytes"])
        for metric, column in MEMORY:
            if steps[column].notna().any():
                cols[metric] = steps.groupby("step")[column].max()
                units[metric] = BYTES
                why.append(_named(_per_step(steps, ["rank"], column), metric, "rank"))
        why.extend(_live_why(memories, [m for m in (PEAK, ABOVE_START) if m in cols]))
        climbed = climbed_bytes(steps)
        if PEAK in cols and climbed is not None:
            climbs[PEAK] = climbed
    for metric, counted in _counted(info).items():  # the allocator's own count of the same steps: exact, where recorded
        cols[metric], units[metric] = counted, BYTES
        climbs.pop(metric, None)
    return climbs


CLIMB_SHARE = 0.05  # of the rank's median peak: an allocated total that rises by this between steps is held, not noise


def climbed_bytes(steps: pd.DataFrame) -> float | None:
    """The most any rank's allocated total at a step's start rose from its first step to its
    last, where that is at least CLIMB_SHARE of the rank's median peak and the total never fell
    back below the first step's: blocks allocated and never freed in the trace while the step
    repeats (frees the profiler missed, or a leak). Its peak allocated then climbs with them,
    by whole blocks at whichever steps they fell, and moves between runs by more than the step
    itself did; None where no rank's climbs."""
    out = []
    for _, rows in steps.sort_values("step").groupby("rank", sort=False):
        start = rows["allocated_start_bytes"].dropna().to_numpy()
        peak = float(np.nanmedian(rows["peak_allocated_bytes"])) if rows["peak_allocated_bytes"].notna().any() else 0.0
        if len(start) >= 2 and start.min() >= start[0] and start[-1] - start[0] >= CLIMB_SHARE * max(peak, 1.0):
            out.append(float(start[-1] - start[0]))
    return max(out) if out else None


def _live_why(memories: list[tuple[int, object]], metrics: list[str]) -> list[pd.DataFrame]:
    """Each group's bytes live at the peak, per step, of the rank that holds the most of it: what grew there."""
    tops = [m.top.assign(rank=r) for r, m in memories if m is not None and len(m.top)]
    if not tops or not metrics:
        return []
    out = []
    for by, rows in pd.concat(tops, ignore_index=True).groupby("by", sort=False):
        per_rank = rows.groupby(["rank", "name"])["bytes"].sum() / max(rows["step"].nunique(), 1)
        # what was allocated before the trace is held at the step's start: no part of what it adds above it
        out += [_named(per_rank.groupby(level="name").max(), metric, str(by)) for metric in metrics
                if not (metric == ABOVE_START and by == HELD_BEFORE)]
    return out


def _counted(info: dict | None) -> dict[str, pd.Series]:
    """The train rows' per-step counters, each the highest rank's per step: peak allocated and
    reserved, and the peak above the step's start allocated where both are recorded."""
    out = {metric: _highest(_counter_lists(info, key)) for metric, key in COUNTERS.items()}
    peaks, starts = _counter_lists(info, COUNTERS[PEAK]), _counter_lists(info, START_COUNTER)
    if peaks and len(peaks) == len(starts):
        out[ABOVE_START] = _highest([[p - s for p, s in zip(peak, start)] for peak, start in zip(peaks, starts)])
    return {k: v for k, v in out.items() if v is not None}


def _counter_lists(info: dict | None, key: str) -> list[list[float]]:
    """Each rank's per-step list of a train row's counter, where the rank recorded it whole."""
    lists = [row.get(key) for figs in results_of(info or {}) for row in (figs.get("rows") or [])[:1]
             if isinstance(row, dict)]
    return [[float(x) for x in v] for v in lists if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v)]


def _highest(lists: list[list[float]]) -> pd.Series | None:
    """The highest rank's value per step (over the steps every rank recorded); None where none did."""
    if not lists:
        return None
    n = min(map(len, lists))
    return pd.Series(np.max([v[:n] for v in lists], axis=0), index=pd.RangeIndex(n, name="step"))


def _unprofiled_ns(info: dict | None) -> list[float] | None:
    """The steps timed with the profiler off (results' unprofiled_step_ns_samples, at the top of a
    rank's results or in its one row), the slowest rank's per step; None where none were timed."""
    lists = []
    for figs in results_of(info or {}):
        rows = figs.get("rows") if isinstance(figs.get("rows"), list) else []
        for holder in [figs, *rows[:1]]:
            v = holder.get("unprofiled_step_ns_samples") if isinstance(holder, dict) else None
            if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
                lists.append([float(x) for x in v])
    slowest = _highest(lists)
    return None if slowest is None else list(slowest)


def _figures(info: dict | None) -> tuple[dict[str, float], set[str]]:
    """The workload's own figures of the run (reports/runs RESULTS: tokens/s, MFU, ...), one
    value each, and those where higher is better; the step time and peak memory are measured per step instead."""
    if not info:
        return {}, set()
    figs = results_of(info)
    out, higher = {}, set()
    for label, value_of, up in RESULTS.get(str(info.get("workload")), []):
        if label.startswith(("step time", "peak memory")):
            continue
        value = value_of(figs)
        if value is not None:
            out[f"result:{label}"] = float(value)
            if up:
                higher.add(f"result:{label}")
    return out, higher
