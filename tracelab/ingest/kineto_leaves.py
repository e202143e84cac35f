"""The leaf matrix products of a torch.profiler (Kineto JSON) trace with their shapes, found under
the rows of the events frame: what `tracelab factors` times (tracelab/run/factors.py).

A leaf is aten::mm/addmm/bmm/baddbmm with its Input Dims and Strides (record_shapes=True). The
events frame keeps no operator's shapes, so the trace's raw events are read again here, and each
row found among them by its name and start (the parser's rounding apart): in a CPU-only trace a
row is a CPU operator and its leaves are those nested in it on its thread; on a GPU a row is a
kernel and its leaf is the operator that launched it (its External id).
"""
from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from tracelab.core.errors import TraceFormatError

LEAVES = re.compile(r"aten::(mm|addmm|bmm|baddbmm)")
MATCH_TOL_NS = 2000  # a frame row and its raw event: the same name, starts this close (the parser's rounding)
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")  # the raw categories of the frame's GPU rows
# one leaf: (op, dims, strides), op without "aten::", dims and strides per operand (strides None where absent)
Leaf = tuple[str, tuple[tuple[int, ...], ...], tuple[tuple[int, ...] | None, ...]]


def leaf_of(event: dict) -> Leaf | None:
    """(op, dims, strides) of a raw leaf product event, None where it is none or its shapes are missing."""
    args = event.get("args") or {}
    dims, strides = args.get("Input Dims"), args.get("Input Strides")
    if not LEAVES.fullmatch(event.get("name", "")) or not isinstance(dims, list):
        return None
    op = event["name"].removeprefix("aten::")
    n = 3 if op in ("addmm", "baddbmm") else 2  # (bias,) A, B: the operands that make the product
    strides = strides[:n] if isinstance(strides, list) and len(strides) >= n else [None] * n
    return (op, tuple(tuple(int(x) for x in d) for d in dims[:n]),
            tuple(tuple(int(x) for x in st) if isinstance(st, list) and st else None for st in strides))


def leaves_of_rows(path: str | Path, names: list[str], starts_ns: np.ndarray, cpu_only: bool
                   ) -> list[list[tuple[Leaf, int | None]] | None]:
    """Per row (its raw name and start_ns on the frame's clock), its leaves [(leaf, dur_ns), ...]:
    a CPU operator's with their own time in the trace; a kernel's one leaf with None (the
    kernel's own time is the leaf's); None where the row or its leaves are not found."""
    raw = _raw_events(Path(path))
    kept = [e for e in raw if (e.get("cat") == "cpu_op") == cpu_only and (cpu_only or e.get("cat") in GPU_CATS)]
    if not kept:
        return [None] * len(names)
    origin_ns = min(_ts_ns(e) for e in kept)  # the frame's clock starts at these rows' first
    by_name = defaultdict(list)
    for e in kept:
        by_name[e["name"]].append(e)
    for v in by_name.values():
        v.sort(key=_ts_ns)
    starts = {n: np.array([_ts_ns(e) - origin_ns for e in v]) for n, v in by_name.items()}
    leaf_events = [(e, lv) for e in raw if e.get("cat") == "cpu_op" and (lv := leaf_of(e)) is not None]
    by_ext = {(e.get("args") or {}).get("External id"): lv for e, lv in leaf_events}
    by_tid = defaultdict(list)
    for e, lv in leaf_events:
        by_tid[e.get("tid")].append((_ts_ns(e), lv, _dur_ns(e)))
    out = []
    for name, t in zip(names, starts_ns):
        cand = starts.get(name)
        j = int(np.argmin(np.abs(cand - t))) if cand is not None and len(cand) else -1
        if j < 0 or abs(int(cand[j]) - int(t)) > MATCH_TOL_NS:
            out.append(None)
            continue
        e = by_name[name][j]
        if cpu_only:
            t0, t1 = _ts_ns(e), _ts_ns(e) + _dur_ns(e)
            out.append([(lv, d) for ts, lv, d in by_tid[e.get("tid")] if t0 <= ts <= t1] or None)
        else:
            lv = by_ext.get((e.get("args") or {}).get("External id"))
            out.append([(lv, None)] if lv is not None else None)
    return out


def _raw_events(path: Path) -> list[dict]:
    """The trace's complete events ("ph": "X") with a start; the trace was parsed (and checked) before."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as f:
            doc = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceFormatError(path, f"cannot read its events again for their shapes ({e})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise TraceFormatError(path, "no traceEvents list: not a torch.profiler (Kineto JSON) trace")
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e]


def _ts_ns(e: dict) -> int:
    return int(round(float(e["ts"]) * 1000))


def _dur_ns(e: dict) -> int:
    return int(round(float(e.get("dur", 0)) * 1000))
