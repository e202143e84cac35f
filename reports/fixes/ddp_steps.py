"""The gradient all-reduce of data-parallel training, exposed after backward: bucket size and
overlap. Pure.

A gradient all-reduce is an all-reduce kernel (its name says AllReduce, or the range that
launched it does: `nccl:all_reduce` over a send/recv kernel) of a step that runs backward
kernels (a compute kernel under a `backward` range; autograd's thread files its kernels under
the main thread's `backward`, see the README), starting at or after the first of them: DDP's
buckets during backward, and a loop or a flat buffer all-reduced after it. (A tensor-parallel
model's backward all-reduces match too.) Per step (the whole trace without steps),
`rank_ddp` gives their number, message bytes, the union of their time and its exposed part
(with no compute kernel beside it); ddp.py takes off the time the rank spent waiting for the last
rank to arrive at them (the who-waits analysis, reports/waits.py), which no bucket size
changes: that is the straggler's finding.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..steps.collectives import collective_type
from ..idle.idle import covered
from ..steps.timeline import merge_intervals, timed

COLUMNS = ["step", "allreduces", "kernels", "msg_bytes", "comm_ns", "exposed_ns", "tail_ns", "span_ns"]
WHOLE = -1


def gradient_allreduces(rows: pd.DataFrame) -> pd.Series:
    """Which of the timed rows are gradient all-reduces (module docstring): all-reduce kernels of
    a step that has backward kernels, starting at or after its first one."""
    scope = rows["scope"].astype(str).str.lower()
    comm = (rows["kind"] == "kernel") & (rows["op_class"] == "communication")
    by_name = rows["kernel"].astype(str).map(collective_type) == "allreduce"
    allreduce = comm & (by_name | scope.str.contains(r"all_?reduce", regex=True))
    backward = (rows["kind"] == "kernel") & ~comm & scope.str.contains("backward", regex=False)
    step = rows["step"].astype("float64").fillna(WHOLE)
    first_ns = rows["start_ns"].where(backward).groupby(step).transform("min")
    return allreduce & (rows["start_ns"] >= first_ns).fillna(False)


def rank_ddp(events: pd.DataFrame) -> pd.DataFrame:
    """One rank's gradient all-reduces per step (COLUMNS); no rows without any. `kernels` their
    kernel names, joined by "|"; msg_bytes NaN where the trace gives no size for one of them;
    span_ns the step's first GPU start to its last end."""
    rows = timed(events)
    grads = gradient_allreduces(rows) if len(rows) else pd.Series(dtype=bool)
    if not len(rows) or not grads.any():
        return pd.DataFrame({c: pd.Series(dtype={"msg_bytes": "float64", "kernels": object}.get(c, "int64"))
                             for c in COLUMNS})
    step = rows["step"].astype("float64").fillna(WHOLE).astype("int64")
    out = []
    for s, g in rows.groupby(step.to_numpy(), sort=True):
        mine = grads.loc[g.index].to_numpy()
        if not mine.any():
            continue
        out.append({"step": int(s), "allreduces": int(mine.sum()),
                    "kernels": "|".join(sorted(set(g.loc[mine, "kernel"].astype(str)))),
                    "msg_bytes": float(g.loc[mine, "msg_bytes"].sum(min_count=len(g.loc[mine]))),
                    **_exposed(g, mine), "span_ns": _span(g)})
    return pd.DataFrame(out, columns=COLUMNS)


def _intervals(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    return merge_intervals(start, start + rows["dur_ns"].to_numpy(dtype=np.int64))


def _exposed(step: pd.DataFrame, mine: np.ndarray) -> dict:
    """The union of the step's gradient all-reduces, its part beside no compute kernel, and its
    part after the last compute kernel that started before the last all-reduce did (backward's
    end: the tail no overlap hides)."""
    comm_start, comm_end = _intervals(step[mine])
    compute = step[(step["kind"] == "kernel") & (step["op_class"] != "communication")]
    overlap = covered(comm_start, comm_end, *_intervals(compute)).sum()
    comm = int((comm_end - comm_start).sum())
    before = compute[compute["start_ns"] < comm_start[-1]]  # backward's kernels (the optimizer's start after)
    last_ns = int((before["start_ns"] + before["dur_ns"]).max()) if len(before) else int(comm_start[0])
    tail = covered(comm_start, comm_end, np.array([last_ns]), np.array([np.iinfo(np.int64).max])).sum()
    return {"comm_ns": comm, "exposed_ns": comm - int(overlap), "tail_ns": int(tail)}


def _span(rows: pd.DataFrame) -> int:
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    return int((start + rows["dur_ns"].to_numpy(dtype=np.int64)).max() - start.min())
