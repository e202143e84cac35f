"""PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`, the pickles pytorch.org/memory_viz
opens) -> a Profile whose `memory` frame replays the allocator's trace; it has no events.

Safety: a pickle can name any callable and have it called while it loads. The snapshot is
read by an unpickler whose find_class refuses every global, so only what pickle builds from
its own opcodes comes out: dict, list, tuple, str, int, float, bool, None (and bytes, sets).
A pickle that names anything (os.system through __reduce__, a torch class) raises
TraceFormatError naming what it asked for, before anything is called.

Bounds: a pickle is a program for a stack machine, and a small one can build much more
than itself: each `}` byte is a 64-byte dict (30 MB of them peaked at 2.8 GB). So before
unpickling, its size is bounded (limits.max_trace_bytes()); while unpickling, the
unpickler reads through _Bounded, which, every 128 KiB, counts the containers built so far
(the collector's allocation count, the collector paused meanwhile) and the time taken: more
than one container per MIN_BYTES_PER_CONTAINER bytes read (a real snapshot's frame dict
takes 30-60 bytes) or more than the time bound is refused as a bomb, so what is built stays
within about ten times the file. Frames shared through the pickle's memo are read once per
shared object (by its id), not once per action that names them: 1.5 MB that names one list
of 2,000 frames from 50,000 actions is not 10**8 frames to walk.

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
Python frame outside torch (function, file:line; C++ frames skipped); `scope` those frames, outermost
first, "file:function" joined by "/" (the call path: the model's forward shows here, a
backward run by autograd's own thread has no Python frames). No steps (NA), no thread.
"""
from __future__ import annotations

import gc
import os
import pickle
import reprlib
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracelab.core import limits, schema
from tracelab.core.errors import TraceFormatError
from tracelab.core.note import Note
from tracelab.core.options import DEFAULT, Options, applying
from tracelab.core.schema import SNAPSHOT_VERSION, Profile

ALLOCATED = {"alloc": 1, "free_requested": -1}
RESERVED = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
MAX_SCOPE_FRAMES = 8
MIN_BYTES_PER_CONTAINER = 8  # fewer bytes per dict, list or tuple built: a bomb (module docstring)
CONTAINER_SLACK = 10_000  # a small pickle's first containers, before the density means anything
BASE_S, S_PER_GIB = 30.0, 120.0  # unpickling's time bound: a real snapshot reads at ~100 MB/s
_SHOWN = reprlib.Repr()  # a value echoed in an error: short, and safe for nesting 10**5 deep
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 3, 80, 80


class _Refused(Exception):
    pass


class _PlainUnpickler(pickle.Unpickler):
    """Builds only pickle's own plain values: every global (class, function) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("a persistent id")


class _Bomb(Exception):
    pass


class _Bounded:
    """The pickle's bytes as a file the unpickler reads (with peek, it asks for 128 KiB at a
    time), checking at each read how many containers it has built and for how long."""

    def __init__(self, data: bytearray):
        self.view, self.at, self.handed, self.started = memoryview(data), 0, 0, time.monotonic()
        self.limit_s = BASE_S + S_PER_GIB * len(data) / 1024**3
        self.containers0 = gc.get_count()[0]

    def _check(self) -> None:
        built = gc.get_count()[0] - self.containers0
        if built > self.handed / MIN_BYTES_PER_CONTAINER + CONTAINER_SLACK:
            raise _Bomb(f"{built:,} dicts, lists or tuples from its first {self.handed:,} bytes: it builds far more "
                        "than a snapshot holds (a pickle bomb)")
        if time.monotonic() - self.started > self.limit_s:
            raise _Bomb(f"still unpickling after {self.limit_s:.0f} s, at byte {self.at:,}")

    def peek(self, n: int = 1) -> bytes:
        self._check()
        chunk = bytes(self.view[self.at:self.at + max(n, 1)])
        self.handed = max(self.handed, self.at + len(chunk))
        return chunk

    def read(self, n: int = -1) -> bytes:
        self._check()
        end = len(self.view) if n is None or n < 0 else min(len(self.view), self.at + n)
        chunk, self.at = bytes(self.view[self.at:end]), end
        self.handed = max(self.handed, end)
        return chunk

    def readinto(self, buffer) -> int:
        chunk = self.read(len(buffer))
        buffer[:len(chunk)] = chunk
        return len(chunk)

    def readline(self) -> bytes:
        self._check()
        end = bytes(self.view[self.at:self.at + 65536]).find(b"\n")
        return self.read(65536 if end < 0 else end + 1)


def plain_load(path: Path) -> Any:
    """The pickle's value, built from plain types only, bounded (module docstring)."""
    data = limits.read_trace_bytes(path)
    collecting = gc.isenabled()
    gc.disable()  # the allocation count then only grows as containers are built (and unpickling is faster)
    try:
        return _PlainUnpickler(_Bounded(data)).load()
    except _Refused as e:
        raise TraceFormatError(path, f"a pickle that asks for {e} to be called or built: refused "
                                     "(tracelab reads only plain values from a pickle)") from None
    except _Bomb as e:
        raise TraceFormatError(path, f"not read: {e}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            MemoryError, RecursionError) as e:
        raise TraceFormatError(path, f"not a readable pickle ({type(e).__name__}: {str(e)[:80]})") from None
    finally:
        if collecting:
            gc.enable()


@applying
def read(path: str | os.PathLike, options: Options = DEFAULT) -> Profile:
    """Read one memory snapshot pickle (module docstring)."""
    path = Path(path)
    snap = plain_load(path)
    if not isinstance(snap, dict) or not isinstance(snap.get("segments"), list):
        raise TraceFormatError(path, "not a PyTorch memory snapshot: no 'segments' list")
    traces = snap.get("device_traces") or []
    if not isinstance(traces, list):
        raise TraceFormatError(path, "device_traces: not a list")
    totals = _final_totals(path, snap["segments"])
    places: dict[int, tuple[str, str]] = {}  # id(frames) -> (op, scope): memo-shared frames walked once
    frames = [_replay(path, device, actions, totals.get(device, (0, 0)), places)
              for device, actions in enumerate(traces) if actions != []]
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    memory = _memory_frame(rows)
    meta = {"path": str(path), "source": "torch", "rank": None, "world_size": None, "devices": {},
            "trace_start_epoch_ns": None, "profiler_version": SNAPSHOT_VERSION,
            "start_origin": "the first action of the snapshot's trace", "notes": _notes(traces, rows)}
    events = schema.coerce({name: [] for name in schema.PARSED}, n_rows=0, spec=schema.PARSED)
    return Profile(schema.validate(events, schema.PARSED), schema.Meta.of(meta, path), memory=memory)


def _notes(traces: list, rows: pd.DataFrame) -> list[Note]:
    if not any(traces):
        return [Note("snapshot_without_traces")]
    if len(rows) and not _timed(rows):
        return [Note("snapshot_untimed")]  # its rows' time_ns are their actions' places (_memory_frame)
    return []


def _timed(rows: pd.DataFrame) -> bool:
    """Whether every action kept has its time_us (an older PyTorch's snapshot has none)."""
    return bool(rows["time_us"].notna().all())


def _int(path: Path, value: Any, where: str) -> int:
    if type(value) is not int or not limits.INT64[0] <= value <= limits.INT64[1]:
        raise TraceFormatError(path, f"{where}: {_SHOWN.repr(value)} is not an integer")
    return value


def _final_totals(path: Path, segments: list) -> dict[Any, tuple[int, int]]:
    """Per device, (allocated, reserved) bytes at the dump: its active blocks' and segments'
    sizes (one pass over the segments, whatever the number of devices)."""
    totals: dict[Any, tuple[int, int]] = {}
    active: dict[int, int] = {}  # id(blocks) -> active bytes: a blocks list shared by memo summed once
    for i, seg in enumerate(segments):
        if not isinstance(seg, dict) or not isinstance(blocks := seg.get("blocks", []), list):
            raise TraceFormatError(path, f"segments[{i}]: not a segment with a blocks list")
        reserved = _int(path, seg.get("total_size"), f"segments[{i}].total_size")
        if id(blocks) not in active:
            active[id(blocks)] = sum(_int(path, block.get("size"), f"segments[{i}].blocks[{j}].size")
                                     for j, block in enumerate(blocks)
                                     if isinstance(block, dict) and block.get("state") == "active_allocated")
        allocated = active[id(blocks)]
        device = seg.get("device")
        device = device if type(device) is int else None  # a dict key that hashes: never a list
        before = totals.get(device, (0, 0))
        totals[device] = (before[0] + allocated, before[1] + reserved)
        if max(totals[device]) > limits.INT64[1]:
            raise TraceFormatError(path, f"segments[{i}]: the device's segments add up past 2**63 bytes: a damaged snapshot")
    return totals


def _replay(path: Path, device: int, actions: Any, totals: tuple[int, int],
            places: dict[int, tuple[str, str]]) -> pd.DataFrame:
    """The device's alloc and free_requested actions with both totals after each."""
    if not isinstance(actions, list):
        raise TraceFormatError(path, f"device_traces[{device}]: not a list")
    parsed = [_action(path, device, i, a, places) for i, a in enumerate(actions)]
    kind = np.array([p[0] for p in parsed], dtype=object)
    size = np.array([p[1] for p in parsed], dtype=np.int64)
    d_alloc = np.array([ALLOCATED.get(k, 0) for k in kind], dtype=np.int64) * size
    d_reserved = np.array([RESERVED.get(k, 0) for k in kind], dtype=np.int64) * size
    allocated, reserved = totals
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


def _action(path: Path, device: int, i: int, a: Any,
            places: dict[int, tuple[str, str]]) -> tuple[str, int, float | None, int | None, tuple[str, str]]:
    where = f"device_traces[{device}][{i}]"
    if not isinstance(a, dict) or not isinstance(a.get("action"), str):
        raise TraceFormatError(path, f"{where}: not an action")
    size = _int(path, a.get("size", 0), f"{where}.size")
    if size < 0:
        raise TraceFormatError(path, f"{where}.size: {size} is negative")
    addr = a.get("addr")
    time_us = a.get("time_us")
    if time_us is not None and (type(time_us) not in (int, float) or not abs(time_us) < limits.MAX_TIME_NS / 1000):
        raise TraceFormatError(path, f"{where}.time_us: {_SHOWN.repr(time_us)} is not a time")
    placed = _placed_once(a.get("frames"), places) if a["action"] in ALLOCATED else ("", "")
    return a["action"], size, time_us, addr if type(addr) is int else None, placed


def _placed_once(frames: Any, places: dict[int, tuple[str, str]]) -> tuple[str, str]:
    """_placed, once per frames object (a pickle's memo lets many actions share one list)."""
    key = id(frames)
    if key not in places:
        places[key] = _placed(frames)
    return places[key]


def _user_frames(frames: Any) -> list[dict]:
    """The user's Python frames: a snapshot also records C++ frames (the allocator's, the
    snapshot tool's own unwinder: .cpp, .h, .so, '??') and torch's own Python (/torch/)."""
    if not isinstance(frames, list):
        return []
    return [f for f in frames if isinstance(f, dict) and _is_user_python(f.get("filename"))]


def _is_user_python(filename: Any) -> bool:
    if not isinstance(filename, str) or "/torch/" in filename or filename.startswith("torch/"):
        return False
    return filename.endswith(".py") or (filename.startswith("<") and filename.endswith(">"))  # <stdin>, <string>


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
    if _timed(rows):
        us = rows["time_us"].astype("float64").to_numpy()
        time_ns = np.rint((us - us.min()) * 1000).astype(np.int64)
    else:
        time_ns = rows["index"].to_numpy(dtype=np.int64)
    columns = {c: rows[c].to_numpy() for c in ("bytes", "total_allocated_bytes", "total_reserved_bytes", "device")}
    return schema.memory_frame({**columns, "time_ns": time_ns, "addr": rows["addr"].astype("Int64"),
                                "op": rows["op"].tolist(), "scope": rows["scope"].tolist()}, len(rows))
