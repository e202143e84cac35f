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

from ..timeline.collectives import collective_type
from ..timeline.intervals import covered
from ..timeline.intervals import merge_intervals, timed

COLUMNS = ["step", "allreduces", "kernels", "msg_bytes", "comm_ns", "exposed_ns", "tail_ns", "span_ns"]
WHOLE = -1


def gradient_allreduces(rows: pd.DataFrame) -> pd.Series:
    """Which of the timed rows are gradient all-reduces (module docstring): all-reduce kernels of
    a step that has backward kernels, starting at or after its first one."""
    return pd.Series(_gradient_mask(rows), index=rows.index)


def _distinct(column: pd.Series, *tests) -> list[np.ndarray]:
    """Per test, test(names) -> bool array, run on each distinct value of `column` (as str) once, per row."""
    if isinstance(column.dtype, pd.CategoricalDtype):  # each category, and "nan" (code -1) last
        names = pd.Index([str(c) for c in column.cat.categories] + ["nan"], dtype=object)
        codes = column.cat.codes.to_numpy()
    else:
        codes, found = pd.factorize(column, use_na_sentinel=False)
        names = pd.Index(found.astype(str), dtype=object)
    return [np.asarray(test(names), dtype=bool)[codes] for test in tests]


def _steps(rows: pd.DataFrame) -> np.ndarray:
    """Each row's step, WHOLE where it has none (int64)."""
    step = rows["step"].to_numpy(dtype=np.float64, na_value=np.nan)
    return np.where(np.isnan(step), WHOLE, step).astype(np.int64)


def _gradient_mask(rows: pd.DataFrame) -> np.ndarray:
    kernel = (rows["kind"] == "kernel").to_numpy()
    comm = kernel & (rows["op_class"] == "communication").to_numpy()
    by_name, = _distinct(rows["kernel"], lambda k: [collective_type(n) == "allreduce" for n in k])
    scope_allreduce, scope_backward = _distinct(  # the scope's names factorized once for both tests
        rows["scope"], lambda sc: sc.str.lower().str.contains(r"all_?reduce", regex=True),
        lambda sc: sc.str.lower().str.contains("backward", regex=False))
    allreduce = comm & (by_name | scope_allreduce)
    backward = kernel & ~comm & scope_backward
    if not allreduce.any() or not backward.any():
        return np.zeros(len(rows), bool)
    step, start = _steps(rows), rows["start_ns"].to_numpy(dtype=np.int64)
    return allreduce & (start >= _first_per_step(step, start, backward))


def _first_per_step(step: np.ndarray, start: np.ndarray, on: np.ndarray) -> np.ndarray:
    """Per row, the least start of the `on` rows of its step, as float64 (NaN: its step has none)."""
    steps, at = np.unique(step[on], return_inverse=True)
    least = np.full(len(steps), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(least, at.reshape(-1), start[on])
    pos = np.minimum(np.searchsorted(steps, step), max(len(steps) - 1, 0))
    found = (pos < len(steps)) & (steps[pos] == step) if len(steps) else np.zeros(len(step), bool)
    return np.where(found, least[pos].astype(np.float64) if len(steps) else np.nan, np.nan)


def rank_ddp(events: pd.DataFrame) -> pd.DataFrame:
    """One rank's gradient all-reduces per step (COLUMNS); no rows without any. `kernels` their
    kernel names, joined by "|"; msg_bytes NaN where the trace gives no size for one of them;
    span_ns the step's first GPU start to its last end."""
    rows = timed(events)
    grads = _gradient_mask(rows) if len(rows) else np.zeros(0, bool)
    if not grads.any():
        return pd.DataFrame({c: pd.Series(dtype={"msg_bytes": "float64", "kernels": object}.get(c, "int64"))
                             for c in COLUMNS})
    step = _steps(rows)
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    end = start + rows["dur_ns"].to_numpy(dtype=np.int64)
    compute = ((rows["kind"] == "kernel") & (rows["op_class"] != "communication")).to_numpy()
    kernel = rows["kernel"].to_numpy(dtype=object)
    msg = rows["msg_bytes"].to_numpy(dtype=np.float64)
    out = []
    for s in np.unique(step[grads]).tolist():
        at = step == s
        mine = grads & at
        sizes = msg[mine]
        out.append({"step": int(s), "allreduces": int(mine.sum()),
                    "kernels": "|".join(sorted(set(str(k) for k in kernel[mine]))),
                    "msg_bytes": float("nan") if np.isnan(sizes).any() else float(sizes.sum()),
                    **_exposed(start, end, mine, compute & at), "span_ns": int(end[at].max() - start[at].min())})
    return pd.DataFrame(out, columns=COLUMNS)


def _exposed(start: np.ndarray, end: np.ndarray, mine: np.ndarray, compute: np.ndarray) -> dict:
    """The union of the step's gradient all-reduces (`mine`), its part beside no compute kernel
    (the step's: `compute`), and its part after the last compute kernel that started before the
    last all-reduce did (backward's end: the tail no overlap hides)."""
    comm_start, comm_end = merge_intervals(start[mine], end[mine])
    overlap = covered(comm_start, comm_end, *merge_intervals(start[compute], end[compute])).sum()
    comm = int((comm_end - comm_start).sum())
    before = compute & (start < comm_start[-1])  # backward's kernels (the optimizer's start after)
    last_ns = int(end[before].max()) if before.any() else int(comm_start[0])
    tail = covered(comm_start, comm_end, np.array([last_ns]), np.array([np.iinfo(np.int64).max])).sum()
    return {"comm_ns": comm, "exposed_ns": comm - int(overlap), "tail_ns": int(tail)}
