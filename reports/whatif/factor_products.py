"""The products of a factors file (bf16_factors.py) from a trace's rows and their leaves, and each
product's change from its leaves' times measured fp32 against bf16 (tracelab/run/factors.py
measures; tracelab/ingest/kineto_leaves.py finds the leaves). Pure.

A product (scenarios' PRODUCTS: a CPU operator in a CPU-only trace, a GEMM kernel on a GPU) holds
leaf products (aten::mm/addmm/bmm/baddbmm at their Input Dims and Strides). Its change
(product_change): a kernel's time times its shape's bf16 over fp32 time; a CPU operator's time
with each leaf's bf16 - fp32 time added (the casts are the scenario's own). A product whose shape
was not timed takes the file's default: the listed products' time in bf16 over their time in the trace.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from tracelab.core.regexes import matches

from .autocast import PRODUCTS
from .bf16_factors import FORMAT, step_index
from .picks import regex

GPU_KINDS = ("kernel", "memcpy", "memset")


def cpu_only(events: pd.DataFrame) -> bool:
    """Whether a rank's events are CPU operators alone (no GPU activity)."""
    return not events["kind"].isin(GPU_KINDS).any()


def product_rows(events: pd.DataFrame) -> pd.DataFrame:
    """A rank's products (PRODUCTS by name or scope), with the key a factors file finds them by:
    columns rank, key (the name the scenario sees: a CPU operator's, a kernel's canonical one),
    raw_name, step, index (bf16_factors.step_index), start_ns, dur_ns."""
    cpu = cpu_only(events)
    rows = events[events["kind"] == "cpu_op"] if cpu else events[events["kind"] != "cpu_op"]
    key = rows["name" if cpu else "kernel"].astype(str).to_numpy(dtype=object)
    scope = rows["scope"].astype(str).to_numpy(dtype=object)
    hit = matches(regex(PRODUCTS), key, "factors") | matches(regex(PRODUCTS), scope, "factors")
    rows, key = rows[hit], key[hit]
    rank, step = rows["rank"].to_numpy(np.int64), rows["step"].fillna(-1).to_numpy(np.int64)
    start_ns = rows["start_ns"].to_numpy(np.int64)
    return pd.DataFrame({"rank": rank, "key": key, "raw_name": rows["name"].astype(str).to_numpy(dtype=object),
                         "step": step, "index": step_index(rank, step, key, start_ns), "start_ns": start_ns,
                         "dur_ns": rows["dur_ns"].to_numpy(np.int64)})


def products(rows: pd.DataFrame, leaves: list) -> list[dict]:
    """Per product row, its rank, name, step, index, time and leaves (kineto_leaves.leaves_of_rows)."""
    return [{"rank": int(r), "name": str(n), "step": int(s), "index": int(i), "dur_ns": int(d), "leaves": lv}
            for r, n, s, i, d, lv in zip(rows["rank"], rows["key"], rows["step"], rows["index"], rows["dur_ns"], leaves)]


def shapes_to_time(found: list[dict], max_shapes: int | None) -> list[tuple[tuple, int]]:
    """The distinct leaves (op, dims, strides) of the products with their calls, the most
    multiply-adds a step first, at most `max_shapes` (None: all)."""
    count = defaultdict(int)
    for p in found:
        for lv, _ in p["leaves"] or []:
            count[lv] += 1
    return [(lv, count[lv]) for lv in sorted(count, key=lambda lv: -count[lv] * _macs(lv))[:max_shapes]]


def _macs(leaf: tuple) -> int:
    """A leaf's multiply-adds: A's elements times B's last dimension ([.., M, K] x [.., K, N])."""
    a, b = leaf[1][-2], leaf[1][-1]
    return int(np.prod(a)) * (b[-1] if b else 1)


def product_change(product: dict, times: dict[tuple, dict]) -> tuple[float, float] | None:
    """A product's (factor, added_ns): its time in bf16 is its time times factor plus added_ns. A
    kernel (the leaf's own time): its shape's bf16 over fp32 time, nothing added. A CPU operator:
    each leaf's bf16 - fp32 time measured here added, the rest as it was: a CPU leaf's trace time
    holds the loaded host's and the profiler's pace (at one shape 4x the quiet time), which a
    ratio would multiply by the bf16 slow-down (30x) as if it were arithmetic. None where a leaf's
    shape was not timed."""
    leaves = product["leaves"] or []
    if not leaves or any(times.get(lv, {}).get("factor") is None for lv, _ in leaves):
        return None
    if any(d is None for _, d in leaves):
        return sum(times[lv]["bf16_us"] for lv, _ in leaves) / sum(times[lv]["fp32_us"] for lv, _ in leaves), 0.0
    return 1.0, sum(1e3 * (times[lv]["bf16_us"] - times[lv]["fp32_us"]) for lv, _ in leaves)


def shape_entry(leaf: tuple, calls: int, fp32_us: float, bf16_us: float) -> dict:
    """One timed shape as the file lists it."""
    op, dims, strides = leaf
    return {"op": op, "dims": [list(d) for d in dims], "strides": [list(st) if st else None for st in strides],
            "fp32_us": fp32_us, "bf16_us": bf16_us, "factor": bf16_us / fp32_us if fp32_us > 0 else None,
            "calls": calls}


def factors_doc(found: list[dict], times: dict[tuple, dict], header: dict) -> dict:
    """The factors file's content (bf16_factors.py's FORMAT): `header` (device, machine, when,
    where the dispatch cost came from, ...), then the default, each product's change (the median
    over its steps) and the shapes timed (`times`: leaf -> shape_entry)."""
    per_key = defaultdict(list)
    weighted = [0.0, 0.0]  # bf16 time, trace time of the products changed
    for p in found:
        change = product_change(p, times)
        if change is None:
            continue
        per_key[(p["rank"], p["name"], p["index"])].append(change)
        weighted[0] += max(change[0] * p["dur_ns"] + change[1], 0.0)  # as the scenario applies it: never below 0
        weighted[1] += p["dur_ns"]
    listed = [{"rank": r, "name": n, "index": i, "factor": float(np.median([f for f, _ in v])),
               "added_ns": float(np.median([a for _, a in v]))} for (r, n, i), v in sorted(per_key.items())]
    return {"format": FORMAT, **header, "default": weighted[0] / weighted[1] if weighted[1] else 1.0,
            "products_in_trace": len(found), "products_timed": sum(len(v) for v in per_key.values()),
            "products": listed, "shapes": list(times.values())}
