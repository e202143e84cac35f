"""The memory frame (schema.MEMORY_COLUMNS) of a Kineto trace, for parsers/chrome.py.

torch.profiler(profile_memory=True) writes one `[memory]` instant event (cat
`cpu_instant_event`) per allocation and free of its allocators: args Addr, Bytes (negative
for a free), Total Allocated and Total Reserved (the device's totals after the event), Device
Id and Device Type (c10::DeviceType: 0 CPU, 1 CUDA). The CPU allocator reports 0 reserved: it
caches nothing, so a CPU row's reserved total is NA, not 0. Each event is placed like a
kernel's launch call: the outermost CPU operator open on its thread at its time (`op`), the
record_function ranges open then (`scope`, other threads nested in the main thread's, as for
the kernels) and the step range around it on any thread of its process (`step`). Kineto names
no module; `module` stays "".
"""
from __future__ import annotations

from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracelab.core import limits, schema
from tracelab.core.errors import TraceFormatError
from tracelab.core.note import Note

from ._kineto import cpu_top_level, thread_scopes
from ._kineto_columns import MISSING, _MemArgs
from ._steps import assign

MEMORY_EVENT = "[memory]"
CPU_DEVICE_TYPE = 0
_NO_ARGS = _MemArgs()


def is_memory(names: list[str]) -> np.ndarray:
    """Mask of the instant events that are allocator events."""
    return np.array([n == MEMORY_EVENT for n in names], dtype=bool)


def frame(path: Path, instants: Any, mask: np.ndarray, at: dict[str, np.ndarray], origin_ns: int,
          ops: dict[str, Any], ranges: dict[str, Any], steps: dict[str, np.ndarray]):
    """The memory frame of the `mask`ed instants (a _kineto_json.Instants), placed at `at`
    (pid, tid, ts_ns) among the CPU operators `ops` (pid, tid, start_ns, dur_ns, name), the
    annotation `ranges` (_kineto.scopes' dict) and the `steps` (_steps.assign's dict)."""
    args = instants.args if mask.all() else [a for a, m in zip(instants.args, mask.tolist()) if m]
    columns = _args(path, args, at["ts_ns"], origin_ns)
    columns["tid"] = at["tid"]
    columns["op"] = outermost_ops(at["pid"], at["tid"], at["ts_ns"], ops)
    columns["scope"] = thread_scopes(at["pid"], at["tid"], at["ts_ns"], ranges) if len(ranges["name"]) else ""
    columns["step"] = assign(at["pid"], at["ts_ns"], steps)
    out = schema.memory_frame(columns, len(args))
    out.attrs[SUMMED] = bool(any(a.allocated == MISSING for a in args))
    return out


def _args(path: Path, args: list, ts_ns: np.ndarray, origin_ns: int) -> dict[str, Any]:
    """The memory columns from the events' args, each checked (a TraceFormatError names the
    first bad event by its time)."""
    args = [_NO_ARGS if a is None else a for a in args]
    addr, nbytes, allocated, reserved, device_id, device_type = (
        np.fromiter(map(attrgetter(f), args), dtype=np.int64, count=len(args)) for f in _FIELDS)
    _check(path, ts_ns, nbytes, allocated, reserved, device_id)
    cpu = device_type == CPU_DEVICE_TYPE
    device = np.where(cpu, -1, np.where(device_id == MISSING, 0, device_id))
    allocated = _running_totals(allocated, nbytes, device, ts_ns)
    return {"time_ns": ts_ns - origin_ns, "addr": _nullable(addr), "bytes": nbytes,
            "total_allocated_bytes": _nullable(allocated),
            "total_reserved_bytes": _nullable(np.where(cpu, MISSING, reserved)),  # the CPU allocator caches nothing
            "device": device}


def running_sum_note(memory) -> Note | None:
    """What a reader must know of a frame whose totals were summed from the events (_running_totals)."""
    if memory is None or not memory.attrs.get(SUMMED):
        return None
    return Note("memory_summed")


SUMMED = "allocated_summed_from_bytes"  # the frame's attrs key: its totals are _running_totals'


def _running_totals(allocated: np.ndarray, nbytes: np.ndarray, device: np.ndarray, ts_ns: np.ndarray) -> np.ndarray:
    """Total Allocated as recorded; where a device's events give none (the releases before the
    totals were written), the running sum of that device's Bytes in time order, from 0 at the
    trace's start."""
    out = allocated.copy()
    for d in np.unique(device).tolist():
        mine = np.flatnonzero(device == d)
        if (allocated[mine] != MISSING).any():
            continue
        order = mine[np.argsort(ts_ns[mine], kind="stable")]
        out[order] = np.cumsum(nbytes[order])
    return out


_FIELDS = ("addr", "bytes", "allocated", "reserved", "device_id", "device_type")


def _nullable(values: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(values.copy(), values == MISSING)


def _check(path: Path, ts_ns: np.ndarray, nbytes: np.ndarray, allocated: np.ndarray, reserved: np.ndarray,
           device_id: np.ndarray) -> None:
    """Raise for the first event without Bytes, with a negative total or a device outside int16."""
    problems = [(nbytes == MISSING, lambda i: "no Bytes in its args"),
                ((allocated < 0) & (allocated != MISSING), lambda i: f"Total Allocated {allocated[i]} is negative"),
                ((reserved < 0) & (reserved != MISSING), lambda i: f"Total Reserved {reserved[i]} is negative"),
                (((device_id < limits.INT16[0]) | (device_id > limits.INT16[1])) & (device_id != MISSING),
                 lambda i: f"Device Id {device_id[i]} is outside {limits.INT16}")]
    bad = [(int(np.argmax(mask)), say) for mask, say in problems if mask.any()]
    if bad:
        i, say = min(bad, key=lambda b: b[0])
        raise TraceFormatError(path, f"{MEMORY_EVENT} event at ts {ts_ns[i] / 1000:.3f} us: {say(i)}")


def outermost_ops(pid: np.ndarray, tid: np.ndarray, at_ns: np.ndarray, ops: dict[str, Any]) -> np.ndarray:
    """Per event, the name of the top-level CPU operator on its process and thread whose span
    holds its time (start <= at < end), "" where none does."""
    out = np.full(len(at_ns), "", dtype=object)
    if not len(ops["name"]) or not len(at_ns):
        return out
    top = np.flatnonzero(cpu_top_level(ops["pid"], ops["tid"], ops["start_ns"], ops["dur_ns"]))
    names = np.asarray(ops["name"], dtype=object)
    for key in set(zip(pid.tolist(), tid.tolist())):
        rows = np.flatnonzero((pid == key[0]) & (tid == key[1]))
        mine = top[(ops["pid"][top] == key[0]) & (ops["tid"][top] == key[1])]
        if not len(mine):
            continue
        mine = mine[np.argsort(ops["start_ns"][mine], kind="stable")]
        pos = np.searchsorted(ops["start_ns"][mine], at_ns[rows], side="right") - 1
        ok = pos >= 0
        hit = ok & (at_ns[rows] < np.where(ok, ops["start_ns"][mine][pos] + ops["dur_ns"][mine][pos], 0))
        out[rows[hit]] = names[mine[pos[hit]]]
    return out
