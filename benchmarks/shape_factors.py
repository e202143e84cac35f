"""The factors file of `tracelab whatif --scenario autocast:bf16=@FILE` (reports/whatif/bf16_factors.py)
for one torch.profiler trace (record_shapes): each matrix product of the trace timed at its own
shapes, fp32 against bf16 operands, on this machine's device, and autocast's dispatch cost per
CPU operator (autocast_dispatch.py) measured here too.

    python benchmarks/shape_factors.py RUN/rank0.pt.trace.json.gz --out factors.json [--no-dispatch]

A product (the scenario's PRODUCTS: a CPU operator in a CPU-only trace, a GEMM kernel on a GPU)
holds leaf products: aten::mm/addmm/bmm/baddbmm with their Input Dims and Strides (in a CPU-only trace the
leaves nested in the operator, on its thread; on a GPU the operator that launched the kernel, by
External id). Its change (product_change): a kernel's time times its shape's bf16 over fp32 time;
a CPU operator's time with each leaf's bf16 - fp32 time added (the casts are the scenario's own).
Each distinct shape is timed a few calls (SHAPE_CALLS), at most MAX_SHAPES shapes (the most
multiply-adds a step first); a product with a shape not timed takes the file's default: the listed
products' time in bf16 over their time in the trace.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from tracelab.reports.whatif.bf16_factors import FORMAT, step_index
from tracelab.reports.whatif.scenarios import PRODUCTS
from tracelab.workloads.harness import time_each_us

LEAVES = re.compile(r"aten::(mm|addmm|bmm|baddbmm)")
WARMUP_CALLS, SHAPE_CALLS = 2, 5
MAX_SHAPES = 64
MATCH_TOL_NS = 2000  # a frame row and its raw event: the same name, starts this close (the parser's rounding)
DTYPES = {"float": torch.float32, "c10::BFloat16": torch.bfloat16, "c10::Half": torch.float16}


def time_shape_us(op: str, dims: tuple, dtype: torch.dtype, device: torch.device, strides: tuple | None = None) -> float:
    """The median time of one leaf product at `dims` and `strides` (its Input Dims and Strides: a
    transposed operand takes another kernel, in bf16 on a CPU up to 30x faster) with operands of `dtype`."""
    strides = strides or (None,) * len(dims)
    tensors = [_tensor(d, st, dtype, device) if d else None for d, st in zip(dims, strides)]
    fn = {"mm": lambda a, b: torch.mm(a, b), "bmm": lambda a, b: torch.bmm(a, b),
          "addmm": lambda c, a, b: torch.addmm(c, a, b) if c is not None else torch.mm(a, b),
          "baddbmm": lambda c, a, b: torch.baddbmm(c, a, b) if c is not None else torch.bmm(a, b)}[op]
    for _ in range(WARMUP_CALLS):
        fn(*tensors)
    return statistics.median(time_each_us(lambda: fn(*tensors), SHAPE_CALLS, device))


def _tensor(dims: tuple, strides: tuple | None, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if strides is None or len(strides) != len(dims):
        return torch.randn(*dims, device=device, dtype=dtype)
    return torch.empty_strided(dims, strides, device=device, dtype=dtype).normal_()


def leaf_of(event: dict) -> tuple | None:
    """(op, dims, strides) of a raw leaf product event, None where it is none or its shapes are missing."""
    args = event.get("args") or {}
    dims, strides = args.get("Input Dims"), args.get("Input Strides")
    if not LEAVES.fullmatch(event.get("name", "")) or not isinstance(dims, list):
        return None
    op = event["name"].removeprefix("aten::")
    n = 3 if op in ("addmm", "baddbmm") else 2
    strides = strides[:n] if isinstance(strides, list) and len(strides) >= n else [None] * n
    return (op, tuple(tuple(int(x) for x in d) for d in dims[:n]),
            tuple(tuple(int(x) for x in st) if isinstance(st, list) and st else None for st in strides))


def _raw_events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return [e for e in doc.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e]


def _ts_ns(e: dict) -> int:
    return int(round(float(e["ts"]) * 1000))


def trace_products(path: Path) -> tuple[bool, list[dict]]:
    """(cpu_only, products): per product node of the trace's graph its rank, name, step, index,
    time and leaves (module docstring)."""
    import tracelab

    profile = tracelab.load(str(path))
    ev = profile.events
    cpu_only = not ev["kind"].isin(("kernel", "memcpy", "memset")).any()
    rows = ev[ev["kind"] == "cpu_op"] if cpu_only else ev[ev["kind"] != "cpu_op"]
    names = rows["name" if cpu_only else "kernel"].astype(str).to_numpy(dtype=object)
    regex = re.compile(PRODUCTS)
    hit = np.array([bool(regex.search(n) or regex.search(s)) for n, s in zip(names, rows["scope"].astype(str))], bool)
    rows, names = rows[hit], names[hit]
    if not len(rows):
        return cpu_only, []
    raw = _raw_events(path)
    kept = [e for e in raw if (e.get("cat") == "cpu_op") == cpu_only and
            (cpu_only or e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))]
    origin_ns = min(_ts_ns(e) for e in kept)
    rank = rows["rank"].to_numpy(np.int64)
    step = rows["step"].fillna(-1).to_numpy(np.int64)
    start = rows["start_ns"].to_numpy(np.int64)
    index = step_index(rank, step, names, start)
    leaves = _leaves_of(raw, kept, rows, origin_ns, cpu_only)
    return cpu_only, [{"rank": int(r), "name": str(n), "step": int(s), "index": int(i), "dur_ns": int(d), "leaves": lv}
                      for r, n, s, i, d, lv in zip(rank, names, step, index, rows["dur_ns"], leaves)]


def _leaves_of(raw: list[dict], kept: list[dict], rows, origin_ns: int, cpu_only: bool) -> list[list | None]:
    """Per product row, its leaves [((op, dims, strides), dur_ns or None), ...] (a CPU operator's
    leaves with their own time in the trace; a kernel's one leaf, its own); None where not found."""
    by_name = defaultdict(list)
    for e in kept:
        by_name[e["name"]].append(e)
    for v in by_name.values():
        v.sort(key=_ts_ns)
    starts = {n: np.array([_ts_ns(e) - origin_ns for e in v]) for n, v in by_name.items()}
    leaf_events = [(e, leaf_of(e)) for e in raw if e.get("cat") == "cpu_op"]
    leaf_events = [(e, lv) for e, lv in leaf_events if lv is not None]
    by_ext = {(e.get("args") or {}).get("External id"): lv for e, lv in leaf_events}
    by_tid = defaultdict(list)
    for e, lv in leaf_events:
        by_tid[e.get("tid")].append((_ts_ns(e), lv, int(round(float(e.get("dur", 0)) * 1000))))
    out = []
    for name, t in zip(rows["name"].astype(str), rows["start_ns"].to_numpy(np.int64)):
        cand = starts.get(name)
        j = int(np.argmin(np.abs(cand - t))) if cand is not None and len(cand) else -1
        if j < 0 or abs(int(cand[j]) - int(t)) > MATCH_TOL_NS:
            out.append(None)
            continue
        e = by_name[name][j]
        if cpu_only:
            t0, t1 = _ts_ns(e), _ts_ns(e) + int(round(float(e.get("dur", 0)) * 1000))
            out.append([(lv, d) for ts, lv, d in by_tid[e.get("tid")] if t0 <= ts <= t1] or None)
        else:  # the kernel is the product's arithmetic: its own time is the leaf's
            lv = by_ext.get((e.get("args") or {}).get("External id"))
            out.append([(lv, None)] if lv is not None else None)
    return out


def _macs(leaf: tuple) -> int:
    dims = leaf[1]
    a, b = dims[-2], dims[-1]
    return int(np.prod(a)) * (b[-1] if b else 1)


def shape_times(products: list[dict], device: torch.device) -> dict[tuple, dict]:
    """Each distinct leaf shape's fp32 and bf16 time (us), at most MAX_SHAPES, most work a step first."""
    count = defaultdict(int)
    for p in products:
        for lv, _ in p["leaves"] or []:
            count[lv] += 1
    chosen = sorted(count, key=lambda lv: -count[lv] * _macs(lv))[:MAX_SHAPES]
    out = {}
    for op, dims, strides in chosen:
        fp32, bf16 = (time_shape_us(op, dims, dt, device, strides) for dt in (torch.float32, torch.bfloat16))
        out[(op, dims, strides)] = {"op": op, "dims": [list(d) for d in dims],
                                    "strides": [list(st) if st else None for st in strides], "fp32_us": fp32,
                                    "bf16_us": bf16, "factor": bf16 / fp32 if fp32 > 0 else None,
                                    "calls": count[(op, dims, strides)]}
    return out


def product_change(product: dict, times: dict[tuple, dict]) -> tuple[float, float] | None:
    """A product's (factor, added_ns): its time in bf16 is its time times factor plus added_ns. A
    kernel (the leaf's own time): its shape's bf16 over fp32 time, nothing added. A CPU operator:
    each leaf's bf16 - fp32 time measured here added, the rest as it was: a CPU leaf's trace time
    holds the loaded host's and the profiler's pace (at one shape here 4x the quiet time), which a
    ratio would multiply by the bf16 slow-down (30x) as if it were arithmetic."""
    leaves = product["leaves"] or []
    if not leaves or any(times.get(lv, {}).get("factor") is None for lv, _ in leaves):
        return None
    if any(d is None for _, d in leaves):
        return sum(times[lv]["bf16_us"] for lv, _ in leaves) / sum(times[lv]["fp32_us"] for lv, _ in leaves), 0.0
    return 1.0, sum(1e3 * (times[lv]["bf16_us"] - times[lv]["fp32_us"]) for lv, _ in leaves)


def factors_doc(path: Path, device: torch.device, dispatch: dict | None) -> dict:
    """The factors file's content (reports/whatif/bf16_factors.py) for the trace at `path`."""
    cpu_only, products = trace_products(path)
    if cpu_only != (device.type == "cpu"):
        raise SystemExit(f"shape_factors.py: {path} is a {'CPU-only' if cpu_only else 'GPU'} trace and this run's "
                         f"device is {device.type}: its factors must be measured on the device that runs it")
    times = shape_times(products, device)
    per_key = defaultdict(list)
    weighted = [0.0, 0.0]
    for p in products:
        change = product_change(p, times)
        if change is None:
            continue
        per_key[(p["rank"], p["name"], p["index"])].append(change)
        weighted[0] += change[0] * p["dur_ns"] + change[1]
        weighted[1] += p["dur_ns"]
    return {"format": FORMAT, "device": device.type, "machine": machine(device),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_avg_1m": os.getloadavg()[0],
            "torch": torch.__version__, "trace": str(path),
            "default": weighted[0] / weighted[1] if weighted[1] else 1.0,
            "products_in_trace": len(products), "products_timed": sum(len(v) for v in per_key.values()),
            "products": [{"rank": r, "name": n, "index": i, "factor": float(np.median([f for f, _ in v])),
                          "added_ns": float(np.median([a for _, a in v]))} for (r, n, i), v in sorted(per_key.items())],
            "shapes": list(times.values()),
            "dispatch_ns_per_op": dispatch["dispatch_ns_per_op"] if dispatch else None,
            "dispatch_machine": dispatch["machine"] if dispatch else None, "dispatch": dispatch}


def machine(device: torch.device) -> str:
    """The device in words: the GPU's name, or the CPU's host and processor, and the threads used."""
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} on {platform.node()}"
    return f"CPU {platform.processor() or platform.machine()} on {platform.node()}, {torch.get_num_threads()} thread(s)"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--no-dispatch", action="store_true", help="leave autocast's dispatch cost out (not measured)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads (the changes' runs use one per rank)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from autocast_dispatch import measure

    dispatch = None if a.no_dispatch else measure(device)
    doc = factors_doc(a.trace, device, dispatch)
    a.out.write_text(json.dumps(doc, indent=1, allow_nan=False))
    print(f"{a.out}: {doc['products_timed']} of {doc['products_in_trace']} products at {len(doc['shapes'])} shapes, "
          f"default {doc['default']:.3g}, dispatch {doc['dispatch_ns_per_op']} ns per op, on {doc['machine']}")


if __name__ == "__main__":
    main()
