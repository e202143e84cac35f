"""Kineto / Chrome trace JSON (torch.profiler, plain or .gz) -> Profile.

One row per GPU activity: `cat` kernel, gpu_memcpy, gpu_memset. A trace with
no GPU activity at all gives its top-level CPU operators instead (kind
`cpu_op`, device -1, stream = thread id).

Decoding (speed and memory): see `_kineto_json`.

Times: `ts`/`dur` are microseconds with a 3-digit ns fraction. `dur_ns` is each
event's own `round(dur * 1000)`; `ts` is read exactly from its text (a float
cannot hold epoch microseconds to the ns). `start_ns` counts from the first
kept row (the earliest GPU activity, or CPU operator in a CPU-only trace);
`meta.trace_start_epoch_ns` is that origin in ns since the Unix epoch: new
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
As under nsys, a kernel launched by another thread than the process's main one
(the autograd thread) gets the main thread's open regions, its own nested inside
(`_kineto.thread_scopes`). Step ranges (`ProfilerStep#N`, parsers/_steps.py) are
left out of scopes: they would split every scope step by step (trace_diff/control:
147 distinct scopes with them, 26 without); the `step` column carries them.

msg_bytes: see `_kineto.collective_bytes`; process_group: `_kineto.process_groups`.
"""
from __future__ import annotations

import os
import re
from itertools import compress
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracelab.core import classify, limits, schema
from tracelab.core.errors import TraceFormatError
from tracelab.ingest.budget import check_rows
from tracelab.core.note import Note
from tracelab.core.options import DEFAULT, Options, applying
from tracelab.core.schema import Meta, Profile

from . import _host, _kineto_memory
from ._kineto import (collective_bytes, cpu_top_level, device_table, joined_ids, launch_index,
                      process_groups, scopes, thread_scopes, to_ints)
from ._kineto_graphs import scope_launches
from ._kineto_columns import Calls, Instants, Launches, Ops, Picked
from ._kineto_json import Trace, read_bytes, read_events
from ._kineto_unread import unread_notes
from ._gemm_dims import odd_gemms
from ._shapes import op_rows, row_work
from ._steps import assign, compile_pattern, is_step, numbers, repeat_note

# cat -> kind; the capitalised names are what Kineto of PyTorch 1.8/1.9 wrote
GPU_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
             "Kernel": "kernel", "Memcpy": "memcpy", "Memset": "memset"}
ANNOTATION = "gpu_user_annotation"
USER_ANNOTATION = "user_annotation"  # record_function ranges on the CPU thread
# host calls that launch GPU rows: CUDA runtime and driver (ROCm's HIP calls are filed
# as cuda_runtime too), PyTorch 1.8/1.9's "Runtime", Intel XPU, PrivateUse1 backends
LAUNCHES = {"cuda_runtime", "cuda_driver", "Runtime", "xpu_runtime", "xpu_driver",
            "privateuse1_runtime", "privateuse1_driver"}
CPU_OPS = {"cpu_op", "Operator"}
MEMORY = "cpu_instant_event"  # `[memory]` events among them (profile_memory=True): parsers/_kineto_memory.py
# torch.compile's CPU operators around a compiled graph's own (Inductor's kernels, with
# torch._inductor.config.cpp.enable_kernel_profile, and its library calls)
COMPILED_WRAPPERS = re.compile(r"Torch-Compiled Region: .*|## Call CompiledFxGraph .* ##|CompiledFunction")
COLLECTIVE_RANGE = re.compile(r"(?:gloo|mpi|ucc):\w+")  # CPU collectives, on their backend's worker thread
_MIN_EPOCH_NS = 10**18  # 2001-09-09: an absolute `ts` is epoch time only past this


# the categories read_events picks, each into its collector: launches with name and dur; CPU operators with
# their shapes: the host frame (parsers/_host.py) and the kernels' work (parsers/_shapes.py); memory events
# (Profile.memory)
KINETO_GROUPS = [(set(GPU_KINDS), Picked), ({ANNOTATION}, Calls), (LAUNCHES, Calls), ({USER_ANNOTATION}, Calls),
                 (CPU_OPS, Ops), ({MEMORY}, Instants)]


@applying
def read(path: str | os.PathLike, options: Options = DEFAULT) -> Profile:
    """Read one Kineto trace; rows as described in the module docstring. `options.step_pattern`
    names the step ranges (parsers/_steps.py; default ProfilerStep#N, step N, ...)."""
    path = Path(path)
    step_re = compile_pattern(options.step_pattern)
    data = read_bytes(path)
    trace, (gpu, gpu_ranges, launches, cpu_ranges, ops, instants) = read_events(path, data, KINETO_GROUPS)
    _legacy_steps(cpu_ranges, ops, step_re)
    unread = [] if gpu.cat else unread_notes(data)  # a trace without GPU rows may hold other device activity
    del data  # the picked columns hold what is needed of the file's bytes and events
    check_rows(path, sum(x.size for x in (gpu, launches, ops, cpu_ranges, instants)), "events")
    if gpu.cat:
        columns = _gpu_columns(gpu)
        launch = launch_index(gpu.correlation, launches.correlation)
        graphs = _graph_replays(columns, launch, launches)
        replay = (graphs.scope_launch >= 0) & (graphs.scope_launch != launch)
        external = _external_ids(gpu, launch, graphs.scope_launch, launches)
        op_of_row = op_rows(columns["kind"], external, ops)  # the operator that launched each row, -1 for none
        columns.update(_work(columns, gpu, ops, op_of_row, np.where(replay, launch, -1)))
        # GEMMs of an odd N or K run slower: the fix finding names them and says pad them
        odd = odd_gemms(gpu.name, columns["dur_ns"], op_of_row, ops)
        columns["scope"] = _scopes(columns, graphs.scope_launch, launches, cpu_ranges, gpu_ranges, step_re)
        columns["step"] = _gpu_steps(columns, launch, launches, cpu_ranges, gpu_ranges, step_re)
    else:
        columns = _cpu_columns(path, ops, cpu_ranges, step_re, unread)
    shapes = ops.shapes_recorded()
    ops.release_inputs()  # the last reader of the shapes: the file's bytes are freed with them
    _check_durations(path, columns)
    origin_ns = int(columns["start_ns"].min())
    columns["start_ns"] = columns["start_ns"] - origin_ns
    if gpu.cat:
        columns.update(_host.launch_columns(launch, launches, origin_ns))
    meta = _meta(path, trace, origin_ns)
    if gpu.cat:
        meta[classify.LAUNCHED] = _comm_launches(columns, gpu, ops, op_of_row, launch, launches)
    meta["notes"] = (graphs.notes if gpu.cat else unread) + _step_notes(cpu_ranges, step_re)
    meta["odd_gemms"] = odd if gpu.cat else []
    meta["graph_capture_calls"] = graphs.captured_calls if gpu.cat else 0  # reports/fixes/host.py reads it
    meta["record_shapes"] = shapes  # the profiler's cost per operator depends on it (whatif/profiler_cost.py)
    host = _host.kineto_host(launches, ops, cpu_ranges, origin_ns, step_re)  # what the host was doing: the idle causes
    memory = _memory(path, instants, ops, cpu_ranges, origin_ns, step_re)
    if note := _kineto_memory.running_sum_note(memory):
        meta["notes"].append(note)
    return Profile(_frame(columns, meta["rank"]), Meta.of(meta, path), host=host, memory=memory)


def _legacy_steps(ranges: Calls, ops: Ops, step_re: re.Pattern) -> None:
    """PyTorch 1.8/1.9 filed record_function ranges, ProfilerStep#N among them, as CPU operators
    (cat `Operator`): where the annotations hold no step range, the operators named as steps
    are the step ranges (added to `ranges`), as a later release would have filed them."""
    if is_step(ranges.name, step_re).any() or not ops.size:
        return
    legacy = is_step(ops.name, step_re) & np.array([c == "Operator" for c in ops.cat], dtype=bool)
    if legacy.any():
        ranges.take_rows(ops, np.flatnonzero(legacy))


def _memory(path: Path, instants: Instants, ops: Ops, annotations: Picked, origin_ns: int, step_re: re.Pattern):
    """The memory frame of the `[memory]` events (parsers/_kineto_memory.py), None without any."""
    mask = _kineto_memory.is_memory(instants.name)
    if not mask.any():
        return None
    pid = joined_ids((instants, "pid"), (ops, "pid"), (annotations, "pid"))  # one id space
    tid = joined_ids((instants, "tid"), (ops, "tid"), (annotations, "tid"))
    n, m = instants.size, instants.size + ops.size
    at = {"pid": pid[:n][mask], "tid": tid[:n][mask], "ts_ns": np.asarray(instants.ts_ns, dtype=np.int64)[mask]}
    on = {"pid": pid[n:m], "tid": tid[n:m], "start_ns": np.asarray(ops.ts_ns, dtype=np.int64), "dur_ns": ops.dur_ns,
          "name": ops.name}
    return _kineto_memory.frame(path, instants, mask, at, origin_ns, on, _ranges(annotations, pid[m:], tid[m:], step_re),
                                _step_ranges(annotations, pid[m:], step_re))


def _devices(trace: Trace, path: Path) -> dict[int, dict[str, Any]]:
    """The device table from deviceProperties, or from computeProperties, the key PyTorch wrote
    before it; a file with neither has no devices (the commands say the device is unknown)."""
    if trace.deviceProperties is None and trace.computeProperties is not None:
        return device_table(trace.computeProperties, path, "computeProperties")
    return device_table(trace.deviceProperties, path)


def _check_durations(path: Path, columns: dict[str, Any]) -> None:
    negative = np.flatnonzero(columns["dur_ns"] < 0)
    if len(negative):
        raise TraceFormatError(path, f"{len(negative)} events with a negative dur, the first "
                                     f"{columns['name'][negative[0]]!r}: a damaged trace")
    device = np.asarray(columns["device"])
    outside = np.flatnonzero((device < limits.INT16[0]) | (device > limits.INT16[1]))
    if len(outside):  # pid or args "device" of a GPU row: schema.COLUMNS has int16
        raise limits.out_of_range(path, f"event {columns['name'][outside[0]][:60]!r}", "device (pid / args.device)",
                                  int(device[outside[0]]), limits.INT16)


def _gpu_columns(gpu: Picked) -> dict[str, Any]:
    args = gpu.args
    cols: dict[str, Any] = {
        "kind": np.array([GPU_KINDS[c] for c in gpu.cat], dtype=object),
        "name": gpu.name,
        "device": _ids_or(gpu, "pid", lambda: [a.device if a else None for a in args]),
        "stream": _ids_or(gpu, "tid", lambda: [a.stream if a else None for a in args]),
        "start_ns": np.array(gpu.ts_ns, dtype=np.int64),
        "dur_ns": gpu.dur_ns,
    }
    cols["msg_bytes"] = np.where(cols["kind"] == "kernel", collective_bytes(args), np.nan)
    cols["process_group"] = process_groups(args)
    return cols


def _ids_or(gpu: Picked, column: str, fallback) -> np.ndarray:
    """The column's integer ids; where a label is no integer, to_ints with the args' `fallback()`."""
    ids = gpu.ids(column)
    return ids.copy() if ids is not None else to_ints(getattr(gpu, column), fallback())


def _comm_launches(cols: dict[str, Any], gpu: Picked, ops: Ops, op_of_row: np.ndarray, launch: np.ndarray,
                   launches: Calls) -> dict[str, list]:
    """classify.comm_launches of the GPU rows: each kernel's own collective (args "Collective name"),
    the CPU operator that launched it (its External id), the ranges open at its launch (its scope)
    and its launch call's name."""
    collective = [None if a is None or a.collective is None else str(a.collective) for a in gpu.args]
    op = [ops.name[i] if i >= 0 else "" for i in op_of_row.tolist()]
    context = [classify.comm_context(c, o, str(r)) for c, o, r in zip(collective, op, cols["scope"])]
    api = [launches.name[i] if i >= 0 else "" for i in launch.tolist()]
    return classify.comm_launches(cols["kind"], gpu.name, context, api, cols)


def _external_ids(gpu: Picked, launch: np.ndarray, scope_launch: np.ndarray, launches: Picked) -> np.ndarray:
    """Per GPU row, the External id of the operator whose shapes give its work: its own; a CUDA
    graph replay's, the operator around the launch that captured its node (as for its scope)."""
    external = gpu.external_id.copy()
    replay = (scope_launch >= 0) & (scope_launch != launch)
    if replay.any():
        external[replay] = launches.external_id[scope_launch[replay]]
    return external


def _work(cols: dict[str, Any], gpu: Picked, ops: Ops, op_of_row: np.ndarray, call: np.ndarray) -> dict[str, Any]:
    """flops, bytes and dtype per row (parsers/_shapes.py): a kernel's from the shapes of the
    operator that launched it (record_shapes), a memcpy's or memset's bytes from its own args.
    `call`: per row, its graph replay's launch (-1 outside replays): each replay executes the
    captured operators once more."""
    flops, moved, dtype = row_work(gpu.name, cols["dur_ns"], op_of_row, ops, call)
    copies = np.flatnonzero(cols["kind"] != "kernel")
    moved[copies] = [float(a.bytes) if a is not None and type(a.bytes) in (int, float) else np.nan
                     for a in map(gpu.args.__getitem__, copies.tolist())]
    return {"flops": flops, "bytes": moved, "dtype": dtype}


def _graph_replays(cols: dict[str, Any], launch: np.ndarray, launches: Picked):
    """Per GPU row, the launch whose scope it takes: a CUDA-graph replay's row, the launch that
    captured its node where the capture is in the trace (parsers/_kineto_graphs.py)."""
    pid, tid = joined_ids((launches, "pid")), joined_ids((launches, "tid"))
    return scope_launches(launches.name, pid, tid, launches.ts_ns, launch,
                          cols["kind"], cols["start_ns"], np.asarray(cols["stream"]))


def _scopes(cols: dict[str, Any], launch: np.ndarray, launches: Launches, cpu_annotations: Picked,
            gpu_annotations: Picked, step_re: re.Pattern) -> np.ndarray:
    """Per GPU row, the CPU annotations around its launch (other threads: nested in the
    main thread's, see _kineto.thread_scopes); else the GPU ones around its start."""
    pid = joined_ids((launches, "pid"), (cpu_annotations, "pid"))  # one id space for launches and ranges
    tid = joined_ids((launches, "tid"), (cpu_annotations, "tid"))
    n_launches = launches.size
    cpu = _ranges(cpu_annotations, pid[n_launches:], tid[n_launches:], step_re)
    found = (launch >= 0) & (len(cpu["name"]) > 0)  # no CPU ranges at all: the GPU copies
    at = launch[found]
    scope = np.empty(len(launch), dtype=object)
    scope[found] = thread_scopes(pid[at], tid[at], np.array(launches.ts_ns, dtype=np.int64)[at], cpu)
    rest = ~found
    own_pid, own_tid = joined_ids((gpu_annotations, "pid")), joined_ids((gpu_annotations, "tid"))
    own = _ranges(gpu_annotations, own_pid, own_tid, step_re)
    scope[rest] = scopes(cols["device"][rest], cols["stream"][rest], cols["start_ns"][rest], own)
    return scope


def _ranges(annotations: Picked, pid: np.ndarray, tid: np.ndarray, step_re: re.Pattern) -> dict[str, Any]:
    """Annotation ranges as arrays, step ranges left out (module docstring)."""
    keep = ~is_step(annotations.name, step_re)
    start_ns = np.array(annotations.ts_ns, dtype=np.int64)
    return {"pid": pid[keep], "tid": tid[keep], "start_ns": start_ns[keep],
            "end_ns": (start_ns + annotations.dur_ns)[keep], "name": list(compress(annotations.name, keep))}


def _step_ranges(annotations: Picked, group: np.ndarray, step_re: re.Pattern) -> dict[str, np.ndarray]:
    """The step ranges among the annotations: group (process or device), start, end, step number."""
    mask = is_step(annotations.name, step_re)
    start_ns = np.array(annotations.ts_ns, dtype=np.int64)[mask]
    end_ns = start_ns + annotations.dur_ns[mask]
    return {"group": group[mask], "start_ns": start_ns, "end_ns": end_ns,
            "step": numbers(list(compress(annotations.name, mask)), group[mask], start_ns, end_ns, step_re)}


def _step_notes(annotations: Picked, step_re: re.Pattern) -> list[Note]:
    """A note where the step ranges repeat their numbers (parsers/_steps.py)."""
    mask = is_step(annotations.name, step_re)
    steps = _step_ranges(annotations, joined_ids((annotations, "pid")), step_re)
    return repeat_note(list(compress(annotations.name, mask)), steps["group"], steps["start_ns"], steps["step"],
                       step_re)


def _gpu_steps(cols: dict[str, Any], launch: np.ndarray, launches: Launches, cpu_annotations: Picked,
               gpu_annotations: Picked, step_re: re.Pattern) -> pd.arrays.IntegerArray:
    """Per GPU row, the step range around its launch call on any thread of its process;
    rows whose launch is not in the trace: Kineto's GPU copy of the step range on their device."""
    pid = joined_ids((launches, "pid"), (cpu_annotations, "pid"))
    n_launches = launches.size
    step = schema.na_ints(len(launch))
    found = launch >= 0
    at = launch[found]
    cpu = _step_ranges(cpu_annotations, pid[n_launches:], step_re)
    step[found] = assign(pid[at], np.array(launches.ts_ns, dtype=np.int64)[at], cpu)
    own = _step_ranges(gpu_annotations, joined_ids((gpu_annotations, "pid")), step_re)
    step[~found] = assign(cols["device"][~found], cols["start_ns"][~found], own)
    return step


def _cpu_columns(path: Path, ops: Picked, annotations: Picked, step_re: re.Pattern, unread: list[str]
                 ) -> dict[str, Any]:
    if not ops.cat:
        raise TraceFormatError(path, "no GPU activity tracelab reads (kernel, gpu_memcpy, gpu_memset) and no CPU "
                                     "operators (cpu_op): nothing to report" + "".join(f"; {u}" for u in unread))
    n_ops = ops.size
    pid, thread = joined_ids((ops, "pid"), (annotations, "pid")), joined_ids((ops, "tid"), (annotations, "tid"))
    start_ns = np.r_[np.array(ops.ts_ns, dtype=np.int64), np.array(annotations.ts_ns, dtype=np.int64)]
    dur_ns = np.r_[ops.dur_ns, annotations.dur_ns]
    keep = np.r_[_top_level_ops(ops.name, pid[:n_ops], thread[:n_ops], start_ns[:n_ops], dur_ns[:n_ops]),
                 _collective_ranges(annotations, thread[n_ops:], set(thread[:n_ops].tolist()))]
    steps = _step_ranges(annotations, pid[n_ops:], step_re)
    ranges = _ranges(annotations, pid[n_ops:], thread[n_ops:], step_re)
    return {"kind": "cpu_op", "name": np.array(ops.name + annotations.name, dtype=object)[keep], "device": -1,
            "stream": thread[keep], "start_ns": start_ns[keep], "dur_ns": dur_ns[keep],
            "scope": thread_scopes(pid[keep], thread[keep], start_ns[keep], ranges),
            "msg_bytes": np.nan, "step": assign(pid[keep], start_ns[keep], steps)}


def _top_level_ops(names: list[str], pid: np.ndarray, thread: np.ndarray, start_ns: np.ndarray,
                   dur_ns: np.ndarray) -> np.ndarray:
    """Mask of the top-level CPU operators, torch.compile's wrappers (COMPILED_WRAPPERS) seen
    through: the compiled graph's kernels and library calls are the rows, not one region."""
    wrapper = np.array([COMPILED_WRAPPERS.fullmatch(n) is not None for n in names], dtype=bool)
    top = np.zeros(len(names), dtype=bool)
    if (inner := np.flatnonzero(~wrapper)).size:
        top[inner] = cpu_top_level(pid[inner], thread[inner], start_ns[inner], dur_ns[inner])
    return top


def _collective_ranges(annotations: Picked, thread: np.ndarray, op_threads: set[int]) -> np.ndarray:
    """Mask of the annotations that are a CPU backend's collective as its worker thread runs
    it (`gloo:all_reduce` on a thread with no CPU operator): from the first rank's arrival
    to the end, like a GPU collective kernel (reports/timeline/collectives.py)."""
    named = np.array([COLLECTIVE_RANGE.fullmatch(n) is not None for n in annotations.name], dtype=bool)
    return named & ~np.isin(thread, list(op_threads))


_ORDER = ("start_ns", "device", "stream")  # the rows' order


def _frame(cols: dict[str, Any], rank: int | None) -> pd.DataFrame:
    n_rows = len(cols["name"])
    order = _row_order(cols, n_rows)
    if order is not None:  # the columns put in order before the frame is made (numpy's take, not the frame's sort)
        cols = {k: _taken_rows(v, order) for k, v in cols.items()}
    df = schema.coerce({**cols, "rank": -1 if rank is None else rank, "source": "torch", "count": 1},
                       n_rows=n_rows, spec=schema.PARSED)
    if order is None:
        df = df.sort_values(list(_ORDER), kind="stable", ignore_index=True)
    return schema.validate(df, schema.PARSED)


def _taken_rows(column: Any, order: np.ndarray) -> Any:
    """A column's rows in `order`; a scalar as it is (coerce repeats it)."""
    if np.isscalar(column):
        return column
    if not isinstance(column, np.ndarray | pd.api.extensions.ExtensionArray):
        column = np.fromiter(column, dtype=object, count=len(order))  # a list (of names): its objects as they are
    return column[order]


def _row_order(cols: dict[str, Any], n_rows: int) -> np.ndarray | None:
    """The rows in order of _ORDER, stable (what the frame's sort_values gives), where each key
    is an integer array or a scalar (the parser's, no NA); else None (the frame sorts)."""
    keys = []
    for name in _ORDER:
        key = cols[name]
        if isinstance(key, int | np.integer):
            continue
        if not (isinstance(key, np.ndarray) and key.dtype.kind in "iu" and key.shape == (n_rows,)):
            return None
        keys.append(key)
    return np.lexsort(keys[::-1]) if keys else np.arange(n_rows)


def _meta(path: Path, trace: Trace, origin_ns: int) -> dict[str, Any]:
    dist = trace.distributedInfo if isinstance(trace.distributedInfo, dict) else {}
    rank = limits.whole(path, "distributedInfo.rank", dist.get("rank"), limits.INT32, optional=True)  # int32 column
    world_size = limits.whole(path, "distributedInfo.world_size", dist.get("world_size"), (1, limits.INT32[1]),
                              optional=True)
    base_ns = trace.baseTimeNanoseconds
    epoch_ns = base_ns + origin_ns if base_ns is not None else origin_ns
    versions = {"cupti": trace.cupti_version, "cuda_runtime": trace.cuda_runtime_version,
                "cuda_driver": trace.cuda_driver_version, "nccl": dist.get("nccl_version")}
    return {
        "path": str(path), "source": "torch",
        "rank": rank, "world_size": world_size,
        "distributed_backend": limits.text(path, "distributedInfo.backend", dist.get("backend"), optional=True),
        "devices": _devices(trace, path),
        "trace_start_epoch_ns": epoch_ns if epoch_ns >= _MIN_EPOCH_NS else None,
        "start_origin": "first kept row (earliest GPU activity, or CPU operator when there is none)",
        "profiler_version": None if trace.schemaVersion is None else f"kineto schema {trace.schemaVersion}",
        "versions": {k: v for k, v in versions.items() if v is not None},
    }
