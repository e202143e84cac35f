"""The memory frame (schema.MEMORY_COLUMNS) of an nsys export, for parsers/nsys.py.

`nsys profile --cuda-memory-usage=true` records CUDA_GPU_MEMORY_USAGE_EVENTS: one row per
allocation (memoryOperationType 0) and free (1) CUDA itself made (start, globalPid, deviceId,
address, bytes, memKind; exports differ in the optional columns), including those made before
the capture range began. These are CUDA's allocations: PyTorch's caching allocator's
segments and what the libraries (cuBLAS workspaces, NCCL buffers) allocate, never PyTorch's
tensors. So a row's running sum per process and device is `total_reserved_bytes` (what is
held from CUDA) and `total_allocated_bytes` is NA (unknown to nsys). Only device memory is
kept (memKind DEVICE, ARRAY, DEVICE_STATIC of ENUM_CUDA_MEM_KIND; all rows where the export
has no memKind); pinned host and managed memory are not the GPU's. A free of a block whose
allocation the file does not hold would make the sum negative: the sum is then raised to
start at what those frees imply, and a note says so. Rows take the step range open on any
thread of their process (`step`); op and scope stay "": the table names no thread.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracelab.core import limits, schema
from tracelab.core.errors import TraceFormatError
from tracelab.core.note import Note

from ._steps import assign, compile_pattern, numbers

TABLE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
NEEDS = ("start", "deviceId", "bytes", "memoryOperationType")
OPTIONAL = ("address", "memKind", "globalPid")
DEVICE_KINDS = (2, 3, 5)  # ENUM_CUDA_MEM_KIND: DEVICE, ARRAY, DEVICE_STATIC
ALLOC, FREE = 0, 1


def read(con: sqlite3.Connection, path: Path) -> pd.DataFrame | None:
    """The table's device-memory rows (start, pid, device, addr, bytes signed: + alloc, - free),
    None where the export has no such table (a capture without --cuda-memory-usage)."""
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if TABLE not in tables:
        return None
    have = {r[1] for r in con.execute(f"PRAGMA table_info({TABLE})")}
    if missing := [c for c in NEEDS if c not in have]:
        raise TraceFormatError(path, f"{TABLE}: no column {missing[0]}")
    columns = [*NEEDS, *(c if c in have else f"NULL AS {c}" for c in OPTIONAL)]
    rows = pd.DataFrame.from_records(con.execute(f"SELECT {', '.join(columns)} FROM {TABLE}").fetchall(),
                                     columns=[*NEEDS, *OPTIONAL])
    _check(rows, path)
    rows = rows[rows["memKind"].isna() | rows["memKind"].isin(DEVICE_KINDS)]
    pid = rows["globalPid"].map(lambda g: None if g is None or pd.isna(g) else (int(g) >> 24) & 0xFFFFFF)
    sign = np.where(rows["memoryOperationType"].to_numpy() == ALLOC, 1, -1)
    return pd.DataFrame({"start": rows["start"].astype("int64"), "pid": pid, "device": rows["deviceId"].astype("int64"),
                         "addr": rows["address"], "bytes": rows["bytes"].astype("int64") * sign})


def _check(rows: pd.DataFrame, path: Path) -> None:
    """Every value read: integers in range, the operation 0 or 1, sizes not negative."""
    for column in (*NEEDS, "address", "memKind", "globalPid"):
        values = rows[column]
        optional = column in OPTIONAL
        bad = values.map(lambda v: not (isinstance(v, int) or (optional and v is None)) or isinstance(v, bool))
        if bad.any():
            raise TraceFormatError(path, f"{TABLE}, column {column}: {values[bad].iloc[0]!r} is not an integer")
    if (~rows["memoryOperationType"].isin((ALLOC, FREE))).any():
        raise TraceFormatError(path, f"{TABLE}, column memoryOperationType: values other than 0 (alloc) and 1 (free)")
    if (rows["bytes"] < 0).any() or (rows["bytes"] > limits.INT64[1] // 2).any():
        raise TraceFormatError(path, f"{TABLE}, column bytes: a negative or impossible size")
    device = rows["deviceId"]
    if ((device < limits.INT16[0]) | (device > limits.INT16[1])).any():
        raise TraceFormatError(path, f"{TABLE}, column deviceId: outside {limits.INT16}")


def with_memory(profiles: list[schema.Profile], rows: pd.DataFrame | None, hosts: dict[int, pd.DataFrame],
                step_pattern: str | None) -> list[schema.Profile]:
    """Each profile with its process's memory frame (None where the export has no table);
    `hosts`: _nsys_host.host_frames' raw intervals by pid, whose step ranges give the steps."""
    if rows is None:
        return profiles
    step_re = compile_pattern(step_pattern)
    for p in profiles:
        pid = p.meta.pid
        mine = rows[(rows["pid"] == pid) | rows["pid"].isna()] if len(profiles) > 1 else rows
        p.memory, note = _frame(mine.sort_values("start", kind="stable"), p.meta.trace_start_ns,
                                hosts.get(pid), step_re)
        if note:
            p.meta.notes = [*p.meta.notes, note]
    return profiles


def _frame(rows: pd.DataFrame, origin_ns: int, host: pd.DataFrame | None,
           step_re) -> tuple[pd.DataFrame, Note | None]:
    start = rows["start"].to_numpy(dtype=np.int64)
    held = rows.groupby("device")["bytes"].cumsum().to_numpy(dtype=np.int64)
    lowest = rows.assign(held=held).groupby("device")["held"].min()
    before = (-lowest.clip(upper=0)).to_dict()  # freed but never allocated in the file: held before it
    held = held + rows["device"].map(before).to_numpy(dtype=np.int64)
    note = None
    if any(before.values()):
        note = Note("frees_before_trace", {"table": TABLE, "freed_bytes": int(sum(before.values()))})
    columns: dict[str, Any] = {"time_ns": start - origin_ns, "addr": rows["addr"].astype("Int64"),
                               "bytes": rows["bytes"].to_numpy(dtype=np.int64), "total_reserved_bytes": held,
                               "device": rows["device"].to_numpy(dtype=np.int64), "step": _steps(start, host, step_re)}
    return schema.memory_frame(columns, len(rows)), note


def _steps(start: np.ndarray, host: pd.DataFrame | None, step_re) -> pd.arrays.IntegerArray:
    """Per row, the step range of its process holding its time (NA outside any)."""
    steps = host[host["kind"] == "step"] if host is not None else None
    if steps is None or not len(steps):
        return pd.array([pd.NA] * len(start), dtype="Int64")
    group = np.zeros(len(steps), dtype=np.int64)
    begin, end = steps["start"].to_numpy(dtype=np.int64), steps["end"].to_numpy(dtype=np.int64)
    ranges = {"group": group, "start_ns": begin, "end_ns": end,
              "step": numbers(steps["name"].tolist(), group, begin, end, step_re)}  # one step per occurrence
    return assign(np.zeros(len(start), dtype=np.int64), start, ranges)
