"""Timeline analyses for timed sources (torch, nsys): busy and idle GPU time,
communication overlapped with compute or exposed, and collective skew across ranks.

Every function takes the events frame of tracelab.schema and returns a frame.
Rows without a start time (proton aggregates) are left out: they have no timeline.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

GPU_KINDS = ("kernel", "memcpy", "memset")


def timed(df: pd.DataFrame) -> pd.DataFrame:
    """GPU activity rows that carry a start time."""
    return df[df["kind"].isin(GPU_KINDS) & df["start_ns"].notna()]


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


def _union_ns(rows: pd.DataFrame) -> int:
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    seg_start, seg_end = merge_intervals(start, start + rows["dur_ns"].to_numpy(dtype=np.int64))
    return int((seg_end - seg_start).sum())


def _span_ns(rows: pd.DataFrame) -> int:
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    return int((start + rows["dur_ns"].to_numpy(dtype=np.int64)).max() - start.min())


def busy_ns(df: pd.DataFrame) -> pd.Series:
    """GPU busy time per rank (Series indexed by rank): the union of GPU activity
    intervals over all streams and devices. Summing durations would count
    concurrent streams twice; the union does not. Ranks with no timed rows
    (proton) are absent.
    """
    rows = timed(df)
    busy = {int(rank): _union_ns(g) for rank, g in rows.groupby("rank", sort=True)}
    return pd.Series(busy, dtype="int64", name="busy_ns").rename_axis("rank")


def idle(df: pd.DataFrame) -> pd.DataFrame:
    """Per rank: busy_ns, span_ns (first start to last end), idle_ns = span - busy,
    idle_share = idle / span."""
    rows = timed(df)
    out = busy_ns(df).to_frame()
    out["span_ns"] = pd.Series({int(r): _span_ns(g) for r, g in rows.groupby("rank", sort=True)}, dtype="int64")
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
    rows = rows[rows["kind"] == "kernel"]
    out = []
    for rank, g in rows.groupby("rank", sort=True):
        is_comm = (g["op_class"] == "communication").to_numpy()
        comm, compute, both = _union_ns(g[is_comm]), _union_ns(g[~is_comm]), _union_ns(g)
        out.append({"rank": int(rank), "comm_ns": comm, "compute_ns": compute,
                    "overlap_ns": comm + compute - both})
    out = pd.DataFrame(out, columns=["rank", "comm_ns", "compute_ns", "overlap_ns"]).astype("int64")
    out["exposed_ns"] = out["comm_ns"] - out["overlap_ns"]
    out["exposed_share"] = (out["exposed_ns"] / out["comm_ns"].where(out["comm_ns"] > 0)).astype("float64")
    return out.astype({"rank": "int32"})
