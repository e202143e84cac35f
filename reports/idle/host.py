"""What the host was doing while the GPU idled for it, and how it launched (reports/idle/idle.py's
rank_idle): the host frame's CPU ops, ranges and OS calls over the host-caused gaps (idle_host_ns
intervals: each gap's [g0, launch) less the synchronising calls), each name's intervals united and
ranked by the idle they cover; per rank the kernels' launch statistics from their launch columns.
Pure."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracelab.core.schema import kind_mask

from ..timeline.intervals import covered, merge_intervals, run_cummax

OP_COLUMNS = ["rank", "kind", "name", "covered_ns", "host_idle_ns"]
LAUNCH_COLUMNS = ["rank", "steps", "kernels", "kernels_per_step", "launched", "graph_launches", "delay_median_ns",
                  "delay_p90_ns", "launch_cpu_ns", "launch_cpu_per_step_ns", "short_kernels", "short_kernels_gpu_ns"]
OP_KINDS = ("cpu_op", "range", "osrt")  # host frame kinds that say what the host was doing
TOP_OPS = 50  # names kept per rank, in the worker


def empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64") for c in columns})


def sync_union(host: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray]:
    """The union of the host frame's sync calls: sorted disjoint (starts, ends)."""
    if host is None or not len(host):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    sync = kind_mask(host, ("sync",))
    start = host["start_ns"].to_numpy(dtype=np.int64)[sync]
    return merge_intervals(start, start + host["dur_ns"].to_numpy(dtype=np.int64)[sync])


def host_idle_intervals(gaps: pd.DataFrame, sync_start: np.ndarray, sync_end: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray]:
    """The idle_host_ns intervals, sorted and disjoint: each gap's [g0, launch) less the sync calls."""
    start, end = gaps["gap_start_ns"].to_numpy(dtype=np.int64), gaps["launch_at_ns"].to_numpy(dtype=np.int64)
    keep = end > start
    start, end = start[keep], end[keep]
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    if not len(sync_start) or not len(start):
        return start, end
    bounds = np.unique(np.r_[start, end, sync_start, sync_end])
    lo, hi = bounds[:-1], bounds[1:]
    return lo[_inside(lo, start, end) & ~_inside(lo, sync_start, sync_end)], hi[
        _inside(lo, start, end) & ~_inside(lo, sync_start, sync_end)]


def _inside(t: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Whether each t lies in one of the sorted disjoint intervals [start, end)."""
    i = np.searchsorted(start, t, side="right") - 1
    return (i >= 0) & (t < end[np.maximum(i, 0)])


def _overlaps(start: np.ndarray, end: np.ndarray, u_start: np.ndarray, u_end: np.ndarray) -> np.ndarray:
    """covered(start, end, u_start, u_end) > 0, by one search where the segments are disjoint (of
    sorted disjoint segments of positive length, the last one beginning before `end` overlaps
    [start, end) if any does), else by covered itself."""
    if not len(u_start) or not (u_end > u_start).all() or not (u_start[1:] >= u_end[:-1]).all():
        return covered(start, end, u_start, u_end) > 0
    k = np.searchsorted(u_start, end, side="left") - 1
    return (k >= 0) & (end > start) & (u_end[np.maximum(k, 0)] > start)


def host_ops(gaps: pd.DataFrame, host: pd.DataFrame | None, rank: int, top: int | None = TOP_OPS,
             sync: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
    """Per (kind, name) of the host's CPU ops, ranges and OS calls (OP_KINDS), the ns of
    host-caused idle its intervals cover (a name's own overlapping intervals counted once),
    the `top` names by that (OP_COLUMNS; host_idle_ns: the rank's total, the same on each row)."""
    if host is None or not len(gaps):
        return empty(OP_COLUMNS)
    h_start, h_dur = host["start_ns"].to_numpy(dtype=np.int64), host["dur_ns"].to_numpy(dtype=np.int64)
    u_start, u_end = host_idle_intervals(gaps, *(sync if sync is not None else sync_union(host)))
    # the ops whose own interval covers some host idle: a name's union over the rest adds nothing
    on = np.flatnonzero(kind_mask(host, OP_KINDS))
    on = on[_overlaps(h_start[on], h_start[on] + h_dur[on], u_start, u_end)]
    names, name_of = pd.factorize(np.asarray(host["name"].array, dtype=object)[on], sort=True)  # codes in name order
    kinds = host["kind"].cat.codes.to_numpy(dtype=np.int64)[on]
    order = np.lexsort((h_start[on], names, kinds))  # by kind, name, start
    group = kinds[order] * len(name_of) + names[order]
    first = np.r_[True, group[1:] != group[:-1]] if len(group) else np.zeros(0, dtype=bool)
    start = h_start[on][order]
    end = start + h_dur[on][order]
    reached = run_cummax(end, first)  # a name's own overlaps once
    reached = np.where(first, np.iinfo(np.int64).min, np.r_[np.iinfo(np.int64).min, reached[:-1]])
    ns = covered(np.maximum(start, reached), end, u_start, u_end)
    at = np.flatnonzero(first)
    covered_ns = np.add.reduceat(ns, at) if len(at) else np.zeros(0, dtype=np.int64)
    at = at[covered_ns > 0]
    name_at = names[order][at]  # codes in name order: most covered first, then by name, then as listed
    pick = np.lexsort((name_at, -covered_ns[covered_ns > 0]))[:top]
    at, covered_ns = at[pick], covered_ns[covered_ns > 0][pick]
    return pd.DataFrame({"rank": np.full(len(at), rank, dtype=np.int64),
                         "kind": host["kind"].cat.categories.astype(str).to_numpy()[kinds[order][at]],
                         "name": name_of[names[order][at]].astype(str), "covered_ns": covered_ns,
                         "host_idle_ns": np.full(len(at), int((u_end - u_start).sum()), dtype=np.int64)})


def launch_stats(rows: pd.DataFrame, rank: int) -> pd.DataFrame:
    """One row (LAUNCH_COLUMNS): kernels per step; of the kernels whose launch call is known,
    the launch-to-start delay (median, p90: how far ahead the host ran, a queue-depth proxy),
    the CPU time of their launch calls, and the kernels shorter than their own launch call.
    A launch call that started several kernels (a CUDA-graph replay: every node shares its
    cudaGraphLaunch) counts once, its delay to its first kernel; its kernels are not "shorter
    than their launch", since the one call launched them all (`graph_launches` counts them)."""
    kernel = kind_mask(rows, ("kernel",))
    step = rows["step"].to_numpy(dtype=np.float64, na_value=np.nan)[kernel]
    n_steps = len(np.unique(step[~np.isnan(step)]))
    known = kernel & rows["launch_start_ns"].notna().to_numpy()
    paired = known & rows["launch_dur_ns"].notna().to_numpy()  # a call is its start and its duration
    at = np.flatnonzero(paired)  # the paired kernels' columns as arrays: no frame copied
    calls = launch_calls(*(rows[c].to_numpy(dtype=np.int64, na_value=0)[at]  # exact: no NA among them
                           for c in ("launch_start_ns", "launch_dur_ns", "start_ns")), rows["step"].notna().to_numpy()[at])
    delay = (calls["first_start_ns"] - calls["launch_start_ns"]).astype(np.float64)
    launch_dur = calls["launch_dur_ns"]
    single = calls["kernels"][calls["row"]] == 1  # per known kernel: its call started it alone
    dur = rows["dur_ns"].to_numpy(dtype=np.int64)[paired]
    short = single & (dur < launch_dur[calls["row"]])
    return pd.DataFrame([{
        "rank": rank, "steps": n_steps, "kernels": int(kernel.sum()),
        "kernels_per_step": np.int64((~np.isnan(step)).sum()) / n_steps if n_steps else None,
        "launched": int(known.sum()), "graph_launches": int((calls["kernels"] > 1).sum()),
        "delay_median_ns": float(np.median(delay)) if len(delay) else None,
        "delay_p90_ns": float(np.percentile(delay, 90)) if len(delay) else None,
        "launch_cpu_ns": int(launch_dur.sum()) if known.any() else None,
        "launch_cpu_per_step_ns": (int(launch_dur[calls["in_step"]].sum()) / n_steps
                                   if n_steps and known.any() else None),
        "short_kernels": int(short.sum()), "short_kernels_gpu_ns": int(dur[short].sum())}],
        columns=LAUNCH_COLUMNS)


def launch_calls(ls: np.ndarray, ld: np.ndarray, start: np.ndarray, in_step: np.ndarray) -> dict[str, np.ndarray]:
    """Per launch call (its start `ls` and CPU duration `ld` identify it) of the kernels whose launch
    is known (their `start` and whether each is in a step), in (start, duration) order:
    launch_start_ns, launch_dur_ns, how many kernels it started (`kernels`), the first one's start,
    whether any is in a step; `row`: each kernel's call."""
    order = np.lexsort((ld, ls))
    new = np.r_[True, (ls[order][1:] != ls[order][:-1]) | (ld[order][1:] != ld[order][:-1])] if len(order) else \
        np.zeros(0, bool)
    at = np.flatnonzero(new)
    row = np.empty(len(order), np.int64)
    row[order] = np.cumsum(new) - 1
    start, in_step = start[order], in_step[order]
    empty = not len(at)
    return {"launch_start_ns": ls[order][at], "launch_dur_ns": ld[order][at],
            "kernels": np.diff(np.r_[at, len(order)]), "row": row,
            "first_start_ns": np.zeros(0, np.int64) if empty else np.minimum.reduceat(start, at),
            "in_step": np.zeros(0, bool) if empty else np.logical_or.reduceat(in_step, at)}
