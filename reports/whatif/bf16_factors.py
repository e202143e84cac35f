"""A factors file for `autocast:bf16=@FILE`: each matrix product of a trace with its own bf16/fp32
factor, timed at its own shapes on the machine that runs the change, and autocast's own host cost
per CPU operator measured on such a host. Read and checked here; the scenario applies it.

A bf16 product's speed-up depends on its shape (on a CPU, bf16 products without native support
run 5x to 100x slower by shape; on a GPU the small ones gain nothing): one factor for every
product misses the step. The file (`tracelab factors TRACE|RUN --out FILE` writes it from the trace,
tracelab/run/factors.py) holds

    {"format": FORMAT, "device": "cpu" | "cuda", "machine": "...", "measured_at": "...",
     "default": F,                       # the products' time-weighted factor: a product not listed
     "products": [{"rank": 0, "name": "aten::linear", "index": 3, "factor": 1.0, "added_ns": 2.1e6}, ...],
     "dispatch_ns_per_op": D | null,      # autocast's host cost per CPU operator the profiler records
     "dispatch_machine": "..." | null}

A product's time in bf16 is its time times `factor` plus `added_ns` (0 where absent): a GPU kernel's
is its own arithmetic, scaled; a CPU operator's holds the host's pace too, so its leaves' measured
bf16 - fp32 time is added instead (factor_products.product_change says why). A product is found by
its rank, its name and its place among the products of that name in its step (`index`, from 0):
the steps of one job repeat the same products in the same order, so the file made from one trace
of a job fits its others. Factors measured on a CPU say nothing of a GPU
trace's products (nor the reverse): refused in one line.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tracelab.core import limits
from tracelab.core.errors import UsageError

FORMAT = "tracelab bf16 factors 1"
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Factors:
    """One factors file, checked (module docstring)."""

    path: str
    device: str
    machine: str
    measured_at: str
    default: float
    products: dict[tuple[int, str, int], tuple[float, float]]  # (rank, name, index) -> (factor, added_ns)
    dispatch_ns_per_op: float | None
    dispatch_machine: str | None

    def check_device(self, cpu_only: bool) -> None:
        """Refuses factors of another device than the trace's (module docstring)."""
        trace = "cpu" if cpu_only else "cuda"
        if self.device != trace:
            raise UsageError("--scenario", f"{self.path}: factors measured on {self.device} ({self.machine}) do not "
                                           f"fit a {'CPU-only' if cpu_only else 'GPU'} trace: measure them on the "
                                           f"machine that runs it (tracelab factors)")

    def of(self, rank: np.ndarray, name: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per product, its factor and added ns (the default and 0 where the file does not list it)
        and whether listed."""
        found = [self.products.get((int(r), str(n), int(i))) for r, n, i in zip(rank, name, index)]
        listed = np.array([f is not None for f in found], dtype=bool)
        factor = np.array([self.default if f is None else f[0] for f in found], dtype=np.float64)
        return factor, np.array([0.0 if f is None else f[1] for f in found], dtype=np.float64), listed


def read(path: str, low: float, high: float) -> Factors:
    """The factors file at `path`; UsageError naming it and the reason where it cannot serve."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError("--scenario", f"autocast:bf16=@{path}: cannot read the factors file ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise UsageError("--scenario", f"autocast:bf16=@{path}: not a factors file (format {FORMAT!r} expected)")
    if doc.get("device") not in DEVICES:
        raise UsageError("--scenario", f"autocast:bf16=@{path}: device must be one of {', '.join(DEVICES)}")
    listed = doc.get("products") or []
    if not isinstance(listed, list):
        raise UsageError("--scenario", f"autocast:bf16=@{path}: products must be a list")
    products = dict(_product(path, p, low, high) for p in listed)
    dispatch = doc.get("dispatch_ns_per_op")
    if dispatch is not None and not (isinstance(dispatch, (int, float)) and math.isfinite(dispatch) and dispatch >= 0):
        raise UsageError("--scenario", f"autocast:bf16=@{path}: dispatch_ns_per_op must be a number >= 0 or null")
    return Factors(path, doc["device"], str(doc.get("machine", "?")), str(doc.get("measured_at", "?")),
                   _factor(path, doc.get("default"), low, high), products,
                   None if dispatch is None else float(dispatch), doc.get("dispatch_machine"))


def _product(path: str, p, low: float, high: float) -> tuple[tuple[int, str, int], tuple[float, float]]:
    """One product entry, checked: ((rank, name, index), (factor, added_ns))."""
    if not (isinstance(p, dict) and isinstance(p.get("rank"), int) and isinstance(p.get("index"), int)
            and isinstance(p.get("name"), str)):
        raise UsageError("--scenario", f"autocast:bf16=@{path}: each product needs an integer rank and index and a "
                                       f"name, not {str(p)[:80]}")
    added = p.get("added_ns", 0.0)
    if not isinstance(added, (int, float)) or not abs(added) <= limits.MAX_DUR_NS:  # NaN fails too
        raise UsageError("--scenario", f"autocast:bf16=@{path}: added_ns {added!r} must be a number of ns")
    return (p["rank"], p["name"], p["index"]), (_factor(path, p.get("factor"), low, high), float(added))


def _factor(path: str, value, low: float, high: float) -> float:
    if not isinstance(value, (int, float)) or not low <= value <= high:  # NaN fails too
        raise UsageError("--scenario", f"autocast:bf16=@{path}: factor {value!r} must be a number from {low:g} to {high:g}")
    return float(value)


def step_index(rank: np.ndarray, step: np.ndarray, name: np.ndarray, start_ns: np.ndarray) -> np.ndarray:
    """Per node, its place (from 0) among the nodes of its rank, step and name by start: a product's
    `index` in a factors file."""
    frame = pd.DataFrame({"r": rank, "s": step, "n": name, "t": start_ns})
    return frame.sort_values("t", kind="stable").groupby(["r", "s", "n"], sort=False).cumcount() \
        .reindex(frame.index).to_numpy(np.int64)
