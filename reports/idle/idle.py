"""Why was the GPU idle? Per step and rank, the GPU's idle time split by cause. Pure.

A step's span runs from its first GPU activity's start to its last one's end (as in
`tracelab steps`); idle is the gaps in the union of all its streams' GPU work (kernels,
copies, fills) within it. Each gap [g0, g1) ends where the next GPU op starts (of ops
starting together, the one launched first). With L = the start of that op's launch call
(launch_start_ns) and E = its end:

- `idle_host_ns`: [g0, L): the host had not yet begun to launch the op, and was in no
  synchronising call (schema.HOST_KINDS `sync`, any thread of the rank) and no host stall;
- `idle_stall_ns`: the part of [g0, L) in a host stall (reports/timeline/stalls.py: untraced
  host time after a sync or between steps): work the profiler does not see, which no faster
  launching removes (its fix is the stall's: fixes/stall.py);
- `idle_sync_ns`: the part of [g0, L) that a synchronising call covered: the host was
  blocked waiting for the GPU (cudaDeviceSynchronize, ..., a blocking copy);
- `idle_launch_ns`: [max(g0, L), g1) where the launch call was still running at g0 (E > g0):
  the op was being launched onto an empty queue and had not started (launch latency), up to
  LAUNCH_LATENCY_NS after the call returned; what is left of the gap past that the op waited
  as below (a HIP launch returning at 48 us of a 463 ms gap is 25 us of launch, not 463 ms);
- `idle_dependency_ns`: the same part where the op was already queued (E <= g0), nothing
  on its own stream ran up to g0, and the host made its stream wait (a `wait` call of the host
  frame: cudaStreamWaitEvent, cuStreamWaitValue32, ... on any thread) after the launch of its
  stream's previous op and no later than its own: it waited on another stream, an event or a
  peer. The gap's row names the wait call, and the stream and op that ended the busy time
  before it (at g0: the work the wait was on, as far as the trace shows it; the `waits` table).
  Waits at collectives are inside the collective kernels (busy, not idle): see `tracelab steps`;
- `idle_other_ns`: the same part where the op was queued behind its own stream's previous op,
  which ended at g0 (the GPU's own gap between queued ops, HTA's "kernel wait"), where it was
  queued on an idle GPU with no wait call in the trace to explain it (unexplained: no dependency
  is claimed without one), and gaps whose next op has no launch call in the trace.

They add up to idle_ns = span_ns - busy_ns exactly. `bound` per step is what most of the
step's critical path on this rank is made of (the whatif topic's path_bounds digest, joined
here by with_path_bounds: compute ->
gpu, transfers and waits -> communication, host, launch and sync -> host), so that no view
disagrees with `tracelab whatif`; where the rank has no path, `step_bound`: `host` where the
host-caused idle (HOST_CAUSES: idle_host_ns + idle_stall_ns + idle_launch_ns + idle_sync_ns) is at least HOST_BOUND_SHARE of
the step and no less than the communication's (exposed_comm_ns + idle_dependency_ns), else the
largest of gpu (busy_ns - exposed_comm_ns), communication and host, or `unclear` where
idle_other_ns is more than each (the GPU idled on what the trace does not explain);
idle_dependency_ns counts as communication in a step with exposed communication, else as
unexplained (a lone rank's wait on an event is no communication).

What the host was doing (the host frame's CPU ops, ranges and OS calls over the host-caused
gaps) and the launch statistics per rank: reports/idle/host.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

import numpy as np
import pandas as pd

from tracelab.core.note import Note
from tracelab.core.schema import RankData, kind_mask

from ..timeline.steps import shared_step_rows, step_rows
from ..unprofiled import profiler_made_it
from ..timeline.causes import CAUSES, HOST_CAUSES, MIN_LAUNCHED_FOR_GRAPHS, UNCLEAR
from ..timeline.intervals import covered, merge_intervals, run_cummax, timed
from ..timeline.stalls import host_stalls, shared_stalls, stall_union
from .host import LAUNCH_COLUMNS, OP_COLUMNS, TOP_OPS, empty, host_ops, launch_stats, sync_union

# bound_from: "path" where the step's critical path gave its bound (with_path_bounds), "causes" where
# the path is not known (an edge is missing) or was not made, and step_bound's rule on the causes did
STEP_COLUMNS = ["step", "rank", "kernels", "span_ns", "busy_ns", "idle_ns", *CAUSES, "exposed_comm_ns", "bound",
                "bound_from"]
BOUNDS = ("gpu", "communication", "host")
# the event columns the analysis reads (the rest of a million-row frame is not copied)
ROW_COLUMNS = ("rank", "kind", "kernel", "op_class", "step", "stream", "start_ns", "dur_ns", "launch_start_ns",
               "launch_dur_ns")
# per rank, what its dependency idle waited on: the waiting stream, the stream and op that ended the busy
# time before each gap, the wait call that made the stream wait; gaps and idle ns, most first (TOP_OPS kept)
WAIT_COLUMNS = ["rank", "stream", "waited_on_stream", "waited_on_kernel", "wait_call", "gaps", "dependency_ns"]
LAUNCH_LATENCY_NS = 20_000  # a launched op starts this long after its call returns at most (whatif/edges.UNEXPLAINED_NS)
HOST_BOUND_SHARE = 0.10  # host-caused idle from this share of the step makes it host-bound (step_bound)
WHOLE = -1  # the step number of the one window of a trace without steps (NA in the result)
HINT = Note("host_bound_hint")
USER_COLUMNS = ["unprofiled_step_ns", "host_bound_without_profiler"]  # for_the_user's; null where not measured


@dataclass
class Idle:
    """idle() of one or many ranks: per step and rank (STEP_COLUMNS), the host's ops over
    host-caused idle (OP_COLUMNS), launch statistics per rank (LAUNCH_COLUMNS), one-line
    notes on what the data cannot say, and what the dependency idle waited on (WAIT_COLUMNS)."""

    steps: pd.DataFrame
    ops: pd.DataFrame
    launches: pd.DataFrame
    notes: list[Note] = field(default_factory=list)
    waits: pd.DataFrame = field(default_factory=lambda: empty(WAIT_COLUMNS))


class RankIdle:
    """load_many's reduce: one rank's idle() summary, made in the worker that parsed it."""

    def __init__(self, top: int = TOP_OPS):
        self.top = top

    def __call__(self, rank: RankData) -> Idle:
        return rank_idle(rank.events, rank.host, rank.meta.source, self.top, rank)


def rank_idle(events: pd.DataFrame, host: pd.DataFrame | None, source: str | None = None,
              top: int | None = TOP_OPS, shared: RankData | None = None) -> Idle:
    """Idle by cause of one rank's events (module docstring), with its host frame (None: no
    sync calls or CPU ops known; sync idle then counts as host). Each step's bound is its causes'
    (step_bound) until with_path_bounds joins the critical path's. `shared`: the RankData of these
    frames where the caller has it: the step rows (steps.shared_step_rows) other digests of the
    rank make are read from it, not made again."""
    rank = int(events["rank"].iloc[0]) if len(events) else -1  # combine() sets the rank resolved after parsing
    rows = timed(events[[c for c in ROW_COLUMNS if c in events.columns]])  # narrow first: its copies are 1/3 the size
    if not len(rows):
        untimed = source == "proton" or (len(events) and not events["start_ns"].notna().any())
        return Idle(empty(STEP_COLUMNS), empty(OP_COLUMNS), empty(LAUNCH_COLUMNS),
                    [Note("idle_untimed" if untimed else "idle_no_gpu_activity")])
    sync = sync_union(host)
    stalls = stall_union(shared_stalls(shared) if shared is not None else host_stalls(events, host))
    stepless = not rows["step"].notna().any()
    windows = rows.assign(step=pd.array([WHOLE] * len(rows), dtype="Int64")) if stepless else rows
    in_step = windows["step"].notna().to_numpy()
    gaps = step_gaps(windows if in_step.all() else windows[in_step], *sync, stalls, wait_calls(host))
    base = shared_step_rows(shared) if shared is not None and not stepless else step_rows(windows)
    steps = _step_table(base, gaps)
    if stepless:  # one window, the whole trace: its step is NA
        steps = steps.assign(step=pd.array([pd.NA] * len(steps), dtype="Int64"))
    # the host's ops over its host idle: the stalls are their own cause (no traced op ran in them)
    ops = host_ops(gaps, host, rank, top, merge_intervals(np.r_[sync[0], stalls[0]], np.r_[sync[1], stalls[1]]))
    return Idle(steps, ops, launch_stats(rows, rank), _notes(rows, host, stepless), waited_on(gaps, rank, top))


def step_gaps(rows: pd.DataFrame, sync_start: np.ndarray, sync_end: np.ndarray,
              stalls: tuple[np.ndarray, np.ndarray] | None = None,
              waits: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
    """One row per gap in a step's GPU union: rank, step, gap_start_ns, gap_end_ns, the
    launch point a (clipped into the gap) and the ns of each cause (module docstring), the next
    op's stream, the stream and kernel of the op that ended at the gap's start, and the wait call
    that explains a dependency ("" where none does); `stalls`: the rank's host stalls, sorted
    disjoint (none where not given); `waits`: its wait calls (wait_calls; none where not given)."""
    rank, step = rows["rank"].to_numpy(), rows["step"].to_numpy(dtype=np.int64)
    stream = rows["stream"].fillna(-1).to_numpy(dtype=np.int64)
    kernel, kernel_names = _codes(rows["kernel"] if "kernel" in rows.columns else pd.Series([""] * len(rows)))
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    end = start + rows["dur_ns"].to_numpy(dtype=np.int64)
    launch = rows["launch_start_ns"].astype("float64").to_numpy()
    launch_end = (rows["launch_start_ns"] + rows["launch_dur_ns"]).astype("float64").to_numpy()
    order = np.lexsort((launch, start, step, rank))  # stable; a row without a launch last among equals
    rank, step, stream, kernel, start, end, launch, launch_end = (
        a[order] for a in (rank, step, stream, kernel, start, end, launch, launch_end))
    first = np.r_[True, (rank[1:] != rank[:-1]) | (step[1:] != step[:-1])] if len(order) else np.zeros(0, bool)
    in_step = np.cumsum(first)  # the (rank, step) groups are runs of this order
    before = _previous_max(end, in_step)
    stream_at, streams = pd.factorize(stream, sort=True)
    on_stream = in_step * len(streams) + stream_at  # the (rank, step, stream) groups
    own_before = _previous_max(end, on_stream)
    gap = start > before  # NaN (a step's first row): no gap
    stalls = stalls if stalls is not None else (np.empty(0, np.int64), np.empty(0, np.int64))
    waits = waits if waits is not None else (np.empty(0, np.int64), np.empty(0, dtype=object))
    gaps = _causes(rank[gap], step[gap], before[gap], start[gap], launch[gap], launch_end[gap], own_before[gap],
                   (sync_start, sync_end), stalls, _wait_call(launch, on_stream, gap, waits))
    ended = _ended_at(end, first, gap)  # the op that ended the busy time before each gap
    return pd.DataFrame({**gaps, "stream": stream[gap], "waited_on_stream": stream[ended],
                         "waited_on_kernel": kernel_names[kernel[ended]]})  # one frame made, not one per column added


def _codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """A column's category codes and its names (object array, "" last for a missing value, code -1)."""
    column = column if isinstance(column.dtype, pd.CategoricalDtype) else column.astype("category")
    return column.cat.codes.to_numpy(), np.array([str(c) for c in column.cat.categories] + [""], dtype=object)


def wait_calls(host: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray]:
    """The host frame's wait calls (kind `wait`): their starts, sorted, and names."""
    if host is None or not len(host):
        return np.empty(0, np.int64), np.empty(0, dtype=object)
    on = kind_mask(host, ("wait",))
    start = host["start_ns"].to_numpy(dtype=np.int64)[on]
    order = np.argsort(start, kind="stable")
    return start[order], np.asarray(host["name"].array, dtype=object)[on][order]


def _wait_call(launch: np.ndarray, on_stream: np.ndarray, gap: np.ndarray,
               waits: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Per gap, the last wait call that started after the launch of the previous op on the next
    op's stream and no later than the next op's launch ("" where none did, or a launch is unknown)."""
    known = ~np.isnan(launch)
    before_all = int(launch[known].min()) - 1 if known.any() else 0  # an unknown launch: before every call
    previous = _previous_max(np.where(known, launch, before_all).astype(np.int64), on_stream)[gap]
    at = np.searchsorted(waits[0], np.where(known[gap], launch[gap], before_all), side="right") - 1
    found = (at >= 0) & known[gap]
    found[found] = waits[0][at[found]] > np.nan_to_num(previous[found], nan=-np.inf)
    return np.where(found, waits[1][np.maximum(at, 0)] if len(waits[1]) else "", "")


def _ended_at(end: np.ndarray, first: np.ndarray, gap: np.ndarray) -> np.ndarray:
    """Per gap row, the row before it in its (rank, step) run (`first` marks each run's first row)
    that reached the run's largest end so far (the last such, of ties): the op that ended the busy time."""
    running = run_cummax(end, first)
    latest = np.maximum.accumulate(np.where(end == running, np.arange(len(end)), -1))
    return latest[np.flatnonzero(gap) - 1]  # a gap row is never its run's first

def _previous_max(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Each row's largest value of the rows before it in its group (in row order), NaN for a
    group's first (float64)."""
    order = np.argsort(group, kind="stable")
    g = group[order]
    first = np.r_[True, g[1:] != g[:-1]] if len(g) else np.zeros(0, bool)
    running = run_cummax(values[order], first)
    out = np.full(len(values), np.nan)
    later = np.flatnonzero(~first)
    out[order[later]] = running[later - 1]
    return out


def _causes(rank: np.ndarray, step: np.ndarray, before: np.ndarray, start: np.ndarray, launch: np.ndarray,
            launch_end: np.ndarray, own_before: np.ndarray, sync: tuple[np.ndarray, np.ndarray],
            stalls: tuple[np.ndarray, np.ndarray], wait_call: np.ndarray) -> dict[str, np.ndarray]:
    """step_gaps' columns up to wait_call, one array each, a gap a row."""
    g0, g1 = before.astype(np.int64), start
    known = ~np.isnan(launch)
    a = np.clip(np.nan_to_num(launch, nan=0).astype(np.int64), g0, g1)
    queued = known & (launch_end <= g0)
    # a launch still running at g0 holds the op until it returns and LAUNCH_LATENCY_NS more; past that it waited
    held = np.nan_to_num(launch_end, nan=0).astype(np.int64) + LAUNCH_LATENCY_NS
    e = np.where(queued, a, np.clip(held, a, g1))  # where launching ends and waiting begins
    behind_own = queued & (own_before >= g0)  # NaN (first of its stream): False; a launch returning later: not
    waited = known & ~behind_own & (wait_call != "")  # a dependency needs the wait call that makes it one
    return {"rank": rank, "step": step, "gap_start_ns": g0,
            "gap_end_ns": g1, "launch_at_ns": np.where(known, a, g0), "known": known,
            "pre_ns": np.where(known, a - g0, 0), "idle_sync_ns": covered(g0, a, *sync),
            "idle_stall_ns": np.where(known, covered(g0, a, *stalls), 0),
            "idle_launch_ns": np.where(known, e - a, 0),
            "idle_dependency_ns": np.where(waited, g1 - e, 0),
            "idle_other_ns": np.where(known, np.where(waited, 0, g1 - e), g1 - g0),
            "wait_call": np.where(waited, wait_call, "")}


def waited_on(gaps: pd.DataFrame, rank: int, top: int | None = TOP_OPS) -> pd.DataFrame:
    """WAIT_COLUMNS of one rank's gaps (step_gaps): its dependency idle per waiting stream, stream and
    kernel waited on and wait call, the most idle first (then by those keys), the `top` rows."""
    dep = np.flatnonzero(gaps["idle_dependency_ns"].to_numpy() > 0) if len(gaps) else np.zeros(0, np.int64)
    if not len(dep):
        return empty(WAIT_COLUMNS)
    keys = zip(*(gaps[c].to_numpy()[dep].tolist() for c in ("stream", "waited_on_stream", "waited_on_kernel", "wait_call")))
    total: dict[tuple, list[int]] = {}  # a rank's dependency gaps are few: summed in a dict, not a groupby
    for key, ns in zip(keys, gaps["idle_dependency_ns"].to_numpy()[dep].tolist()):
        got = total.setdefault(key, [0, 0])
        got[0], got[1] = got[0] + 1, got[1] + ns
    ranked = sorted(total.items(), key=lambda kv: (-kv[1][1], kv[0]))[:top or None]
    keyed = [(rank, *key, *sums) for key, sums in ranked]
    # built column by column: a frame of tuples, then retyped, costs ~10x more for these few rows
    return pd.DataFrame({c: np.array([row[i] for row in keyed], dtype=object if c in _TEXT else np.int64)
                         for i, c in enumerate(WAIT_COLUMNS)})


_TEXT = ("waited_on_kernel", "wait_call")  # WAIT_COLUMNS of names; the rest are integers

def _step_table(base: pd.DataFrame, gaps: pd.DataFrame) -> pd.DataFrame:
    """step_rows (`base`: span, busy, exposed communication) with the causes summed per step, and bound."""
    if not len(base):
        return empty(STEP_COLUMNS)
    parts = ["pre_ns", "idle_sync_ns", "idle_stall_ns", "idle_launch_ns", "idle_dependency_ns", "idle_other_ns"]
    col = {c: base[c].to_numpy(dtype=np.int64) for c in ("step", "rank", "kernels", "span_ns", "busy_ns",
                                                         "exposed_comm_ns")}
    got = _sums_at(col["step"], col["rank"], gaps, parts)
    part = dict(zip(parts, got.T))
    out = {"step": col["step"], "rank": col["rank"], "kernels": col["kernels"], "span_ns": col["span_ns"],
           "busy_ns": col["busy_ns"], "idle_ns": col["span_ns"] - col["busy_ns"],
           "idle_host_ns": part["pre_ns"] - part["idle_sync_ns"] - part["idle_stall_ns"],
           **{c: part[c] for c in CAUSES[1:]}, "exposed_comm_ns": col["exposed_comm_ns"]}
    return pd.DataFrame({**out, "bound": _bound(out), "bound_from": "causes"}, columns=STEP_COLUMNS)  # in STEP_COLUMNS order


def _bound(col: dict[str, np.ndarray]) -> np.ndarray:
    """step_bound of the int64 columns `col` (the rule lives in step_bound; this is its arithmetic on arrays)."""
    return _step_bound_of({c: col[c].astype(np.float64) for c in ("busy_ns", "exposed_comm_ns", "span_ns", *CAUSES)})


def _sums_at(step: np.ndarray, rank: np.ndarray, gaps: pd.DataFrame, parts: list[str]) -> np.ndarray:
    """[row, part]: the gaps' `parts` summed per (step, rank) of each row (0 where it has none), int64."""
    got = np.zeros((len(step), len(parts)), np.int64)
    if not len(gaps):
        return got
    g_step, g_rank = gaps["step"].to_numpy(dtype=np.int64), gaps["rank"].to_numpy(dtype=np.int64)
    order = np.lexsort((g_rank, g_step))
    g_step, g_rank = g_step[order], g_rank[order]
    at = np.flatnonzero(np.r_[True, (g_step[1:] != g_step[:-1]) | (g_rank[1:] != g_rank[:-1])])
    sums = np.add.reduceat(np.c_[tuple(gaps[c].to_numpy(dtype=np.int64)[order] for c in parts)], at, axis=0)
    row_of = {k: i for i, k in enumerate(zip(g_step[at].tolist(), g_rank[at].tolist()))}
    for i, k in enumerate(zip(step.tolist(), rank.tolist())):
        if k in row_of:
            got[i] = sums[row_of[k]]
    return got


def with_path_bounds(one: Idle, bounds: pd.DataFrame | None) -> Idle:
    """One rank's Idle whose steps take the bound of their critical path where `bounds` (the
    whatif topic's path_bounds digest of the rank: step, path_bound) gives one, so that idle and
    whatif agree, and where the host's idle backs it (host_needs_host_idle); the rest keep their
    causes'. A trace without steps is matched through its one window (step NA, -1 in `bounds`)."""
    if bounds is None or not len(bounds) or not len(one.steps):
        return one
    by_step = dict(zip(bounds["step"].tolist(), bounds["path_bound"].tolist()))
    keys = [int(s) if s == s else -1 for s in one.steps["step"].to_numpy(dtype=np.float64, na_value=np.nan).tolist()]
    path = np.array([k in by_step for k in keys])
    steps = one.steps.assign(bound=np.array([by_step.get(k, b) for k, b in zip(keys, one.steps["bound"].tolist())],
                                            dtype=object),
                             bound_from=np.where(path, "path", one.steps["bound_from"].to_numpy(dtype=object)))
    return replace(one, steps=host_needs_host_idle(steps))


def host_needs_host_idle(steps: pd.DataFrame) -> pd.DataFrame:
    """Step rows whose critical path says host-bound while the GPU waited on the host (host,
    launch and sync idle) for less than HOST_BOUND_SHARE of the step take their idle causes'
    bound instead: a host that runs ahead of a busy GPU is on the path only because it queued the
    work early, and removing all of its time could save no more than that idle."""
    if not len(steps) or "bound_from" not in steps.columns:
        return steps
    host = sum(steps[c].to_numpy(dtype=np.float64) for c in HOST_CAUSES)
    ahead = ((steps["bound"].to_numpy(dtype=object) == "host") & (steps["bound_from"].to_numpy(dtype=object) == "path")
             & (host < HOST_BOUND_SHARE * steps["span_ns"].to_numpy(dtype=np.float64)))
    if not ahead.any():
        return steps
    out = steps.copy()
    out.loc[ahead, "bound"] = step_bound(out[ahead])
    out.loc[ahead, "bound_from"] = "causes"
    return out


def step_bound(steps: pd.DataFrame) -> np.ndarray:
    """Per step row (span_ns, busy_ns, exposed_comm_ns and CAUSES), what bounds it: gpu,
    communication or host (module docstring). The one place the rule lives."""
    return _step_bound_of({c: steps[c].to_numpy(dtype=np.float64) for c in ("busy_ns", "exposed_comm_ns", "span_ns",
                                                                           *CAUSES)})


def _step_bound_of(f: dict[str, np.ndarray]) -> np.ndarray:
    """step_bound of its columns as float64 arrays."""
    talks = f["exposed_comm_ns"] > 0  # a wait on another stream is communication's only beside exposed communication
    dependency = f["idle_dependency_ns"]
    comm = f["exposed_comm_ns"] + np.where(talks, dependency, 0)
    host = sum(f[c] for c in HOST_CAUSES)
    other = f["idle_other_ns"] + np.where(talks, 0, dependency)  # else an event or stream the trace does not explain
    return _bound_of(f["busy_ns"] - f["exposed_comm_ns"], comm, host, f["span_ns"], other)


def _bound_of(gpu: np.ndarray, comm: np.ndarray, host: np.ndarray, span: np.ndarray, other: np.ndarray) -> np.ndarray:
    score = np.c_[gpu, comm, host]
    largest = np.where(other > score.max(axis=1), UNCLEAR, np.array(BOUNDS, dtype=object)[np.argmax(score, axis=1)])
    paced = (host >= HOST_BOUND_SHARE * span) & (host >= comm) & (host > 0)
    return np.where(paced, "host", largest)


def _notes(rows: pd.DataFrame, host: pd.DataFrame | None, stepless: bool) -> list[Note]:
    notes = []
    if stepless:
        ranges = host is not None and bool(len(host)) and bool((host["kind"] == "step").any())
        notes.append(Note("no_steps", {"step_ranges": ranges}))
    if not rows["launch_start_ns"].notna().any():
        notes.append(Note("idle_no_launches"))
    if host is None:
        notes.append(Note("no_host_intervals"))
    return notes


def combine(by_rank: dict[int, Idle], bounds: Mapping[int, pd.DataFrame | None] | None) -> Idle:
    """Ranks' idle summaries (RankIdle) by rank as one Idle, each under its rank (as resolved
    after parsing), their steps bound by their critical paths (`bounds`: each rank's path_bounds
    digest, by rank; None where no path was made), sorted by step and rank; the hint line when
    any step is host-bound."""
    by_rank = {r: with_path_bounds(p, (bounds or {}).get(r)) for r, p in by_rank.items()}
    steps, ops, launches, waits = (_stacked({r: getattr(p, k) for r, p in by_rank.items()})
                                   for k in ("steps", "ops", "launches", "waits"))
    out = Idle(steps.sort_values(["step", "rank"], kind="stable", ignore_index=True)
               if steps is not None else empty(STEP_COLUMNS),
               ops if ops is not None else empty(OP_COLUMNS),
               launches.sort_values("rank", ignore_index=True) if launches is not None else empty(LAUNCH_COLUMNS),
               [n.about(rank=r) for r, p in by_rank.items() for n in p.notes],
               waits.sort_values("rank", kind="stable", ignore_index=True) if waits is not None else empty(WAIT_COLUMNS))
    if graphs_may_help(out.steps, out.launches):
        out.notes.append(HINT)
    return out


def graphs_may_help(steps: pd.DataFrame, launches: pd.DataFrame) -> bool:
    """Whether the CUDA-graph hint fits: some step host-bound, and host-bound without the profiler
    too where the run measured that step (for_the_user), and, on some rank, at least
    MIN_LAUNCHED_FOR_GRAPHS kernels whose launch call the trace holds."""
    launched = launches["launched"] if len(launches) else pd.Series(dtype=float)
    host = steps["bound"] == "host" if len(steps) else pd.Series(dtype=bool)
    if "host_bound_without_profiler" in steps.columns:  # False: the profiler's own host cost made it host-bound
        host &= steps["host_bound_without_profiler"].map(lambda v: v is not False)
    return bool(host.any()) and bool((launched >= MIN_LAUNCHED_FOR_GRAPHS).any())


def for_the_user(one: Idle, unprofiled_step_ns: float | None) -> Idle:
    """`one` with, per step, the run's step without the profiler (`unprofiled_step_ns`, as the
    run measured it: unprofiled.measured_step; None: not measured) and whether a host-bound step is
    host-bound for the user too (host_bound_without_profiler; null where not measured or not
    host-bound), by the rule the CUDA-graph finding applies (unprofiled.profiler_made_it) to what
    the host's gaps could save at most: without the profiler the GPU's work and its other idle
    take what they took under it, so the host's gaps are at most the step left past them. The
    hint and a note follow."""
    steps = one.steps.copy()
    host_ns = sum(steps[c].to_numpy(dtype=np.float64) for c in HOST_CAUSES)
    span_ns = steps["span_ns"].to_numpy(dtype=np.float64)
    bound = steps["bound"].to_numpy(dtype=object) == "host"
    user = np.full(len(steps), None, dtype=object)
    if unprofiled_step_ns:
        saving_ns = np.maximum(0.0, unprofiled_step_ns - (span_ns - host_ns))
        user[bound] = [not profiler_made_it(h / s if s else 0.0, g, unprofiled_step_ns)
                       for h, s, g in zip(host_ns[bound], span_ns[bound], saving_ns[bound])]
    steps["unprofiled_step_ns"] = float(unprofiled_step_ns) if unprofiled_step_ns else None
    steps["host_bound_without_profiler"] = user
    notes = [n for n in one.notes if n != HINT]
    made = np.array([v is False for v in user], dtype=bool)
    if made.any():
        notes.append(Note("host_bound_profiled", {
            "steps": int(made.sum()), "host_steps": int(bound.sum()), "unprofiled_ms": f"{unprofiled_step_ns / 1e6:.2f}",
            "user_pct": f"{100 * np.median(saving_ns[made]) / unprofiled_step_ns:.0f}",
            "profiled_pct": f"{100 * np.median(host_ns[made] / span_ns[made]):.0f}"}))
    out = replace(one, steps=steps, notes=notes)
    return replace(out, notes=out.notes + [HINT]) if graphs_may_help(steps, one.launches) else out


def _stacked(by_rank: dict[int, pd.DataFrame]) -> pd.DataFrame | None:
    """The ranks' non-empty frames as one (a new RangeIndex), each row's `rank` its rank's (int64),
    set once after the concat; None where every frame is empty."""
    kept = [(int(r), f) for r, f in by_rank.items() if len(f)]
    if not kept:
        return None
    out = kept[0][1].reset_index(drop=True) if len(kept) == 1 else pd.concat([f for _, f in kept], ignore_index=True)
    return out.assign(rank=np.repeat(np.array([r for r, _ in kept], dtype=np.int64), [len(f) for _, f in kept]))


def of_input(i) -> Idle:
    """An input's (reports.session.Input) idle digest as combine() gives it, under its rank, its
    steps bound by their critical paths (its path_bounds digest): made once per input, for the
    idle finding and the idle section alike."""
    return i.shared(("idle", i.rank), lambda: combine({i.rank: i.digest("idle")}, {i.rank: i.digest("path_bounds")}))


def idle(events: pd.DataFrame, hosts: dict[int, pd.DataFrame | None] | None = None, top: int | None = TOP_OPS,
         bounds: Mapping[int, pd.DataFrame | None] | None = None) -> Idle:
    """Idle by cause of a frame of any ranks, with each rank's host frame (`hosts`, by rank) and
    its steps' critical-path bounds (`bounds`, by rank: combine's; None: the causes' bounds)."""
    return combine({int(r): rank_idle(g, (hosts or {}).get(int(r)), None, top)
                    for r, g in events.groupby("rank", sort=True)}, bounds)


def idle_columns(step_table: pd.DataFrame, by_rank: dict[int, Idle],
                 bounds: Mapping[int, pd.DataFrame | None] | None, unprofiled_step_ns: float | None = None) -> pd.DataFrame:
    """`tracelab steps`' step rows with idle_ns, CAUSES, bound (RankIdle summaries by rank, bound by
    combine's `bounds`) and USER_COLUMNS (for_the_user of the run's step without the profiler,
    `unprofiled_step_ns`: null where not measured) beside them; NA where a rank has none."""
    one = for_the_user(combine(by_rank, bounds), unprofiled_step_ns)
    idle_steps = one.steps[["step", "rank", "idle_ns", *CAUSES, "bound", *USER_COLUMNS]]
    out = step_table.merge(idle_steps.astype({c: "Int64" for c in ("idle_ns", *CAUSES)}), on=["step", "rank"],
                           how="left")
    return out


def step_columns(rows: pd.DataFrame, ranks: list, unprofiled_step_ns: float | None = None) -> pd.DataFrame:
    """idle_columns from the ranks' (schema.Profile) idle and path_bounds digests and the run's step
    without the profiler where measured: how `tracelab steps` shows each step's idle
    (reports/topics.step_columns)."""
    return idle_columns(rows, {p.rank: p.summary["idle"] for p in ranks}, {p.rank: p.summary["path_bounds"] for p in ranks},
                        unprofiled_step_ns)


def labelled(parts: list[tuple[str, Idle]]) -> Idle:
    """Several inputs' Idle as one, each frame's rows under an `input` column (the path), when
    there are several; one input's as it is."""
    if len(parts) == 1:
        return parts[0][1]
    frames = [[f.assign(input=name)[["input", *f.columns]] for f in (i.steps, i.ops, i.launches, i.waits)]
              for name, i in parts]
    hint = [HINT] if any(HINT in i.notes for _, i in parts) else []
    steps, ops, launches, waits = (pd.concat([f[k] for f in frames], ignore_index=True) for k in range(4))
    return Idle(steps, ops, launches, [n.about(name) for name, i in parts for n in i.notes if n != HINT] + hint, waits)


DIGESTS = {"idle": RankIdle()}  # idle's per-rank digest (reports/topics.py)
