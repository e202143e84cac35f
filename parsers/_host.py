"""What the host was doing, for reports/idle/idle.py: the launch call of each GPU row (start and
duration, on the events' clock) and the host frame (schema.HOST_COLUMNS) of a Kineto trace;
`is_sync` for both Kineto and nsys names.

A synchronising call blocks its thread until the GPU reaches a point: cudaDeviceSynchronize,
cudaStreamSynchronize, cudaEventSynchronize (and the driver's cuCtx/cuStream/cuEventSynchronize),
the blocking copies and fills (cudaMemcpy, cudaMemcpy2D, cuMemcpyDtoH, ..., never an *Async
one, which blocks only for pageable host memory, which the trace does not say) and cudaFree
(it synchronises the device). nsys adds a version suffix (`cudaStreamSynchronize_v3020`).
ROCm's Kineto names the same calls hip* (hipDeviceSynchronize, hipMemcpyWithStream, hipFree).
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from tracelab.core import schema

from ._kineto import joined_ids
from ._steps import is_step, name_mask, per_name

SYNC_CALL = re.compile(r"(?:cu(?:da)?|hip)(?:DeviceSynchronize|CtxSynchronize|StreamSynchronize|EventSynchronize"
                       r"|Memcpy\w*|Memset\w*|Free)(?:_v\d+)?(?:_ptds|_ptsz|_spt)?")


# the allocator's own calls (reports/memory): CUDA's (and HIP's) allocations and frees; cudaFree also synchronises
ALLOC_CALL = re.compile(r"(?:cu(?:da)?|hip)(?:Malloc\w*|MemAlloc\w*|MemCreate|MemMap|MemUnmap|MemRelease|Free\w*"
                        r"|MemFree\w*|HostAlloc|MallocHost|HostMalloc|HostFree|ExtMalloc\w*)(?:_v\d+)?(?:_ptds|_ptsz|_spt)?")


# calls that make a stream wait on the GPU for an event or a value (another stream's or a peer's work);
# the host goes on at once: what a GPU waiting with its next op queued waits on (reports/idle)
WAIT_CALL = re.compile(r"(?:cu(?:da)?|hip)StreamWait(?:Event|Value\w*)(?:_v\d+)?(?:_ptds|_ptsz|_spt)?")


def is_alloc(names: list[str]) -> np.ndarray:
    """Mask of the CUDA runtime/driver call names that allocate or free device or pinned memory."""
    return name_mask(names, lambda n: ALLOC_CALL.fullmatch(n) is not None)


def host_kinds(names: list[str]) -> np.ndarray:
    """Per runtime/driver call, its host frame kind: `sync` (is_sync), `alloc` (an allocator
    call that does not synchronise), `wait` (WAIT_CALL), else "" (not kept)."""
    return np.array(_KINDS)[_kind_codes(names)]


_KINDS = ("", "sync", "alloc", "wait")


def _kind_codes(names: list[str]) -> np.ndarray:
    """host_kinds as indices into _KINDS, each distinct name tested once."""
    def code(name: str) -> int:
        if SYNC_CALL.fullmatch(name) is not None and "Async" not in name:
            return 1
        if ALLOC_CALL.fullmatch(name) is not None:
            return 2
        return 3 if WAIT_CALL.fullmatch(name) is not None else 0
    return per_name(names, code, np.int8)


def is_sync(names: list[str]) -> np.ndarray:
    """Mask of the CUDA runtime/driver call names that block the host (module docstring)."""
    return name_mask(names, lambda n: SYNC_CALL.fullmatch(n) is not None and "Async" not in n)


def launch_columns(launch: np.ndarray, launches: Any, origin_ns: int) -> dict[str, pd.arrays.IntegerArray]:
    """Per GPU row, its launch call's start (since `origin_ns`, the events' origin) and
    duration; NA where `launch` (the call's index in `launches`, _kineto.launch_index) is -1."""
    found = launch >= 0
    start = schema.na_ints(len(launch))
    dur = start.copy()
    start[found] = np.asarray(launches.ts_ns, dtype=np.int64)[launch[found]] - origin_ns
    dur[found] = launches.dur_ns[launch[found]]
    return {"launch_start_ns": start, "launch_dur_ns": dur}


def kineto_host(calls: Any, ops: Any, ranges: Any, origin_ns: int, step_re: re.Pattern) -> pd.DataFrame:
    """The host frame of a Kineto trace: its synchronising, allocating and stream-waiting runtime/driver calls (`calls`),
    CPU operators (cpu_op) and record_function ranges (user_annotation; `step` where
    `step_re` names a step), each a _kineto_json.Picked; times since `origin_ns`."""
    tid = joined_ids((calls, "tid"), (ops, "tid"), (ranges, "tid"))  # one id space
    n_calls, n_ops = calls.size, ops.size
    call_kinds = _kind_codes(calls.name)
    # an operator named as a step is the step range that older releases filed as an operator
    # (parsers/chrome._legacy_steps has added it to the ranges): no CPU operator of its own
    op_steps = is_step(ops.name, step_re) if n_ops else np.zeros(0, dtype=bool)
    parts = [("sync", calls, tid[:n_calls], call_kinds == 1), ("alloc", calls, tid[:n_calls], call_kinds == 2),
             ("wait", calls, tid[:n_calls], call_kinds == 3),
             ("cpu_op", ops, tid[n_calls:n_calls + n_ops], ~op_steps if op_steps.any() else None),
             ("range", ranges, tid[n_calls + n_ops:], None)]
    kind, name, tids, start, dur = [], [], [], [], []
    for k, picked, t, mask in parts:
        code = schema.HOST_KINDS.index(k)
        codes = (np.where(is_step(picked.name, step_re), schema.HOST_KINDS.index("step"), code) if k == "range"
                 else np.full(len(picked.name), code))
        keep = slice(None) if mask is None else mask  # ranges: every one
        kind.append(codes[keep])
        name += picked.name if mask is None else list(map(picked.name.__getitem__, np.flatnonzero(mask).tolist()))
        tids.append(t[keep])
        start.append(np.asarray(picked.ts_ns, dtype=np.int64)[keep] - origin_ns)
        dur.append(picked.dur_ns[keep])
    kinds = pd.Categorical.from_codes(np.concatenate(kind), categories=list(schema.HOST_KINDS))
    return schema.host_frame(kinds, name, np.concatenate(tids), np.concatenate(start), np.concatenate(dur))
