"""Collectives matched across ranks: who arrived when, who waited, how long the transfer
took, and the bandwidth it reached. Pure DataFrame -> DataFrame.

Matching: the i-th communication kernel of one process group, name and message size on
each rank is one collective (NCCL runs a communicator's collectives in one order on every
rank). The process group is the trace's where it says (Kineto's "Process Group Name"),
else "" (nsys, older Kineto): then two groups running the same kernel at the same size
are matched by order alone. No sequence number is read (the kernels' args have none).

Per matched collective and rank: arrival = its kernel's start; wait = last arrival -
own arrival (the kernel spins until the last rank joins); transfer = own end - last
arrival (the data moves once everyone is there). Ends agree across ranks on one clock
(a collective finishes together): `clock_check` measures how well they do, and where
ranks have no common clock, or their ends disagree by more than the transfers last,
`end_offsets` estimates each rank's clock offset from the end times (median over
collectives) and the caller says that it corrected them.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from tracelab.core.schema import kind_mask

from .intervals import timed

# NCCL's bus-bandwidth factor per collective type and rank count n (nccl-tests,
# doc/PERFORMANCE.md): busbw = algbw * factor(n).
BUS_FACTOR = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}
_TYPE_WORDS = [("allreduce", "allreduce"), ("all_reduce", "allreduce"), ("reducescatter", "reducescatter"),
               ("reduce_scatter", "reducescatter"), ("allgather", "allgather"), ("all_gather", "allgather"),
               ("alltoall", "alltoall"), ("all_to_all", "alltoall"), ("broadcast", "broadcast"),
               ("sendrecv", "sendrecv"), ("send", "sendrecv"), ("recv", "sendrecv"), ("reduce", "reduce")]

CPU_COLLECTIVE = r"(?:gloo|mpi|ucc):"  # parsers/chrome.py keeps these ranges in CPU-only traces
COLUMNS = ["collective", "process_group", "kernel", "type", "instance", "step", "rank", "ranks", "msg_bytes",
           "arrival_ns", "end_ns", "last_arrival_ns", "last_rank", "wait_ns", "transfer_ns"]


def collective_type(kernel: str) -> str:
    """allreduce, allgather, reducescatter, alltoall, broadcast, reduce, sendrecv or other,
    from a communication kernel's name (ncclDevKernel_AllReduce_Sum_f32_RING_LL -> allreduce)."""
    low = kernel.lower()
    return next((t for word, t in _TYPE_WORDS if word in low), "other")


def activity(df: pd.DataFrame) -> pd.DataFrame:
    """Rows on a timeline: GPU activity (timeline.timed); in traces with none (a CPU run
    with gloo), the CPU operators and the gloo collectives their worker threads ran."""
    rows = timed(df)
    return rows if len(rows) else df[(df["kind"] == "cpu_op") & df["start_ns"].notna()]


def comm_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The communication kernels (or a CPU run's gloo ranges) of `df` on their own clocks:
    rank, process_group, kernel, msg_bytes, step, arrival_ns, end_ns; one rank's rows are
    what `match` needs of it (reports/waits.rank_digest keeps them per rank)."""
    rows = activity(df)
    on = kind_mask(rows, ("kernel", "cpu_op")) & (rows["op_class"] == "communication").to_numpy()
    idx = np.flatnonzero(on)
    if len(idx) and kind_mask(rows, ("cpu_op",))[idx].all():  # a CPU run: the backend's worker ranges, not
        rows = rows[on]
        rows = rows[rows["name"].str.match(CPU_COLLECTIVE)]  # the calls that only enqueue them (c10d::allreduce_)
        idx = np.arange(len(rows))
    start = rows["start_ns"].to_numpy(dtype=np.int64)[idx]  # the rows read column by column, not the whole frame
    return pd.DataFrame({"rank": rows["rank"].to_numpy()[idx],
                         "process_group": rows["process_group"].to_numpy(dtype=object)[idx],
                         "kernel": rows["kernel"].take(idx).astype(str).to_numpy(),
                         "msg_bytes": rows["msg_bytes"].to_numpy()[idx], "step": rows["step"].array[idx],
                         "arrival_ns": start, "end_ns": start + rows["dur_ns"].to_numpy(dtype=np.int64)[idx]})


def collectives(df: pd.DataFrame, offsets_ns: Mapping[int, int] | None = None) -> pd.DataFrame:
    """One row per matched collective and rank (COLUMNS), collectives numbered in order of
    their first arrival. `offsets_ns` (rank -> ns added to start_ns) puts ranks on one clock.
    Collectives that only one rank ran are left out: nothing to match."""
    return match(comm_rows(df), offsets_ns)


def match(rows: pd.DataFrame, offsets_ns: Mapping[int, int] | None = None, keep: tuple[str, ...] = ()) -> pd.DataFrame:
    """collectives() of the comm_rows of any ranks (each rank's own clock; `offsets_ns` puts
    them on one). `keep`: more columns of `rows` carried through to the result."""
    if rows.empty:
        return pd.DataFrame(columns=[*COLUMNS, *keep])
    if offsets_ns:
        shift = rows["rank"].map(offsets_ns).fillna(0).to_numpy(dtype=np.int64)
        rows = rows.assign(arrival_ns=rows["arrival_ns"].to_numpy(dtype=np.int64) + shift,
                           end_ns=rows["end_ns"].to_numpy(dtype=np.int64) + shift)
    size = rows["msg_bytes"].fillna(-1)
    rows = rows.assign(size=size).sort_values(["rank", "arrival_ns"], kind="stable")
    rows["instance"] = rows.groupby(["rank", "process_group", "kernel", "size"]).cumcount()
    keys = ["process_group", "kernel", "size", "instance"]
    g = rows.groupby(keys, sort=False)
    rows["ranks"] = g["rank"].transform("size")
    rows = rows[rows["ranks"] > 1].copy()
    rows = rows.sort_values(["arrival_ns", "rank"], kind="stable")
    g = rows.groupby(keys, sort=False)
    rows["last_arrival_ns"] = g["arrival_ns"].transform("max")
    rows["last_rank"] = g["rank"].transform("last").astype("Int64")  # rows in arrival order
    tied = (rows["arrival_ns"] == rows["last_arrival_ns"]).groupby([rows[k] for k in keys]).transform("sum") > 1
    rows.loc[tied, "last_rank"] = pd.NA  # several ranks arrived last together: nobody is the last
    rows["wait_ns"] = rows["last_arrival_ns"] - rows["arrival_ns"]
    rows["transfer_ns"] = (rows["end_ns"] - rows["last_arrival_ns"]).clip(lower=0)
    first = g["arrival_ns"].transform("min")
    # one id per collective, in order of first arrival; collectives whose first arrivals tie (Kineto's
    # microsecond clock) stay apart, ordered by their keys
    rows["collective"] = rows.assign(first_ns=first).groupby(["first_ns", *keys], sort=True, dropna=False).ngroup()
    rows["type"] = rows["kernel"].map(collective_type)
    rows["step"] = _common_step(rows, keys)
    rows["msg_bytes"] = rows["size"].where(rows["size"] >= 0)
    out = rows.sort_values(["collective", "rank"], kind="stable")[[*COLUMNS, *keep]]
    return out.reset_index(drop=True)


def _common_step(rows: pd.DataFrame, keys: list[str]) -> pd.Series:
    """The step of a collective: the step its ranks agree on (their most common), NA if none has one."""
    counts = rows.dropna(subset=["step"]).groupby([*keys, "step"]).size().rename("n").reset_index()
    mode = counts.sort_values(["n", "step"], ascending=[False, True]).drop_duplicates(keys).set_index(keys)["step"]
    index = pd.MultiIndex.from_frame(rows[keys])
    return pd.Series(mode.reindex(index).to_numpy(), index=rows.index, dtype="Int64")


def clock_check(coll: pd.DataFrame) -> dict[str, float]:
    """How well collective ends agree across ranks: median and max end spread (last end -
    first end) and the median transfer, in ns; `agree` when the median spread is under
    half the median transfer (or under 10 us)."""
    if coll.empty:
        return {"collectives": 0, "median_end_spread_ns": np.nan, "max_end_spread_ns": np.nan,
                "median_transfer_ns": np.nan, "agree": True}
    ends = coll.groupby("collective")["end_ns"]
    spread = ends.max() - ends.min()
    transfer = float(coll["transfer_ns"].median())
    median_spread = float(spread.median())
    return {"collectives": int(len(spread)), "median_end_spread_ns": median_spread,
            "max_end_spread_ns": float(spread.max()), "median_transfer_ns": transfer,
            "agree": bool(median_spread <= max(transfer / 2, 10_000))}


def end_offsets(coll: pd.DataFrame) -> dict[int, int]:
    """rank -> ns to add to its times so that collective ends agree with the lowest rank's:
    the median over collectives of (reference end - own end)."""
    wide = coll.pivot_table(index="collective", columns="rank", values="end_ns", aggfunc="first")
    ref = wide.columns.min()
    return {int(r): int(round(float((wide[ref] - wide[r]).median()))) for r in wide.columns}


def bandwidth(coll: pd.DataFrame) -> pd.DataFrame:
    """Per collective and rank with a message size: algbw = bytes / transfer time and busbw
    = algbw x NCCL's factor for its type and rank count, in GB/s (1e9 bytes/s); NaN
    where the size or the transfer time is unknown or zero."""
    out = coll.copy()
    seconds = out["transfer_ns"].where(out["transfer_ns"] > 0) / 1e9
    out["algbw_gb_s"] = out["msg_bytes"] / seconds / 1e9
    factor = [BUS_FACTOR.get(t, lambda n: np.nan)(n) for t, n in zip(out["type"], out["ranks"])]
    out["busbw_gb_s"] = out["algbw_gb_s"] * np.array(factor, dtype=np.float64)
    return out


def bandwidth_by_size(coll: pd.DataFrame) -> pd.DataFrame:
    """Per collective type and message size: calls, median transfer (ns), median algbw and busbw (GB/s)."""
    bw = bandwidth(coll).dropna(subset=["msg_bytes"])
    cols = ["type", "msg_bytes", "calls", "transfer_ns", "algbw_gb_s", "busbw_gb_s"]
    if bw.empty:
        return pd.DataFrame(columns=cols)
    out = bw.groupby(["type", "msg_bytes"]).agg(calls=("collective", "nunique"), transfer_ns=("transfer_ns", "median"),
                                                algbw_gb_s=("algbw_gb_s", "median"), busbw_gb_s=("busbw_gb_s", "median"))
    return out.reset_index()[cols]
