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

from typing import Any, Mapping

import numpy as np
import pandas as pd

from tracelab.core.schema import kind_mask

from ..stats import groups as G
from ..stats.noise import end_spread_ns
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
    arrive = rows["arrival_ns"].to_numpy(dtype=np.int64)
    end = rows["end_ns"].to_numpy(dtype=np.int64)
    if offsets_ns:
        shift = rows["rank"].map(offsets_ns).fillna(0).to_numpy(dtype=np.int64)
        arrive, end = arrive + shift, end + shift
    size = rows["msg_bytes"].fillna(-1)
    m = _matched(rows, size.to_numpy(), arrive)
    at, last_ns = m["rows"], m["last_arrival_ns"]
    size = size.take(at).reset_index(drop=True)
    out = {**m, "process_group": rows["process_group"].array.take(at), "kernel": rows["kernel"].array.take(at),
           "rank": rows["rank"].array.take(at), "msg_bytes": size.where(size >= 0).array, "arrival_ns": arrive[at],
           "end_ns": end[at], "wait_ns": last_ns - arrive[at], "transfer_ns": np.maximum(end[at] - last_ns, 0),
           **{c: rows[c].array.take(at) for c in keep}}
    return pd.DataFrame({c: out[c] for c in [*COLUMNS, *keep]})


def _matched(rows: pd.DataFrame, size: np.ndarray, arrive: np.ndarray) -> dict[str, Any]:
    """The matching itself, over arrays. The i-th row of a (rank, process group, kernel, size)
    in arrival order is its instance i; the rows of one (process group, kernel, size, instance)
    that more than one rank holds are one collective, numbered in order of first arrival (ties:
    by those keys). A row without a process group matches nothing (a missing key groups with
    none). Returns `rows` (positions of the matched rows, by collective then rank; in arrival
    order among equal ones) and the columns match adds, in that order."""
    rank = rows["rank"].to_numpy(dtype=np.int64)
    group = pd.factorize(rows["process_group"].to_numpy(dtype=object), sort=True)[0]
    kernel, kernels = pd.factorize(rows["kernel"].to_numpy(dtype=object), sort=True)
    size = pd.factorize(size, sort=True)[0]
    by_rank = np.lexsort((arrive, rank))  # stable: equal rows keep their order
    instance = np.empty(len(rank), np.int64)
    instance[by_rank] = _cumcount(_dense(rank[by_rank], _dense(group, kernel, size)[by_rank]))
    key = _dense(group, kernel, size, instance)
    held = np.bincount(key)[key]
    kept = np.flatnonzero((held > 1) & (group >= 0))
    kept = kept[np.lexsort((rank[kept], arrive[kept]))]  # arrival order, then rank: the last is the last rank
    c = G.by(key[kept])
    one = np.empty(len(kept), np.int64)  # each kept row's collective (its position in c)
    one[c.order] = c.of
    last_ns = c.max(arrive[kept])
    last_rank = rank[kept][c.order[np.r_[c.starts[1:], len(kept)] - 1]] if len(kept) else rank[:0]
    tied = c.sum((arrive[kept] == last_ns[one]).astype(np.int64)) > 1  # several arrived last together: nobody is
    head = kept[c.order[c.starts]]
    number = _dense(c.min(arrive[kept]), group[head], kernel[head], size[head], instance[head])
    step = _common_step(rows["step"].array.take(kept), one, len(c.keys))
    final = np.lexsort((rank[kept], number[one]))
    at, one = kept[final], one[final]
    types = np.array([collective_type(k) for k in kernels], dtype=object)
    missing = not (group >= 0).all()  # a missing key makes pandas' counts floats
    return {"rows": at, "collective": number[one], "type": types[kernel[at]],
            "instance": instance[at].astype(np.float64) if missing else instance[at],
            "step": step[one],
            "ranks": held[at].astype(np.float64) if missing else held[at], "last_arrival_ns": last_ns[one],
            "last_rank": pd.arrays.IntegerArray(last_rank[one], tied[one])}


def _dense(*columns: np.ndarray) -> np.ndarray:
    """Per row, the position of its (columns...) among the distinct ones, sorted lexicographically."""
    order = np.lexsort(columns[::-1])
    ordered = np.stack([c[order] for c in columns])
    change = np.r_[True, (ordered[:, 1:] != ordered[:, :-1]).any(axis=0)] if len(order) else np.zeros(0, bool)
    out = np.empty(len(order), np.int64)
    out[order] = np.cumsum(change) - 1
    return out


def _cumcount(key: np.ndarray) -> np.ndarray:
    """Per row, how many rows before it have its key (groupby's cumcount)."""
    g = G.by(key)
    out = np.empty(len(key), np.int64)
    out[g.order] = np.arange(len(key)) - g.starts[g.of]
    return out


def _common_step(step: pd.api.extensions.ExtensionArray, one: np.ndarray, n: int) -> pd.arrays.IntegerArray:
    """Per collective (of `n`; `one`: each row's), the step its ranks agree on: their most common,
    the lowest of equally common ones; NA where no rank has one."""
    known = ~np.asarray(pd.isna(step), dtype=bool)
    value = np.asarray(step[known], dtype=np.int64)
    pair = _dense(one[known], value)
    count = np.bincount(pair)
    at = np.unique(pair, return_index=True)[1]
    p_one, p_step, p_count = one[known][at], value[at], count
    best = np.lexsort((p_step, -p_count, p_one))
    first = best[np.r_[True, p_one[best][1:] != p_one[best][:-1]]] if len(best) else best
    out = np.zeros(n, np.int64)
    out[p_one[first]] = p_step[first]
    missing = np.ones(n, bool)
    missing[p_one[first]] = False
    return pd.arrays.IntegerArray(out, missing)


def clock_check(coll: pd.DataFrame) -> dict[str, float]:
    """How well collective ends agree across ranks: median and max end spread (last end -
    first end) and the median transfer, in ns; `agree` when the median spread is under
    half the median transfer (or under 10 us)."""
    if coll.empty:
        return {"collectives": 0, "median_end_spread_ns": np.nan, "max_end_spread_ns": np.nan,
                "median_transfer_ns": np.nan, "agree": True}
    spread = end_spread_ns(coll)
    transfer = float(coll["transfer_ns"].median())
    median_spread = float(np.median(spread))
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
