"""Kineto / Chrome trace JSON (torch.profiler, plain or .gz) -> Profile.

One row per GPU activity: `cat` kernel, gpu_memcpy, gpu_memset. A trace with
no GPU activity at all gives its top-level CPU operators instead (kind
`cpu_op`, device -1, stream = thread id).

Speed and memory: msgspec first splits `traceEvents` into raw JSON values;
then, CHUNK_EVENTS at a time, decodes only each event's `cat`, and decodes
again, into a typed Struct with the few fields and args a row needs, only the
events of the categories used (GPU rows, annotations, launch calls). So a
375 MB trace loads in seconds, >10x faster than HTA, and never holds a Python
object per event of the other categories (benchmarks/RESULTS.md).

Times: `ts`/`dur` are microseconds with a 3-digit ns fraction. `dur_ns` is each
event's own `round(dur * 1000)`; `ts` is read exactly from its text (a float
cannot hold epoch microseconds to the ns). `start_ns` counts from the first
kept row (the earliest GPU activity, or CPU operator in a CPU-only trace);
`meta["trace_start_epoch_ns"]` is that origin in ns since the Unix epoch: new
traces give `baseTimeNanoseconds` and `ts` relative to it, old ones absolute
epoch microseconds.

Scope, as under nsys and proton (the user regions open on the launching thread
at launch): the `user_annotation` ranges (record_function, on the CPU) on the
pid and tid of the row's launch call that hold the call's start, outermost
first, joined by "/". The launch call is the LAUNCHES event with the row's args
"correlation" (the first, should two share it); every GPU row and launch in the
traces seen has one, and the ac2g flow events repeat the same ids. Kineto's own
`gpu_user_annotation` copies, per device and stream, exist (in our captures)
only for the innermost range around a launch, so they miss the enclosing
workload region (`nccl:all_reduce` where the launch gives
`allreduce_nccl_4096/nccl:all_reduce`); they give the scope only of rows whose
launch is not in the trace, and of all rows of a trace with no CPU annotation.
As under nsys, a kernel launched by the autograd thread gets that thread's
regions. `ProfilerStep#N` is left out: it would split every scope step by step
(trace_diff/control: 147 distinct scopes with it, 26 without).

msg_bytes: see `_kineto.collective_bytes`.
"""
from __future__ import annotations

import gzip
import os
import re
import zlib
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import compress
from operator import attrgetter
from pathlib import Path
from typing import Any, ClassVar, Iterable

import msgspec
import numpy as np
import pandas as pd

from tracelab import classify, schema
from tracelab.errors import TraceFormatError
from tracelab.schema import Profile

from ._kineto import (collective_bytes, correlations, cpu_top_level, device_table, launch_index, scopes,
                      to_ints)

# cat -> kind; the capitalised names are what Kineto of PyTorch 1.8/1.9 wrote
GPU_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
             "Kernel": "kernel", "Memcpy": "memcpy", "Memset": "memset"}
ANNOTATION = "gpu_user_annotation"
USER_ANNOTATION = "user_annotation"  # record_function ranges on the CPU thread
# host calls that launch GPU rows: CUDA runtime and driver (ROCm's HIP calls are filed
# as cuda_runtime too), PyTorch 1.8/1.9's "Runtime", Intel XPU, PrivateUse1 backends
LAUNCHES = {"cuda_runtime", "cuda_driver", "Runtime", "xpu_runtime", "xpu_driver",
            "privateuse1_runtime", "privateuse1_driver"}
PROFILER_STEP = re.compile(r"ProfilerStep#\d+")
CPU_OPS = {"cpu_op", "Operator"}
CHUNK_EVENTS = 16384  # events decoded at a time: bounds the memory held per event
_MIN_EPOCH_NS = 10**18  # 2001-09-09: an absolute `ts` is epoch time only past this


class _Args(msgspec.Struct, gc=False):
    """The args a row needs; the trace's other args are skipped unread."""

    device: Any = None
    stream: Any = None
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    dtype: Any = None
    correlation: Any = None


class _Category(msgspec.Struct, gc=False):
    """Every event is decoded this far, to choose the few decoded in full."""

    cat: str = ""


class _Event(msgspec.Struct, gc=False):
    """A chosen event in full; `ts` exact (a float cannot hold epoch microseconds to the ns)."""

    cat: str
    ts: Decimal
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    dur: float = 0.0
    args: _Args | None = None


class _LaunchArgs(msgspec.Struct, gc=False):
    correlation: Any = None


class _Launch(msgspec.Struct, gc=False):
    """A launch call: only what finds it (correlation) and places it (thread, start)."""

    ts: Decimal
    pid: int | str | None = None
    tid: int | str | None = None
    args: _LaunchArgs | None = None


class _Trace(msgspec.Struct):
    traceEvents: list[msgspec.Raw]
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: int | None = None
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None


_TRACE_DECODER = msgspec.json.Decoder(_Trace)
_CATEGORY_DECODER = msgspec.json.Decoder(list[_Category])
_CAT, _PID, _TID, _TS, _ARGS = map(attrgetter, ("cat", "pid", "tid", "ts", "args"))


def _ts_ns(events: list[_Event] | list[_Launch]) -> list[int]:
    return [int(t.scaleb(3).to_integral_value()) for t in map(_TS, events)]


@dataclass
class _Picked:
    """Events of some categories as columns (lists); repeated names shared."""

    DECODER: ClassVar = msgspec.json.Decoder(list[_Event])
    cat: list[str] = field(default_factory=list)
    pid: list = field(default_factory=list)
    tid: list = field(default_factory=list)
    dur_us: list[float] = field(default_factory=list)
    ts_ns: list[int] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    args: list[_Args | None] = field(default_factory=list)
    _names: dict[str, str] = field(default_factory=dict)

    def add(self, events: list[_Event]) -> None:
        self.cat += map(_CAT, events)
        self.pid += map(_PID, events)
        self.tid += map(_TID, events)
        self.dur_us += [e.dur for e in events]
        self.ts_ns += _ts_ns(events)
        self.name += [self._names.setdefault(e.name, e.name) for e in events]
        self.args += map(_ARGS, events)


@dataclass
class _Launches:
    """Launch calls as columns."""

    DECODER: ClassVar = msgspec.json.Decoder(list[_Launch])
    pid: list = field(default_factory=list)
    tid: list = field(default_factory=list)
    ts_ns: list[int] = field(default_factory=list)
    args: list[_LaunchArgs | None] = field(default_factory=list)

    def add(self, events: list[_Launch]) -> None:
        self.pid += map(_PID, events)
        self.tid += map(_TID, events)
        self.ts_ns += _ts_ns(events)
        self.args += map(_ARGS, events)


def _array(raws: Iterable[msgspec.Raw]) -> bytes:
    return b"[" + b",".join(raws) + b"]"


def read(path: str | os.PathLike) -> Profile:
    """Read one Kineto trace; rows as described in the module docstring."""
    path = Path(path)
    trace = _decode(path, _read_bytes(path))
    gpu, gpu_ranges, launches, cpu_ranges = _pick(path, trace.traceEvents, [
        (set(GPU_KINDS), _Picked), ({ANNOTATION}, _Picked), (LAUNCHES, _Launches), ({USER_ANNOTATION}, _Picked)])
    if gpu.cat:
        columns = _gpu_columns(gpu)
        columns["scope"] = _scopes(columns, gpu, launches, cpu_ranges, gpu_ranges)
    else:
        columns = _cpu_columns(path, _pick(path, trace.traceEvents, [(CPU_OPS, _Picked)])[0])
    _check_durations(path, columns)
    origin_ns = int(columns["start_ns"].min())
    columns["start_ns"] = columns["start_ns"] - origin_ns
    meta = _meta(path, trace, origin_ns)
    return Profile(_frame(columns, meta["rank"]), meta)


def _check_durations(path: Path, columns: dict[str, Any]) -> None:
    negative = np.flatnonzero(columns["dur_ns"] < 0)
    if len(negative):
        raise TraceFormatError(path, f"{len(negative)} events with a negative dur, the first "
                                     f"{columns['name'][negative[0]]!r}: a damaged trace")


def _read_bytes(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TraceFormatError(path, f"cannot read: {e.strerror or e}") from None
    if not data.strip():
        raise TraceFormatError(path, "empty file")
    if not data.startswith(b"\x1f\x8b"):
        return data
    try:
        return gzip.decompress(data)
    except EOFError:
        raise TraceFormatError(path, "truncated gzip: the compressed stream ends early") from None
    except (OSError, zlib.error) as e:
        raise TraceFormatError(path, f"damaged gzip: {e}") from None


def _decode(path: Path, data: bytes) -> _Trace:
    try:
        return _TRACE_DECODER.decode(data)
    except msgspec.ValidationError as e:
        _check_json(path, data)
        raise TraceFormatError(path, f"not a Kineto trace: {e}") from None
    except msgspec.DecodeError as e:
        raise TraceFormatError(path, f"not valid JSON (truncated or damaged?): {e}") from None


def _check_json(path: Path, data: bytes) -> None:
    """Raise if `data` is not JSON at all (the typed decode stops at the first wrong type)."""
    try:
        msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        raise TraceFormatError(path, f"not valid JSON: {e}") from None


def _pick(path: Path, raws: list[msgspec.Raw], groups: list[tuple[set[str], type]]) -> list:
    """Per (categories, collector) group, the events whose `cat` is among the categories,
    in a new collector. CHUNK_EVENTS at a time, every event's `cat` is decoded, and the
    events of each group are decoded again, into the collector's own Struct."""
    picked = [collector() for _, collector in groups]
    for first in range(0, len(raws), CHUNK_EVENTS):
        part = raws[first:first + CHUNK_EVENTS]
        try:
            cats = list(map(_CAT, _CATEGORY_DECODER.decode(_array(part))))
            for (group, _), out in zip(groups, picked):
                if chosen := list(compress(part, map(group.__contains__, cats))):
                    out.add(out.DECODER.decode(_array(chosen)))
        except msgspec.ValidationError as e:
            raise TraceFormatError(path, f"unexpected event in traceEvents[{first}:]: {e}") from None
    return picked


def _dur_ns(picked: _Picked) -> np.ndarray:
    return np.rint(np.array(picked.dur_us, dtype=np.float64) * 1000).astype(np.int64)


def _gpu_columns(gpu: _Picked) -> dict[str, Any]:
    args = gpu.args
    cols: dict[str, Any] = {
        "kind": np.array([GPU_KINDS[c] for c in gpu.cat], dtype=object),
        "name": gpu.name,
        "device": to_ints(gpu.pid, [a.device if a else None for a in args]),
        "stream": to_ints(gpu.tid, [a.stream if a else None for a in args]),
        "start_ns": np.array(gpu.ts_ns, dtype=np.int64),
        "dur_ns": _dur_ns(gpu),
    }
    cols["msg_bytes"] = np.where(cols["kind"] == "kernel", collective_bytes(args), np.nan)
    return cols


def _scopes(cols: dict[str, Any], gpu: _Picked, launches: _Launches, cpu_annotations: _Picked,
            gpu_annotations: _Picked) -> np.ndarray:
    """Per GPU row, the CPU annotations around its launch; else the GPU ones around its start."""
    pid = to_ints(launches.pid + cpu_annotations.pid)  # one id space for launches and ranges
    tid = to_ints(launches.tid + cpu_annotations.tid)
    n_launches = len(launches.pid)
    cpu = _ranges(cpu_annotations, pid[n_launches:], tid[n_launches:])
    launch = np.full(len(gpu.cat), -1, dtype=np.int64)
    if len(cpu["name"]):
        launch = launch_index(correlations(gpu.args), correlations(launches.args))
    found = launch >= 0
    at = launch[found]
    scope = np.empty(len(launch), dtype=object)
    scope[found] = scopes(pid[at], tid[at], np.array(launches.ts_ns, dtype=np.int64)[at], cpu)
    rest = ~found
    own = _ranges(gpu_annotations, to_ints(gpu_annotations.pid), to_ints(gpu_annotations.tid))
    scope[rest] = scopes(cols["device"][rest], cols["stream"][rest], cols["start_ns"][rest], own)
    return scope


def _ranges(annotations: _Picked, pid: np.ndarray, tid: np.ndarray) -> dict[str, Any]:
    """Annotation ranges as arrays, ProfilerStep#N left out (module docstring)."""
    keep = np.array([not PROFILER_STEP.fullmatch(n) for n in annotations.name], dtype=bool)
    start_ns = np.array(annotations.ts_ns, dtype=np.int64)
    return {"pid": pid[keep], "tid": tid[keep], "start_ns": start_ns[keep],
            "end_ns": (start_ns + _dur_ns(annotations))[keep], "name": list(compress(annotations.name, keep))}


def _cpu_columns(path: Path, ops: _Picked) -> dict[str, Any]:
    if not ops.cat:
        raise TraceFormatError(path, "no GPU activity (kernel, gpu_memcpy, gpu_memset) "
                                     "and no CPU operators (cpu_op): nothing to report")
    thread = to_ints(ops.tid)
    start_ns, dur_ns = np.array(ops.ts_ns, dtype=np.int64), _dur_ns(ops)
    keep = cpu_top_level(to_ints(ops.pid), thread, start_ns, dur_ns)
    names = np.array(ops.name, dtype=object)[keep]
    return {"kind": "cpu_op", "name": names, "device": -1, "stream": thread[keep],
            "start_ns": start_ns[keep], "dur_ns": dur_ns[keep], "scope": "", "msg_bytes": np.nan}


def _frame(cols: dict[str, Any], rank: int | None) -> pd.DataFrame:
    names = pd.Series(pd.Categorical(cols["name"]))
    kernel = names.map({n: classify.canonical(n) for n in names.cat.categories}).astype("category")
    kinds = pd.Series(np.broadcast_to(cols["kind"], len(names)))
    df = schema.coerce({**cols, "rank": -1 if rank is None else rank, "source": "torch",
                        "kernel": kernel, "op_class": classify.op_classes(kernel, kinds),
                        "count": 1}, n_rows=len(names))
    df = df.sort_values(["start_ns", "device", "stream"], kind="stable", ignore_index=True)
    return schema.validate(df)


def _meta(path: Path, trace: _Trace, origin_ns: int) -> dict[str, Any]:
    dist = trace.distributedInfo if isinstance(trace.distributedInfo, dict) else {}
    rank, world_size = dist.get("rank"), dist.get("world_size")
    base_ns = trace.baseTimeNanoseconds
    epoch_ns = base_ns + origin_ns if base_ns is not None else origin_ns
    versions = {"cupti": trace.cupti_version, "cuda_runtime": trace.cuda_runtime_version,
                "cuda_driver": trace.cuda_driver_version, "nccl": dist.get("nccl_version")}
    return {
        "path": str(path), "source": "torch",
        "rank": rank if isinstance(rank, int) else None,
        "world_size": world_size if isinstance(world_size, int) else None,
        "distributed_backend": dist.get("backend"),
        "devices": device_table(trace.deviceProperties),
        "trace_start_epoch_ns": epoch_ns if epoch_ns >= _MIN_EPOCH_NS else None,
        "start_origin": "first kept row (earliest GPU activity, or CPU operator when there is none)",
        "profiler_version": None if trace.schemaVersion is None else f"kineto schema {trace.schemaVersion}",
        "versions": {k: v for k, v in versions.items() if v is not None},
    }
