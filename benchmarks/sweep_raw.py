"""Facts about a trace read straight from its raw events, for sweep.py's checks.

Independent of tracelab on purpose: nothing here imports it. Kineto JSON is read with
json/gzip, nsys exports with sqlite3. Times are in ns.
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime"}
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
COPY_KINDS = {1: "HtoD", 2: "DtoH", 8: "DtoD", 10: "PtoP"}  # CUPTI's memcpy kinds
WAITS = re.compile(r"StreamWaitEvent|EventSynchronize|StreamSynchronize|DeviceSynchronize")


@dataclass
class GpuOp:
    name: str
    kind: str  # kernel, memcpy, memset
    start_ns: float
    end_ns: float
    launch_ns: float | None = None  # start of the host call that launched it
    launch_dur_ns: float | None = None


@dataclass
class Raw:
    """What a trace holds: its GPU ops, step ranges, memory samples and device names."""

    format: str
    ops: list[GpuOp] = field(default_factory=list)
    steps: dict[int, tuple[float, float]] = field(default_factory=dict)  # step -> (start, end) ns
    memory: list[tuple[float, float, float]] = field(default_factory=list)  # (ts, alloc, reserved)
    devices: list[str] = field(default_factory=list)
    device_key: str | None = None
    host_ns: dict[str, float] = field(default_factory=dict)  # host op or range name -> summed duration
    streams: set = field(default_factory=set)  # GPU streams with work
    event_waits: int = 0  # host calls that make a stream or the host wait on an event


def load(path: Path) -> Raw:
    if path.suffix == ".sqlite":
        return _nsys(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        doc = json.load(fh)
    if not isinstance(doc, dict) or "traceEvents" not in doc:
        return Raw(format="other")
    return _kineto(doc)


def _kineto(doc: dict) -> Raw:
    raw = Raw(format="kineto")
    for key in ("deviceProperties", "computeProperties"):
        if doc.get(key):
            raw.device_key = key
            raw.devices = [str(d.get("name", "")) for d in doc[key]]
            break
    launches: dict[object, tuple[float, float]] = {}
    for ev in doc["traceEvents"]:
        cat = str(ev.get("cat", "")).lower()
        name = str(ev.get("name", ""))
        if ev.get("ph") == "X" and cat in LAUNCH_CATS:
            corr = (ev.get("args") or {}).get("correlation")
            launches[corr] = (ev["ts"] * 1e3, ev.get("dur", 0) * 1e3)
            raw.event_waits += bool(WAITS.search(name))
        elif ev.get("ph") == "X" and cat in GPU_CATS:
            start = ev["ts"] * 1e3
            op = GpuOp(name, cat.replace("gpu_", ""), start, start + ev.get("dur", 0) * 1e3)
            op.launch_ns = (ev.get("args") or {}).get("correlation")  # resolved below
            raw.streams.add((ev.get("args") or {}).get("stream"))
            raw.ops.append(op)
        elif ev.get("ph") == "X" and STEP_NAME.match(name) and not cat.startswith("gpu_"):
            raw.host_ns[name] = raw.host_ns.get(name, 0.0) + ev.get("dur", 0) * 1e3
            step = int(STEP_NAME.match(name).group(1))
            raw.steps[step] = (ev["ts"] * 1e3, (ev["ts"] + ev.get("dur", 0)) * 1e3)
        elif ev.get("ph") == "X":
            raw.host_ns[name] = raw.host_ns.get(name, 0.0) + ev.get("dur", 0) * 1e3
        elif name == "[memory]":
            args = ev.get("args") or {}
            alloc = args.get("Total Allocated", args.get("Total Allocated (B)"))
            if alloc is not None and args.get("Device Type", 1) != 0:
                raw.memory.append((ev["ts"] * 1e3, float(alloc), float(args.get("Total Reserved", 0))))
    for op in raw.ops:
        call = launches.get(op.launch_ns)
        op.launch_ns, op.launch_dur_ns = call if call else (None, None)
    return raw


def _nsys(path: Path) -> Raw:
    raw = Raw(format="nsys")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    launches = {
        corr: (start, end - start)
        for corr, start, end in con.execute("select correlationId, start, end from CUPTI_ACTIVITY_KIND_RUNTIME")
    }
    names = dict(con.execute("select id, value from StringIds"))
    kernels = con.execute("select shortName, start, end, correlationId, streamId from CUPTI_ACTIVITY_KIND_KERNEL")
    for short, start, end, corr, stream in kernels:
        call = launches.get(corr, (None, None))
        raw.ops.append(GpuOp(names.get(short, str(short)), "kernel", start, end, *call))
        raw.streams.add(stream)
    calls = con.execute("select nameId from CUPTI_ACTIVITY_KIND_RUNTIME")
    raw.event_waits = sum(bool(WAITS.search(str(names.get(n, "")))) for (n,) in calls)
    for table, kind in (("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"), ("CUPTI_ACTIVITY_KIND_MEMSET", "memset")):
        if table in tables:
            direction = "copyKind" if kind == "memcpy" else "0"
            for start, end, corr, how in con.execute(f"select start, end, correlationId, {direction} from {table}"):
                name = f"Memcpy {COPY_KINDS.get(how, '')}".strip() if kind == "memcpy" else "Memset"
                raw.ops.append(GpuOp(name, kind, start, end, *launches.get(corr, (None, None))))
    if "TARGET_INFO_GPU" in tables:
        raw.devices = [r[0] for r in con.execute("select name from TARGET_INFO_GPU")]
    return raw


def union_ns(spans: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) spans."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(spans):
        if cur_end is None or start > cur_end:
            total += (cur_end - cur_start) if cur_end is not None else 0.0
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    return total + ((cur_end - cur_start) if cur_end is not None else 0.0)


def step_ops(raw: Raw, step: int) -> list[GpuOp]:
    """GPU ops launched by a host call inside the step's range."""
    start, end = raw.steps[step]
    return [op for op in raw.ops if op.launch_ns is not None and start <= op.launch_ns <= end]


def step_ops_by_time(raw: Raw, step: int) -> list[GpuOp]:
    """The other convention: GPU ops that run inside the step's range, clipped to it (an op
    launched just before the range that runs inside it counts)."""
    start, end = raw.steps[step]
    return [GpuOp(op.name, op.kind, max(op.start_ns, start), min(op.end_ns, end), op.launch_ns, op.launch_dur_ns)
            for op in raw.ops if op.end_ns > start and op.start_ns < end]


def window(ops: list[GpuOp]) -> dict:
    """Span, busy and host-late idle of a set of GPU ops.

    Host-late idle: in each gap of the GPU's busy union, the time before the host even began
    the call that launched the op ending the gap (the GPU could not have started it sooner).
    """
    if not ops:
        return {"span_ns": 0.0, "busy_ns": 0.0, "host_late_ns": 0.0, "host_caused_ns": 0.0, "kernels": 0}
    spans = sorted((op.start_ns, op.end_ns, id(op), op) for op in ops)
    busy_end, host_late, launch_wait = spans[0][1], 0.0, 0.0
    for start, end, _, op in spans[1:]:
        if start > busy_end and op.launch_ns is not None:
            host_late += max(0.0, min(start, op.launch_ns) - busy_end)
            call_end = min(start, op.launch_ns + (op.launch_dur_ns or 0.0))
            launch_wait += max(0.0, call_end - max(busy_end, op.launch_ns))  # the host still in the launch call
        busy_end = max(busy_end, end)
    return {
        "span_ns": max(e for _, e, _, _ in spans) - spans[0][0],
        "busy_ns": union_ns([(s, e) for s, e, _, _ in spans]),
        "host_late_ns": host_late,
        "host_caused_ns": host_late + launch_wait,  # before the launch call began, or while it ran
        "kernels": sum(op.kind == "kernel" for op in ops),
    }


def kernel_totals(raw: Raw) -> dict[str, float]:
    totals: dict[str, float] = {}
    for op in raw.ops:
        if op.kind == "kernel":
            totals[op.name] = totals.get(op.name, 0.0) + op.end_ns - op.start_ns
    return totals


def named_total(raw: Raw, shown: str) -> tuple[float, int]:
    """Time and calls of the GPU ops a shown (possibly shortened) name stands for: the exact name,
    the name as a whole word inside the full one (templates, `void ...(...)`), else the ops whose
    name begins with it (a name cut for width, marked '…' or '...')."""
    cut = shown.endswith(("…", "..."))
    prefix = shown.removesuffix("…").removesuffix("...")
    stem = prefix.split("::")[-1]
    pattern = re.compile(r"(^|[^A-Za-z0-9_])" + re.escape(stem) + r"($|[^A-Za-z0-9_])")
    hits = [op for op in raw.ops if op.name == shown or pattern.search(op.name)]
    if not hits or cut:
        hits = [op for op in raw.ops if op.name.startswith(prefix)] or hits
    return sum(op.end_ns - op.start_ns for op in hits), len(hits)


def unexplained_ns(ops: list[GpuOp]) -> float:
    """GPU start delays that neither the launch call nor earlier GPU work in the file explains:
    an op that starts after its launch call returned and after the GPU went idle."""
    total, busy_end = 0.0, None
    for op in sorted(ops, key=lambda o: o.start_ns):
        if op.launch_ns is not None:
            ready = op.launch_ns + (op.launch_dur_ns or 0.0)
            floor = ready if busy_end is None else max(ready, busy_end)
            total += max(0.0, op.start_ns - floor)
        busy_end = op.end_ns if busy_end is None else max(busy_end, op.end_ns)
    return total
