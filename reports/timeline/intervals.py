"""Timeline analyses for timed sources (torch, nsys): busy and idle GPU time,
communication overlapped with compute or exposed, and collective skew across ranks.

Every function takes the events frame of tracelab.core.schema and returns a frame.
Rows without a start time (proton aggregates) are left out: they have no timeline.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from tracelab.core.schema import kind_mask, str_array

GPU_KINDS = ("kernel", "memcpy", "memset")


def timed(df: pd.DataFrame) -> pd.DataFrame:
    """GPU activity rows that carry a start time: `df` itself where every row does (most traces;
    a filtered copy of a rank's whole frame cost ~5 ms, and each rank's digests ask ~10 times).
    Callers read it and never write to it."""
    keep = kind_mask(df, GPU_KINDS) & df["start_ns"].notna().to_numpy()
    return df if keep.all() else df[keep]


def merge_intervals(start_ns: np.ndarray, end_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals [start, end) as sorted, disjoint segments (starts, ends)."""
    if len(start_ns) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(start_ns, kind="stable")
    starts, ends = start_ns[order], end_ns[order]
    run_end = np.maximum.accumulate(ends)
    opens = np.ones(len(starts), dtype=bool)
    opens[1:] = starts[1:] > run_end[:-1]
    first = np.flatnonzero(opens)
    last = np.r_[first[1:] - 1, len(starts) - 1]
    return starts[first], run_end[last]


def run_cummax(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The running maximum of int64 `values` within each run of consecutive rows (`first`: True
    at a run's first row), exact: one numpy accumulate, each run lifted above the ones before it
    (pandas' groupby cummax where the values' range times the runs would not fit in int64)."""
    if not len(values):
        return values.astype(np.int64)
    run = np.cumsum(first) - 1
    low, width = int(values.min()), int(values.max()) - int(values.min()) + 1
    if width * (int(run[-1]) + 1) >= 1 << 62:
        return pd.Series(values).groupby(run, sort=False).cummax().to_numpy(dtype=np.int64)
    lift = run * width
    return np.maximum.accumulate(values - low + lift) - lift + low


def covered(start: np.ndarray, end: np.ndarray, u_start: np.ndarray, u_end: np.ndarray) -> np.ndarray:
    """Per interval [start, end), the ns of it inside the sorted disjoint union (u_start, u_end)."""
    if not len(u_start):
        return np.zeros(len(start), dtype=np.int64)
    before = np.r_[0, np.cumsum(u_end - u_start)]  # ns of the union before each segment

    def upto(t: np.ndarray) -> np.ndarray:  # ns of the union before t
        i = np.searchsorted(u_start, t, side="right") - 1
        inside = np.clip(t - u_start[np.maximum(i, 0)], 0, (u_end - u_start)[np.maximum(i, 0)])
        return np.where(i >= 0, before[np.maximum(i, 0)] + inside, 0)

    return np.maximum(upto(end) - upto(np.minimum(start, end)), 0)


def union_ns(rows: pd.DataFrame) -> int:
    """ns covered by the rows' intervals (start_ns, dur_ns), overlaps counted once."""
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    seg_start, seg_end = merge_intervals(start, start + rows["dur_ns"].to_numpy(dtype=np.int64))
    return int((seg_end - seg_start).sum())


def span_ns(rows: pd.DataFrame) -> int:
    """The rows' first start to their last end (ns)."""
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    return int((start + rows["dur_ns"].to_numpy(dtype=np.int64)).max() - start.min())


def _by_rank(rows: pd.DataFrame) -> list[tuple[int, np.ndarray]]:
    """(rank, its rows' mask) per rank of `rows`, in rank order."""
    rank = rows["rank"].to_numpy()
    return [(int(r), rank == r) for r in np.unique(rank)]


def _union(start: np.ndarray, end: np.ndarray) -> int:
    seg_start, seg_end = merge_intervals(start, end)
    return int((seg_end - seg_start).sum())


def _times(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    return start, start + rows["dur_ns"].to_numpy(dtype=np.int64)


def busy_ns(df: pd.DataFrame) -> pd.Series:
    """GPU busy time per rank (Series indexed by rank): the union of GPU activity
    intervals over all streams and devices. Summing durations would count
    concurrent streams twice; the union does not. Ranks with no timed rows
    (proton) are absent.
    """
    rows = timed(df)
    start, end = _times(rows)
    busy = {r: _union(start[on], end[on]) for r, on in _by_rank(rows)}
    return pd.Series(busy, dtype="int64", name="busy_ns").rename_axis("rank")


def idle(df: pd.DataFrame) -> pd.DataFrame:
    """Per rank: busy_ns, span_ns (first start to last end), idle_ns = span - busy,
    idle_share = idle / span."""
    rows = timed(df)
    start, end = _times(rows)
    out = busy_ns(rows).to_frame()
    out["span_ns"] = pd.Series({r: int(end[on].max() - start[on].min()) for r, on in _by_rank(rows)}, dtype="int64")
    out["idle_ns"] = out["span_ns"] - out["busy_ns"]
    out["idle_share"] = (out["idle_ns"] / out["span_ns"].where(out["span_ns"] > 0)).astype("float64")
    return out.reset_index().astype({"rank": "int32"})


def overlap_ns(df: pd.DataFrame) -> pd.DataFrame:
    """Per rank: comm_ns (union of communication kernels), compute_ns (union of the other
    kernels), overlap_ns (communication running while compute runs), exposed_ns
    (communication with no compute beside it), exposed_share = exposed / comm.

    |comm ∩ compute| = |comm| + |compute| - |comm ∪ compute|, all unions.
    """
    rows = timed(df)
    rows = rows[(rows["kind"] == "kernel").to_numpy()]
    start, end = _times(rows)
    comm_rows = (rows["op_class"] == "communication").to_numpy()
    out = []
    for rank, on in _by_rank(rows):
        is_comm, is_compute = on & comm_rows, on & ~comm_rows
        comm, compute = _union(start[is_comm], end[is_comm]), _union(start[is_compute], end[is_compute])
        out.append({"rank": rank, "comm_ns": comm, "compute_ns": compute,
                    "overlap_ns": comm + compute - _union(start[on], end[on])})
    out = pd.DataFrame(out, columns=["rank", "comm_ns", "compute_ns", "overlap_ns"]).astype("int64")
    out["exposed_ns"] = out["comm_ns"] - out["overlap_ns"]
    out["exposed_share"] = (out["exposed_ns"] / out["comm_ns"].where(out["comm_ns"] > 0)).astype("float64")
    return out.astype({"rank": "int32"})


def clock_offsets(metas: list[dict]) -> dict[int, int] | None:
    """rank -> ns to add to start_ns to put every rank on one clock (the traces' epoch
    starts, less the earliest); None unless every rank's trace says its epoch start."""
    epochs = {int(m["rank"]): m.get("trace_start_epoch_ns") for m in metas}
    if not epochs or any(e is None for e in epochs.values()):
        return None
    first = min(int(e) for e in epochs.values())
    return {rank: int(e) - first for rank, e in epochs.items()}


def _on_one_clock(rows: pd.DataFrame, offsets_ns: Mapping[int, int] | None) -> np.ndarray:
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    if offsets_ns is None:
        return start
    return start + rows["rank"].map(offsets_ns).fillna(0).to_numpy(dtype=np.int64)


def comm_kernels(df: pd.DataFrame) -> pd.DataFrame:
    """The timed communication kernels, with the columns collective_skew reads: a few hundred
    rows of a rank's thousands, so many ranks' skew never needs their whole frames."""
    on = kind_mask(df, ("kernel",)) & (df["op_class"] == "communication").to_numpy() & df["start_ns"].notna().to_numpy()
    return df[["rank", "kind", "op_class", "kernel", "start_ns"]][on]  # the columns kept, then the rows


def collective_skew(df: pd.DataFrame, offsets_ns: Mapping[int, int] | None = None) -> pd.DataFrame:
    """One row per collective: the i-th launch of each communication kernel on every rank,
    aligned. Columns: kernel, instance, ranks, first_rank, last_rank (the last to arrive),
    first_start_ns, skew_ns (last start - first start).

    Starts are per-trace relative; `offsets_ns` (clock_offsets) puts ranks on one clock.
    Without it the skew assumes the traces started together.
    """
    rows = comm_kernels(df)
    cols = ["kernel", "instance", "ranks", "first_rank", "last_rank", "first_start_ns", "skew_ns"]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    rows = pd.DataFrame({"rank": rows["rank"].to_numpy(), "kernel": rows["kernel"].astype(str).to_numpy(),
                         "start_ns": _on_one_clock(rows, offsets_ns)})
    rows = rows.sort_values(["rank", "start_ns"], kind="stable")
    rows["instance"] = rows.groupby(["rank", "kernel"]).cumcount()
    rows = rows.sort_values(["kernel", "instance", "start_ns", "rank"], kind="stable")
    groups = rows.groupby(["kernel", "instance"], sort=False)
    out = groups.agg(ranks=("rank", "size"), first_rank=("rank", "first"), last_rank=("rank", "last"),
                     first_start_ns=("start_ns", "first"), last_start_ns=("start_ns", "last")).reset_index()
    out["skew_ns"] = out.pop("last_start_ns") - out["first_start_ns"]
    return out[cols].sort_values(["first_start_ns", "kernel"], kind="stable").reset_index(drop=True)


def skew_summary(skew: pd.DataFrame) -> pd.DataFrame:
    """Per collective kernel: instances, mean and max start skew, and the rank most often last."""
    cols = ["kernel", "instances", "mean_skew_ns", "max_skew_ns", "last_rank", "last_share"]
    skew = skew[skew["ranks"] > 1]
    if skew.empty:
        return pd.DataFrame(columns=cols)
    groups = skew.groupby("kernel", sort=False)
    out = groups.agg(instances=("instance", "size"), mean_skew_ns=("skew_ns", "mean"),
                     max_skew_ns=("skew_ns", "max")).reset_index()
    last = groups["last_rank"].agg(lambda s: s.value_counts().idxmax())
    out["last_rank"] = out["kernel"].map(last)
    out["last_share"] = [(g["last_rank"] == last[k]).mean() for k, g in groups]
    return out[cols].sort_values("max_skew_ns", ascending=False, kind="stable").reset_index(drop=True)


def activity_bins(df: pd.DataFrame, n_bins: int = 400,
                  offsets_ns: Mapping[int, int] | None = None) -> pd.DataFrame:
    """Downsampled timeline: per rank, op_class and time bin, the busy ns of that class
    in the bin (union of its intervals, clipped exactly to the bin). Bins are shared by
    all ranks. Columns: rank, op_class, bin_start_ns, bin_ns, busy_ns."""
    rows = timed(df)
    cols = ["rank", "op_class", "bin_start_ns", "bin_ns", "busy_ns"]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    start = _on_one_clock(rows, offsets_ns)
    end = start + rows["dur_ns"].to_numpy(dtype=np.int64)
    edges = np.linspace(start.min(), max(end.max(), start.min() + n_bins), n_bins + 1).round().astype(np.int64)
    parts = [rank_bins(g, edges - (offsets_ns or {}).get(rank, 0)).assign(rank=rank)
             for rank, g in rows.groupby("rank", sort=True)]
    return on_edges(pd.concat(parts, ignore_index=True), edges)[cols]


def rank_bins(df: pd.DataFrame, edges_ns: np.ndarray) -> pd.DataFrame:
    """One rank's part of activity_bins, on bin edges given on its own clock: per op_class
    (sorted) and bin, the busy ns. Columns: op_class, bin, busy_ns."""
    return segment_bins(rank_segments(df), edges_ns)


def rank_segments(df: pd.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per op_class (sorted), the union of one rank's timed rows as sorted disjoint segments
    (starts, ends; its own clock): all segment_bins needs to bin the rank on any edges, so the
    report bins a rank shown in its timeline from this digest, never reading it again."""
    rows = timed(df)
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    end = start + rows["dur_ns"].to_numpy(dtype=np.int64)
    classes = pd.Series(str_array(rows["op_class"]))
    return {op_class: merge_intervals(start[idx], end[idx])
            for op_class, idx in classes.groupby(classes, sort=True).indices.items()}


def segment_bins(segments: dict[str, tuple[np.ndarray, np.ndarray]], edges_ns: np.ndarray) -> pd.DataFrame:
    """rank_bins from a rank's rank_segments: per op_class and bin, the busy ns (exact)."""
    parts = [pd.DataFrame({"op_class": op_class, "bin": np.arange(len(edges_ns) - 1),
                           "busy_ns": np.diff(busy_before(*spans, edges_ns))})
             for op_class, spans in segments.items()]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["op_class", "bin", "busy_ns"])


def on_edges(bins: pd.DataFrame, edges_ns: np.ndarray) -> pd.DataFrame:
    """rank_bins' rows with each bin's start (on the shared clock of `edges_ns`) and width."""
    at = bins["bin"].to_numpy(dtype=np.int64)
    return bins.assign(bin_start_ns=edges_ns[:-1][at], bin_ns=np.diff(edges_ns)[at])


def busy_before(seg_start: np.ndarray, seg_end: np.ndarray, at_ns: np.ndarray) -> np.ndarray:
    """Busy ns before each time in at_ns, for sorted disjoint segments (none: 0 everywhere)."""
    if len(seg_start) == 0:
        return np.zeros(len(at_ns), dtype=np.int64)
    before = np.r_[0, np.cumsum(seg_end - seg_start)]
    k = np.searchsorted(seg_start, at_ns, side="right")  # segments starting at or before t
    last = np.maximum(k - 1, 0)
    partial = np.clip(at_ns - seg_start[last], 0, (seg_end - seg_start)[last])
    return np.where(k > 0, before[last] + partial, 0)


TIMELINE_COLUMNS = ["rank", "kind", "op_class", "start_ns", "dur_ns"]  # what idle() and overlap_ns() read


def rank_timeline(df: pd.DataFrame) -> pd.DataFrame:
    """idle() and overlap_ns() side by side, one row per timed rank. Their filters copy only
    the columns they read (a rank's whole frame, names and scopes too, was copied 4 times)."""
    keep = kind_mask(df, GPU_KINDS) & df["start_ns"].notna().to_numpy()  # timed()'s rows
    rows = df if keep.all() else df[TIMELINE_COLUMNS][keep]  # most ranks: every row, read in place
    kernel = kind_mask(rows, ("kernel",))
    ranks = _by_rank(rows)
    if not ranks or not all(kernel[on].any() for _, on in ranks):  # a rank of copies only: NaN beside it
        df = df[TIMELINE_COLUMNS]
        return idle(df).merge(overlap_ns(df), on="rank", how="left")
    start, end = _times(rows)
    comm = kernel & (rows["op_class"] == "communication").to_numpy()
    cols: dict[str, list[int]] = {c: [] for c in ("rank", "busy_ns", "span_ns", "comm_ns", "compute_ns", "overlap_ns")}
    for rank, on in ranks:  # what idle() and overlap_ns() give, one pass
        k, c, w = on & kernel, on & comm, on & kernel & ~comm
        comm_ns, compute_ns = _union(start[c], end[c]), _union(start[w], end[w])
        for name, v in (("rank", rank), ("busy_ns", _union(start[on], end[on])),
                        ("span_ns", int(end[on].max() - start[on].min())), ("comm_ns", comm_ns),
                        ("compute_ns", compute_ns), ("overlap_ns", comm_ns + compute_ns - _union(start[k], end[k]))):
            cols[name].append(v)
    v = {c: np.array(x, dtype=np.int64) for c, x in cols.items()}
    idle_ns, exposed_ns = v["span_ns"] - v["busy_ns"], v["comm_ns"] - v["overlap_ns"]
    return pd.DataFrame({"rank": v["rank"].astype(np.int32), "busy_ns": v["busy_ns"], "span_ns": v["span_ns"],
                         "idle_ns": idle_ns, "idle_share": idle_ns / np.where(v["span_ns"] > 0, v["span_ns"], np.nan),
                         "comm_ns": v["comm_ns"], "compute_ns": v["compute_ns"], "overlap_ns": v["overlap_ns"],
                         "exposed_ns": exposed_ns,
                         "exposed_share": exposed_ns / np.where(v["comm_ns"] > 0, v["comm_ns"], np.nan)})
