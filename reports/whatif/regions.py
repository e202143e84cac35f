"""Each phase's own slowdown under the profiler, where the run timed its phases without it. Pure.

A CPU-only trace's operators are the host's own work, and the profiler does not slow them alike:
a phase of many small operators (a forward, a backward) is slowed by the records of each, a few
large products hardly at all, and on a shared host the phases also meet other load at other
times. One measured step cannot tell them apart: scaled alike, a scenario that removes the large
products keeps the small operators' slowdown. `tracelab run train` times each region directly
inside a step (forward, backward, grad_sync, optimizer, extra_work, and "" the step outside them)
on the host's clock alone, with the profiler off (results' unprofiled_region_ns: the median over
the steps); the trace holds the same regions as ranges, so each region's factor is measured:
its time without the profiler over its median time a step in the trace. Each host operator takes
its region's factor on its duration and the gap before it (`pace`); collectives keep theirs (the
replay recomputes their waits). A region the run did not time, and every region of a run that
timed none (a user's trace where only the step is known), take the step's factor: the measured
step over the trace's median step, the rule of the whole step scaled alike.

A GPU trace's host nodes are launch calls, and the profiler's cost comes off them per event
(profiler_cost.py) at the scale the measured step sets. Where the device paces that step the step
says nothing of the host, and the regions do (`cost_floor`): a region's host time without the
profiler is at most its measured time (the host may also have waited on a full launch queue), so
its time in the trace less its records' cost must come down to it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracelab.core.schema import kind_mask

from .kinds import HOST_OP
from .profiler_cost import COUNTED

OUTSIDE = ""  # the step's time outside every region, as results' unprofiled_region_ns names it
REGION_COLUMNS = ["step", "region", "dur_ns"]
SPAN_COLUMNS = ["step", "region", "start_ns", "end_ns"]
COUNT_COLUMNS = list(COUNTED)  # a region's records, in the columns a Costs prices
SYNCS = "syncs"  # a region's host calls that wait for the device


def step_regions(host: pd.DataFrame | None, steps: pd.DataFrame) -> pd.DataFrame:
    """Per step (`steps`: step, start_ns, end_ns of its range) the outermost ranges inside it on
    the step range's thread, summed by name (REGION_COLUMNS): the regions a workload opens
    directly inside its step. Ranges of other threads (a collective's worker) are not phases."""
    spans = region_spans(host, steps)
    if not len(spans):
        return pd.DataFrame(columns=REGION_COLUMNS)
    spans = spans.assign(dur_ns=spans["end_ns"] - spans["start_ns"])
    return spans.groupby(["step", "region"], sort=False, as_index=False)["dur_ns"].sum()[REGION_COLUMNS]


def region_spans(host: pd.DataFrame | None, steps: pd.DataFrame) -> pd.DataFrame:
    """step_regions' ranges one by one (SPAN_COLUMNS), in each step's order."""
    if host is None or not len(host) or not len(steps):
        return pd.DataFrame(columns=SPAN_COLUMNS)
    start = host["start_ns"].to_numpy(np.int64)
    tid, end = host["tid"].to_numpy(np.int64), start + host["dur_ns"].to_numpy(np.int64)
    at = np.flatnonzero(kind_mask(host, ("step",)))
    tid_at = dict(zip(start[at].tolist(), tid[at].tolist()))  # a step range's thread by its start
    ranges = _by_start(np.flatnonzero(kind_mask(host, ("range",))), start, end)
    name = np.asarray(host["name"].array, dtype=object)[ranges]
    start, tid, end = start[ranges], tid[ranges], end[ranges]
    rows = []
    for step, begin, until in zip(*(steps[c].tolist() for c in ("step", "start_ns", "end_ns"))):
        inside = np.flatnonzero((tid == tid_at.get(int(begin), -1)) & (start >= begin) & (end <= until))
        rows += [(int(step), name[i], s, e) for i, s, e in _outermost(inside, start[inside].tolist(), end[inside].tolist())]
    return pd.DataFrame(rows, columns=SPAN_COLUMNS)


def _by_start(rows: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """`rows` by start, the longest first where several start together (a range before those it
    holds), else in the order given."""
    return rows[np.lexsort((start[rows] - end[rows], start[rows]))]


def _outermost(rows: np.ndarray, start: list[int], end: list[int]) -> list[tuple[int, int, int]]:
    """(row, start, end) of the ranges (by start, the longest first) that no earlier one holds:
    each starts at or after the latest end of those kept before it."""
    out = []
    reach = None  # the latest end of the outermost ranges so far (clocks may start below 0)
    for row, s, e in zip(rows.tolist(), start, end):
        if reach is None or s >= reach:
            out.append((row, s, e))
            reach = e
    return out


def region_counts(spans: pd.DataFrame, node_start_ns: np.ndarray, counts: np.ndarray,
                  sync: np.ndarray | None = None) -> pd.DataFrame:
    """Per step and region of `spans` (region_spans) its time, the profiler's records (COUNT_COLUMNS)
    of the host nodes that start inside it (`counts`: per node, as profiler_cost.node_counts gives
    them, the gap's before it and the node's own): what a cost per event takes off that region; and
    its `syncs`, the nodes inside it that wait for the device (`sync`, per node)."""
    columns = [*COUNT_COLUMNS, SYNCS]
    if not len(spans):
        return pd.DataFrame(columns=[*REGION_COLUMNS, *columns])
    per_node = np.c_[counts, np.zeros(len(counts)) if sync is None else np.asarray(sync, dtype=np.float64)]
    order = np.argsort(node_start_ns, kind="stable")
    at, running = node_start_ns[order], np.vstack([np.zeros((1, per_node.shape[1])), np.cumsum(per_node[order], axis=0)])
    lo = np.searchsorted(at, spans["start_ns"].to_numpy(np.int64), side="left")
    hi = np.searchsorted(at, spans["end_ns"].to_numpy(np.int64), side="left")
    held = pd.DataFrame(running[hi] - running[lo], columns=columns, index=spans.index)
    out = pd.concat([spans[["step", "region"]], (spans["end_ns"] - spans["start_ns"]).rename("dur_ns"), held], axis=1)
    return out.groupby(["step", "region"], sort=False, as_index=False)[["dur_ns", *columns]].sum()


@dataclass(frozen=True)
class CostFloor:
    """The least factor on the fitted cost per event that brings every timed region's host time in
    the trace down to its time measured without the profiler, and the region that sets it."""

    scale: float
    rank: int
    region: str
    profiled_ns: float  # the region's median time a step in the trace
    unprofiled_ns: float  # its time a step measured without the profiler
    cost_ns: float  # the fitted cost of its records a step (at scale 1)


def cost_floor(g, measured: dict[int, tuple[float, dict]] | None, costs_of) -> CostFloor | None:
    """On a GPU trace whose run timed its phases without the profiler (`measured`: profiler_cost.
    measured_regions), the CostFloor. Where the device paces the step without the profiler, its time
    says nothing of the host's; a phase's does: its host time without the profiler is at most its
    measured time (the host there may also have waited for a full launch queue, never less), so its
    time in the trace less its records at the fitted cost times the factor must come down to it. The
    phase that ran least ahead of the device (a forward after the step's sync) binds. A phase with a
    call that waits for the device in the trace (a sync, an .item()) sets nothing: that wait is in
    its time, and none of it is the profiler's. `costs_of`: a rank's Config -> profiler_cost.Costs or
    None. None where no phase binds (or none was timed)."""
    best = None
    for r, rg in (g.ranks.items() if measured else ()):
        counted, costs = rg.regions, costs_of(getattr(rg, "profiler", None))
        if r not in measured or costs is None or counted is None or not set(COUNT_COLUMNS) <= set(counted.columns):
            continue
        for name, unprofiled in measured[r][1].items():
            rows = counted[counted["region"] == name]
            # a phase whose host waited for the device in the trace holds that wait, no cost of the profiler's
            if name == OUTSIDE or not unprofiled or not len(rows) or (SYNCS in rows and (rows[SYNCS] > 0).any()):
                continue
            profiled = float(np.median(rows["dur_ns"].to_numpy(np.float64)))
            cost = float(np.median(costs.of(rows[COUNT_COLUMNS].to_numpy(np.float64))))
            if cost > 0 and profiled > unprofiled:
                made = CostFloor((profiled - float(unprofiled)) / cost, int(r), str(name), profiled, float(unprofiled), cost)
                best = made if best is None or made.scale > best.scale else best
    return best


@dataclass(frozen=True)
class RankPace:
    """One rank's factors: region name -> unprofiled / profiled time, and the step's (`step`)."""

    step: float
    regions: dict[str, float]

    def of(self, region: str) -> float:
        return self.regions.get(region, self.step)


def rank_pace(regions: pd.DataFrame, step_ns: pd.Series, unprofiled_step_ns: float,
              unprofiled_region_ns: dict[str, float] | None) -> RankPace | None:
    """A rank's factors from its trace's step_regions and step durations (`step_ns`, by step) and
    its run's measured step and regions without the profiler; None where the step is not known."""
    profiled_step = float(np.median(step_ns)) if len(step_ns) else 0.0
    if not (profiled_step > 0 and unprofiled_step_ns > 0):
        return None
    step = unprofiled_step_ns / profiled_step
    named = {k: v for k, v in (unprofiled_region_ns or {}).items() if k != OUTSIDE}
    timed = {k: float(v) for k, v in named.items() if v and v > 0}
    mine = regions[regions["region"].isin(list(timed))]
    per = mine.groupby("region")["dur_ns"].median()
    factors = {k: timed[k] / float(per[k]) for k in per.index if per[k] > 0}
    # the time outside the phases is the step less all of them: comparable only where each has its factor
    outside, outside_u = _outside_ns(mine, step_ns), (unprofiled_region_ns or {}).get(OUTSIDE) or 0
    if named and set(factors) == set(named) and outside > 0 and outside_u > 0:
        factors[OUTSIDE] = float(outside_u) / outside
    return RankPace(step, factors)


def _outside_ns(regions: pd.DataFrame, step_ns: pd.Series) -> float:
    """The median over steps of the step's time outside the timed regions."""
    inside = regions.groupby("step")["dur_ns"].sum().reindex(step_ns.index, fill_value=0)
    return float(np.median(step_ns.to_numpy(np.float64) - inside.to_numpy(np.float64))) if len(step_ns) else 0.0


def node_regions(scope: np.ndarray, named: set[str]) -> np.ndarray:
    """Per node, the first component of its scope that is a timed region's name, else OUTSIDE."""
    def first(s: str) -> str:
        return next((part for part in s.split("/") if part in named), OUTSIDE)
    return np.array([first(str(s)) for s in scope], dtype=object)


def pace(g, p, paces: dict[int, RankPace]) -> np.ndarray:
    """Scales each host operator's duration in Params `p` by its rank's factor for its region
    (module docstring), and the gap before it by the factor of the region the gap lies in: the
    operator's own where the one before it on its thread is in the same region, else the time
    outside the regions (a stall between two phases is no phase's work, and a phase's records do
    not slow it). The per-node factors on the durations (1: left)."""
    factor, gap_factor = np.ones(len(g)), np.ones(len(g))
    host = g.kind == HOST_OP
    for r, rp in paces.items():
        mine = np.flatnonzero(host & (g.rank == r))
        mine = mine[np.lexsort((g.start_ns[mine], g.chain[mine]))]
        where = node_regions(g.scope[mine], set(rp.regions))
        factor[mine] = [rp.of(w) for w in where]
        within = np.zeros(len(mine), dtype=bool)  # the chain predecessor in the same region
        within[1:] = (g.chain[mine[1:]] == g.chain[mine[:-1]]) & (where[1:] == where[:-1])
        gap_factor[mine] = np.where(within, factor[mine], rp.of(OUTSIDE))
    p.dur_ns[:] = np.rint(p.dur_ns * factor).astype(np.int64)
    p.gap_ns[:] = np.where(p.gap_ns > 0, np.rint(p.gap_ns * gap_factor), p.gap_ns).astype(np.int64)
    return factor


def paces_of(g, measured: dict[int, tuple[float, dict]] | None) -> dict[int, RankPace]:
    """Per rank of joined graph `g` that timed its regions (`measured`: profiler_cost.measured_regions),
    its factors; {} where none did or a rank of `g` has no measurement (the whole step scaled alike)."""
    if not measured or not g.cpu_only or set(g.ranks) - set(measured):
        return {}
    out = {}
    for r, rg in g.ranks.items():
        steps = rg.step_ranges
        step_ns = pd.Series((steps["end_ns"] - steps["start_ns"]).to_numpy(np.float64), index=steps["step"].to_numpy())
        regions = rg.regions if rg.regions is not None else pd.DataFrame(columns=REGION_COLUMNS)
        made = rank_pace(regions, step_ns, *measured[r])
        if made is None:
            return {}
        out[r] = made
    return out if any(rp.regions for rp in out.values()) else {}
