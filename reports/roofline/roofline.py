"""Was the GPU time well spent: achieved FLOP/s and bytes/s per kernel, scope or op class,
against the device's roofline.

Work comes from the trace only (the events' flops, bytes and dtype: parsers/_shapes.py for
Kineto, proton's metrics, memcpy/memset sizes); rows whose work is unknown stay unknown,
never zero, and `known_ns` says how much of a group's time the figures cover.

Per event row, the least time the device allows is
    min_ns = max(flops / peak FLOP/s of its dtype, traffic bytes / bandwidth)
over the terms that are known, where traffic is a kernel's or memset's bytes against HBM, a
device-to-device copy's twice its size (read and written) against HBM, and a copy to or from
the host its size against the host link. The `bytes` column is that traffic (a device-to-device
copy's read plus written), so `gb_s` and `roofline_frac` count bytes one way: gb_s / bandwidth is
the memory term of roofline_frac. A group sums its rows: achieved rates over the
time of the rows that carry that work, `roofline_frac` = min_ns / known_ns (achieved over
attainable), `lost_ns` = known_ns - the rows' least times (the time beyond what the roofline
allows, each row never under the fastest op of its kind in the rank's trace: least_time_ns; what
optimising the group could win at most), `bound` from the group's intensity against the
ridge point (peak FLOP/s / bandwidth) of its dtype: compute or memory; rows with only bytes
(elementwise, reductions, copies) are memory-bound by nature; with only FLOPs, unknown. A
group whose rows with a roof cover less than half its time gets no bound and no share (its
lost_ns still counts the rows that have one).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracelab.core.devices import Device
from tracelab.core.schema import RankData

from ..roofs import least_time_ns, min_ns_of, traffic

BY_CHOICES = ("kernel", "scope", "op_class")
GB_S_HEADER = "GB/s r+w"  # the column's convention, said where it is shown
GB_S_NOTE = ("GB/s: bytes read + written over the time (a device-to-device copy twice its size, a copy to or "
             "from the host its size over the host link), as the roof fraction counts them")
MEMORY_CLASSES = ("elementwise", "reduction", "memory")
COLUMNS = ["rank", "key", "dur_ns", "count", "known_ns", "flops", "bytes", "tflop_s", "gb_s", "intensity",
           "bound", "roofline_frac", "min_ns", "lost_ns", "dtype"]


@dataclass
class Roofline:
    """One rank's rows (COLUMNS, sorted by lost_ns), and what they cover."""

    rows: pd.DataFrame
    device: Device | None
    device_from: str
    gpu_ns: int
    known_ns: int
    missing_hint: str = ""  # how the trace's source would record the work it lacks (MISSING_WORK)
    rank: int | None = None  # None: no events at all
    run: str | None = None  # the input it came from, where several runs are shown (their ranks repeat)


# per source, how its traces would give the kernels' work (FLOPs and bytes) they lack
MISSING_WORK = {
    "torch": "torch.profiler(record_shapes=True) would give the aten ops' shapes, and with them the work",
    "nsys": ("torch.autograd.profiler.emit_nvtx(record_shapes=True) would give the ops' sizes (FLOPs; bytes need "
             "dtypes, which NVTX does not carry)"),
    "proton": ("proton's flops/bytes metrics would give it: a Triton kernel's launch_metadata hook, or "
               "proton.scope(name, {'flops16': n, 'bytes': b}) around the work")}


def with_scope_work(events: pd.DataFrame, scope_metrics: dict[str, dict[str, Any]] | None) -> pd.DataFrame:
    """Proton's scope-level flops/bytes (meta.scope_metrics, a user's proton.scope(name,
    {"flops16": n})) spread over the kernel rows under that scope that have none of their own,
    in proportion to their time, as an operator's work is spread over its kernels: for the
    roofline by scope, where the scope's rows add up to its metrics again (by kernel every
    kernel of the scope would get the scope's rate, which says nothing about the kernel). The
    rates are then over the scope's whole kernel time, elementwise kernels included."""
    if not scope_metrics:
        return events
    out = events.copy()
    for scope, metrics in scope_metrics.items():
        under = (out["scope"] == scope) | out["scope"].str.startswith(scope + "/")
        for column in ("flops", "bytes"):
            rows = under & out[column].isna()
            value, total = metrics.get(column), out.loc[rows, "dur_ns"].sum()
            if isinstance(value, (int, float)) and rows.any() and total > 0:
                out.loc[rows, column] = value * out.loc[rows, "dur_ns"] / total
        if metrics.get("dtype"):
            out.loc[under & (out["dtype"] == ""), "dtype"] = metrics["dtype"]
    return out


def _row_bound(events: pd.DataFrame, compute_ns: np.ndarray, memory_ns: np.ndarray) -> np.ndarray:
    memoryish = events["op_class"].isin(MEMORY_CLASSES).to_numpy() | (events["kind"] != "kernel").to_numpy()
    bound = np.empty(len(events), dtype=object)
    bound.fill("unknown")  # one str, not one per row (np.full's)
    both = ~np.isnan(compute_ns) & ~np.isnan(memory_ns)
    bound[both] = np.where(compute_ns[both] >= memory_ns[both], "compute", "memory")
    bound[np.isnan(compute_ns) & ~np.isnan(memory_ns) & memoryish] = "memory"
    return bound


def roofline(events: pd.DataFrame, device: Device | None, by: str = "kernel",
             device_from: str = "unknown") -> Roofline:
    """The rows of one rank's events grouped by `by` (module docstring); pure."""
    on = (events["kind"] != "cpu_op").to_numpy()
    gpu = events if on.all() else events[on]  # most traces: every row is GPU work, no copy
    dtype, moved = gpu["dtype"].astype(str).to_numpy(), traffic(gpu)
    min_ns, compute_ns, memory_ns = min_ns_of(gpu, device, dtype, moved)
    known = (~gpu["flops"].isna() | ~gpu["bytes"].isna()).to_numpy()
    dur = gpu["dur_ns"].to_numpy(dtype=np.float64)
    hbm, host = moved
    rank = int(events["rank"].iloc[0]) if len(events) else None
    frame = {  # the rows' columns as arrays, grouped by key in _grouped (no frame of the rows is made)
        "key": gpu[by].astype(str).to_numpy(), "dur_ns": dur, "count": gpu["count"].to_numpy(),
        "known_ns": np.where(known, dur, 0.0),
        "flops": gpu["flops"].to_numpy(dtype=np.float64), "bytes": np.where(np.isnan(hbm), host, hbm),
        "flops_ns": np.where(gpu["flops"].notna(), dur, 0.0), "bytes_ns": np.where(gpu["bytes"].notna(), dur, 0.0),
        "min_ns": min_ns, "least_ns": least_time_ns(gpu, min_ns), "min_known_ns": np.where(np.isnan(min_ns), 0.0, dur),
        "bound": _row_bound(gpu, compute_ns, memory_ns), "dtype": dtype}
    rows = _grouped(frame, 0 if rank is None else rank)
    source = str(events["source"].iloc[0]) if len(events) else ""
    return Roofline(rows, device, device_from, int(dur.sum()), int(pd.Series(frame["known_ns"]).sum()),
                    MISSING_WORK.get(source, ""), rank)


def _dominant(codes: np.ndarray, values: np.ndarray, dur: np.ndarray, n_keys: int) -> np.ndarray:
    """Per key code (0..n_keys-1), the value over the most time (ties: the first in order; None
    where the key has no row)."""
    value_codes, names = pd.factorize(values)
    width = len(names) + 1  # a (key, value) pair as one integer: value code -1 (a missing value) is 0
    weights = pd.Series(dur).groupby(codes * width + (value_codes + 1), sort=False).sum()  # pairs in order of appearance
    key_of = weights.index.to_numpy() // width
    value_of = weights.index.to_numpy() % width - 1
    order = np.argsort(-weights.to_numpy(), kind="stable")  # most time first, ties in order
    key_sorted = key_of[order]
    first = np.unique(key_sorted, return_index=True)[1]
    out = np.full(n_keys, None, dtype=object)
    out[key_sorted[first]] = np.asarray(names, dtype=object)[value_of[order][first]]
    return out


def _grouped(frame: dict[str, np.ndarray], rank: int) -> pd.DataFrame:
    """The rows' columns (`frame`) grouped by key (COLUMNS), the most lost first."""
    codes, keys = pd.factorize(frame["key"].astype(object))  # in order of appearance, as groupby(sort=False)
    both = ~np.isnan(frame["flops"]) & ~np.isnan(frame["bytes"])
    sums = pd.DataFrame({**{c: frame[c] for c in ("dur_ns", "count", "known_ns", "flops_ns", "bytes_ns", "min_known_ns",
                                                   "flops", "bytes", "min_ns", "least_ns")},
                         "flops_both": np.where(both, frame["flops"], np.nan),
                         "bytes_both": np.where(both, frame["bytes"], np.nan)})
    # one pass: min_count=1 leaves the columns without NaN as a plain sum, and is NaN for a key
    # with no flops (bytes, roof, row with both) known; NaN rows are skipped, as their subset's sum
    out = sums.groupby(codes, sort=False).sum(min_count=1)
    col = {c: out[c].to_numpy() for c in out.columns if not c.endswith("_both")}
    dur = frame["dur_ns"]
    bound = frame["bound"]
    judged = bound != "unknown"
    bounds = _dominant(codes[judged], bound[judged], dur[judged], len(keys))
    bounds[pd.isna(bounds)] = "unknown"
    dtypes = _dominant(codes, frame["dtype"].astype(object), dur, len(keys))
    min_ns, min_known_ns = col["min_ns"], col["min_known_ns"]
    roofline_frac = min_ns / np.where(min_known_ns > 0, min_known_ns, np.nan)
    # a group mostly of rows without a roof (a GEMM whose dtype the trace omits, beside cuBLAS's
    # memsets) is not judged by the few rows that have one
    partial = min_known_ns < 0.5 * col["dur_ns"]
    bounds[partial] = "unknown"
    both_bytes = out["bytes_both"].to_numpy()
    lost = min_known_ns - col.pop("least_ns")  # beyond the roofline, and beyond the fastest op of each kind
    got = {"rank": np.full(len(keys), rank, dtype=np.int64), "key": np.asarray(keys, dtype=object), **col,
           "tflop_s": col["flops"] / np.where(col["flops_ns"] > 0, col["flops_ns"], np.nan) / 1e3,
           "gb_s": col["bytes"] / np.where(col["bytes_ns"] > 0, col["bytes_ns"], np.nan),
           "intensity": out["flops_both"].to_numpy() / np.where(both_bytes > 0, both_bytes, np.nan),
           "bound": bounds, "roofline_frac": np.where(partial, np.nan, roofline_frac), "lost_ns": lost, "dtype": dtypes}
    # the most lost first, then the longest; NaN last; ties as they came (sort_values' stable order)
    order = np.lexsort((_descending(col["dur_ns"]), _descending(lost)))
    return pd.DataFrame({c: got[c][order] for c in COLUMNS})


def _descending(values: np.ndarray) -> np.ndarray:
    """A float sort key putting `values` largest first and NaN last."""
    values = values.astype(np.float64)
    return np.where(np.isnan(values), np.inf, -values)


def to_records(result: Roofline, top: int | None = None) -> list[dict[str, Any]]:
    """JSON-ready rows: NaN as None, integers for ns."""
    rows = result.rows.head(top) if top else result.rows
    out = []
    for row in rows.to_dict("records"):
        out.append({k: (None if isinstance(v, float) and math.isnan(v) else
                        int(v) if k.endswith("_ns") or k in ("count", "rank") else v) for k, v in row.items()})
    return out


class RankRoofline:
    """A rank's digest (reports/topics.py): its roofline by kernel, made where the rank was
    parsed: the rows, the device and where it came from, the time covered and how the missing
    work would be recorded. The device is `device` (report --device) where given, else found as
    `tracelab roofline` finds it (tracelab/ingest/runfolder.meta_device: the trace, else run.json)."""

    def __init__(self, device: Device | None = None):
        self.device = device

    def __call__(self, rank: RankData) -> dict[str, Any]:
        from tracelab.ingest.runfolder import meta_device

        device, found = (self.device, "option") if self.device is not None else meta_device(rank.meta)
        result = roofline(rank.events, device, "kernel", found)
        return {"rows": result.rows, "device": device, "device_from": found, "gpu_ns": result.gpu_ns,
                "known_ns": result.known_ns, "missing_hint": result.missing_hint}


rank_roofline = RankRoofline()


DIGESTS = {"roofline": rank_roofline}  # roofline's per-rank digest (reports/topics.py)
