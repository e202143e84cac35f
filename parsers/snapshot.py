"""PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`, the pickles pytorch.org/memory_viz
opens) -> a Profile whose `memory` frame replays the allocator's trace; it has no events.

Safety: a pickle can name any callable and have it called while it loads. The snapshot is
read by an unpickler whose find_class refuses every global, so only what pickle builds from
its own opcodes comes out: dict, list, tuple, str, int, float, bool, None (and bytes, sets).
A pickle that names anything (os.system through __reduce__, a torch class) raises
TraceFormatError naming what it asked for, before anything is called.

What it holds: `segments` (the allocator's segments at the dump, each with its `blocks`,
state `active_allocated` and so on) and `device_traces` (per device, the last actions:
alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map,
segment_unmap, with addr, size, time_us and the Python `frames`, innermost first). The
allocator counts a block as allocated from `alloc` to `free_requested` (its stream uses are
then awaited: `free_completed`), and memory as reserved from `segment_alloc`/`segment_map` to
`segment_free`/`segment_unmap`; the totals at the dump are the active blocks' and the
segments' sizes, so the totals before the first action kept are those less the actions'
sum. Rows: the alloc and free_requested actions (`bytes` + / -), each with both totals after
it; a segment action changes the reserved total of the next row. `op` is the innermost
frame outside torch (function, file:line); `scope` the frames outside torch, outermost
first, "file:function" joined by "/" (the call path: the model's forward shows here, a
backward run by autograd's own thread has no Python frames). No steps (NA), no thread.
"""
from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracelab import limits, schema
from tracelab.errors import TraceFormatError
from tracelab.options import DEFAULT, Options
from tracelab.schema import Profile

ALLOCATED = {"alloc": 1, "free_requested": -1}
RESERVED = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
MAX_SCOPE_FRAMES = 8


class _Refused(Exception):
    pass


class _PlainUnpickler(pickle.Unpickler):
    """Builds only pickle's own plain values: every global (class, function) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("a persistent id")


def plain_load(path: Path) -> Any:
    """The pickle's value, built from plain types only (module docstring)."""
    data = limits.read_trace_bytes(path)
    try:
        return _PlainUnpickler(io.BytesIO(bytes(data))).load()
    except _Refused as e:
        raise TraceFormatError(path, f"a pickle that asks for {e} to be called or built: refused "
                                     "(tracelab reads only plain values from a pickle)") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            MemoryError, RecursionError) as e:
        raise TraceFormatError(path, f"not a readable pickle ({type(e).__name__}: {str(e)[:80]})") from None


def read(path: str | os.PathLike, options: Options = DEFAULT) -> Profile:
    """Read one memory snapshot pickle (module docstring)."""
    path = Path(path)
    snap = plain_load(path)
    if not isinstance(snap, dict) or not isinstance(snap.get("segments"), list):
        raise TraceFormatError(path, "not a PyTorch memory snapshot: no 'segments' list")
    traces = snap.get("device_traces") or []
    if not isinstance(traces, list):
        raise TraceFormatError(path, "device_traces: not a list")
    frames = [_replay(path, device, actions, snap["segments"]) for device, actions in enumerate(traces)]
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    memory = _memory_frame(rows)
    meta = {"path": str(path), "source": "torch", "rank": None, "world_size": None, "devices": {},
            "trace_start_epoch_ns": None, "profiler_version": "torch memory snapshot",
            "start_origin": "the first action of the snapshot's trace", "notes": _notes(traces)}
    events = schema.coerce({name: [] for name in schema.PARSED}, n_rows=0, spec=schema.PARSED)
    return Profile(schema.validate(events, schema.PARSED), meta, memory=memory)


def _notes(traces: list) -> list[str]:
    if not any(traces):
        return ["the snapshot has no device_traces: record them with torch.cuda.memory._record_memory_history()"]
    return []


def _int(path: Path, value: Any, where: str) -> int:
    if type(value) is not int or not limits.INT64[0] <= value <= limits.INT64[1]:
        raise TraceFormatError(path, f"{where}: {value!r} is not an integer")
    return value


def _final_totals(path: Path, device: int, segments: list) -> tuple[int, int]:
    """(allocated, reserved) bytes of `device` at the dump: its active blocks' and segments' sizes."""
    allocated = reserved = 0
    for i, seg in enumerate(segments):
        if not isinstance(seg, dict) or not isinstance(seg.get("blocks", []), list):
            raise TraceFormatError(path, f"segments[{i}]: not a segment with a blocks list")
        if seg.get("device") != device:
            continue
        reserved += _int(path, seg.get("total_size"), f"segments[{i}].total_size")
        for j, block in enumerate(seg.get("blocks", [])):
            if isinstance(block, dict) and block.get("state") == "active_allocated":
                allocated += _int(path, block.get("size"), f"segments[{i}].blocks[{j}].size")
    return allocated, reserved


def _replay(path: Path, device: int, actions: Any, segments: list) -> pd.DataFrame:
    """The device's alloc and free_requested actions with both totals after each."""
    if not isinstance(actions, list):
        raise TraceFormatError(path, f"device_traces[{device}]: not a list")
    parsed = [_action(path, device, i, a) for i, a in enumerate(actions)]
    kind = np.array([p[0] for p in parsed], dtype=object)
    size = np.array([p[1] for p in parsed], dtype=np.int64)
    d_alloc = np.array([ALLOCATED.get(k, 0) for k in kind], dtype=np.int64) * size
    d_reserved = np.array([RESERVED.get(k, 0) for k in kind], dtype=np.int64) * size
    allocated, reserved = _final_totals(path, device, segments)
    total_alloc = allocated - d_alloc.sum() + np.cumsum(d_alloc)
    total_reserved = reserved - d_reserved.sum() + np.cumsum(d_reserved)
    lowest = min(allocated - d_alloc.sum(), reserved - d_reserved.sum(), *total_alloc[:1], *total_reserved[:1],
                 total_alloc.min(initial=0), total_reserved.min(initial=0))
    if lowest < 0:
        raise TraceFormatError(path, f"device_traces[{device}]: its actions and the segments at the dump disagree "
                                     "(the allocated or reserved total would be negative): a damaged snapshot")
    keep = np.flatnonzero(d_alloc != 0)
    return pd.DataFrame({"time_us": [parsed[i][2] for i in keep], "index": keep, "addr": [parsed[i][3] for i in keep],
                         "bytes": d_alloc[keep], "total_allocated_bytes": total_alloc[keep],
                         "total_reserved_bytes": total_reserved[keep], "device": device,
                         "op": [parsed[i][4][0] for i in keep], "scope": [parsed[i][4][1] for i in keep]})


def _action(path: Path, device: int, i: int, a: Any) -> tuple[str, int, float | None, int | None, tuple[str, str]]:
    where = f"device_traces[{device}][{i}]"
    if not isinstance(a, dict) or not isinstance(a.get("action"), str):
        raise TraceFormatError(path, f"{where}: not an action")
    size = _int(path, a.get("size", 0), f"{where}.size")
    if size < 0:
        raise TraceFormatError(path, f"{where}.size: {size} is negative")
    addr = a.get("addr")
    time_us = a.get("time_us")
    if time_us is not None and (type(time_us) not in (int, float) or not abs(time_us) < limits.MAX_TIME_NS / 1000):
        raise TraceFormatError(path, f"{where}.time_us: {time_us!r} is not a time")
    placed = _placed(a.get("frames")) if a["action"] in ALLOCATED else ("", "")
    return a["action"], size, time_us, addr if type(addr) is int else None, placed


def _user_frames(frames: Any) -> list[dict]:
    if not isinstance(frames, list):
        return []
    return [f for f in frames if isinstance(f, dict) and isinstance(f.get("filename"), str)
            and "/torch/" not in f["filename"] and not f["filename"].startswith("??")]


def _placed(frames: Any) -> tuple[str, str]:
    """(op, scope) from an action's frames (module docstring)."""
    user = _user_frames(frames)
    if not user:
        return "", ""
    inner = user[0]
    op = f"{inner.get('name', '?')} ({os.path.basename(inner['filename'])}:{inner.get('line', '?')})"
    path = [f"{os.path.basename(f['filename'])}:{f.get('name', '?')}" for f in reversed(user[:MAX_SCOPE_FRAMES])]
    return op, "/".join(path)


def _memory_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows on one clock: ns since the first timed action; without times, the action's place (1 ns each)."""
    if not len(rows):
        return schema.memory_frame({"time_ns": [], "bytes": [], "device": []}, 0)
    timed = rows["time_us"].notna().all()
    if timed:
        us = rows["time_us"].astype("float64").to_numpy()
        time_ns = np.rint((us - us.min()) * 1000).astype(np.int64)
    else:
        time_ns = rows["index"].to_numpy(dtype=np.int64)
    columns = {c: rows[c].to_numpy() for c in ("bytes", "total_allocated_bytes", "total_reserved_bytes", "device")}
    return schema.memory_frame({**columns, "time_ns": time_ns, "addr": rows["addr"].astype("Int64"),
                                "op": rows["op"].tolist(), "scope": rows["scope"].tolist()}, len(rows))
