"""Inductor kernels attributed to the model's modules, from the map a compiled run wrote.

`tracelab run decode --compile` writes `rank{r}.provenance.json` beside the trace at compile
time (workloads/provenance.py): per kernel Inductor generated, the post-grad FX nodes fused
into it, counted by the module each came from (`layers.3.attention.wqkv`). A kernel is given
the deepest module holding more than half of its nodes (counting its submodules' nodes), so a
kernel fusing an attention's ops with one view of the next layer's input is the attention's,
and one fusing two sibling modules' work in equal parts is their parent's. `apply` puts that
module in the events' `module` column and at the end of their `scope`
(`decode_one_token/layers.3.attention`), dropping Inductor's own `## Call CompiledFxGraph
<hash> ##` range, whose hash changes from compile to compile. Rows are matched by name: a
Triton kernel's name is Inductor's, a C++ kernel's is `graph_N_` + Inductor's. Kernels
Inductor hands to a library (GEMMs, SDPA) are matched on the CPU, where the trace names the
aten op (`aten::mm`) inside Inductor's call range; on a GPU they run as cuBLAS or flash
kernels and stay unattributed, as does everything that was not compiled.

A map of version 2 also holds each Triton kernel's work per call as Inductor estimated it at
compile time (`"work"`: bytes, FLOPs where it counted some, the dtype of its pointers;
workloads/provenance.py). `with_work` gives it to the rows of those kernels whose work the trace
did not give (times the row's count, for proton's aggregates): under CUDA graphs the kernels'
launches, and so their shapes, are not in the trace at all.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracelab.core.errors import TraceFormatError
from tracelab.core.note import Note

SUFFIX = ".provenance.json"
_CPP_PREFIX = re.compile(r"graph_\d+_")
_COMPILED_RANGE = re.compile(r"## Call CompiledFxGraph \S* ##")
_EXTERN = re.compile(r"extern_kernels\.(\w+)|torch\.ops\.aten\.(\w+)\.\w+")
_RANK = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def find(trace: Path) -> Path | None:
    """The provenance file of a trace: `rank{N}.provenance.json` beside it (N from the trace's
    name), else the only `*.provenance.json` in its folder; None when there is none."""
    folder = trace.parent
    if (m := _RANK.search(trace.name)) and (own := folder / f"rank{m.group(1)}{SUFFIX}").is_file():
        return own
    found = sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []
    return found[0] if len(found) == 1 and not m else None


def read(path: Path) -> dict[str, list[str]]:
    """kernel name -> the module of each of its calls in one run of its compiled graph, in call
    order (one module when every call has the same, or when the name is in several graphs: then
    their deepest common module); TraceFormatError when the file is not a provenance file."""
    try:
        graphs = json.loads(path.read_text())["graphs"]
        per_graph = [_calls(graph) for graph in graphs]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise TraceFormatError(path, f"not a tracelab provenance file ({type(e).__name__}: {e})") from None
    out: dict[str, list[str]] = {}
    for name in {n for calls in per_graph for n in calls}:
        found = [calls[name] for calls in per_graph if name in calls]
        owners = found[0] if len(found) == 1 else [_common([m for f in found for m in f])]
        out[name] = owners if len(set(owners)) > 1 else owners[:1]
    return out


def read_work(path: Path) -> dict[str, dict[str, Any]]:
    """kernel name -> {"bytes", "flops", "dtype"} of one call (each present only where known);
    {} for a map without work (version 1, or C++ kernels only); TraceFormatError for a value
    that is not a non-negative number (or a dtype that is not a string)."""
    try:
        work = json.loads(path.read_text()).get("work", {})
        items = work.items()
    except (OSError, ValueError, AttributeError) as e:
        raise TraceFormatError(path, f"not a tracelab provenance file ({type(e).__name__}: {e})") from None
    out = {}
    for name, entry in items:
        if not isinstance(entry, dict):
            raise TraceFormatError(path, f"work of {str(name)[:80]!r}: not an object")
        for key in ("bytes", "flops"):
            value = entry.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
                                      or value != value):
                raise TraceFormatError(path, f"work of {str(name)[:80]!r}, {key}: {value!r} is not a count")
        if not isinstance(entry.get("dtype", ""), str):
            raise TraceFormatError(path, f"work of {str(name)[:80]!r}, dtype: not a string")
        out[str(name)] = entry
    return out


def with_work(events: pd.DataFrame, work: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Events with the map's work per call, times each row's count, in the flops, bytes and
    dtype of the rows of those kernels that have none from the trace (NaN, "")."""
    if not work or not len(events):
        return events
    names = events["name"].astype(str).str.replace(_CPP_PREFIX, "", n=1, regex=True)
    hit = names.isin(work.keys()).to_numpy()
    if not hit.any():
        return events
    out = events.copy()
    count = out["count"].to_numpy(dtype=np.float64)
    for column in ("flops", "bytes"):
        per_call = names.map(lambda n: work.get(n, {}).get(column)).astype("float64").to_numpy()
        fill = hit & np.isnan(out[column].to_numpy(dtype=np.float64)) & ~np.isnan(per_call)
        out.loc[fill, column] = per_call[fill] * count[fill]
    dtype = names.map(lambda n: work.get(n, {}).get("dtype", "")).astype(str).to_numpy()
    fill = hit & (out["dtype"].astype(str).to_numpy() == "") & (dtype != "")
    out.loc[fill, "dtype"] = dtype[fill]
    return out


def _calls(graph: list[dict]) -> dict[str, list[str]]:
    calls: dict[str, list[str]] = {}
    for kernel in graph:
        calls.setdefault(_trace_name(str(kernel["name"])), []).append(owner(kernel["modules"]))
    return calls


def _trace_name(name: str) -> str:
    """The name a CPU trace gives a library call the generated code makes (`extern_kernels.mm`,
    `torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default` -> `aten::mm`, ...)."""
    found = _EXTERN.fullmatch(name)
    return f"aten::{found.group(1) or found.group(2)}" if found else name


def _common(paths: list[str]) -> str:
    """The deepest module holding every one of these paths."""
    split = [p.split(".") if p else [] for p in paths]
    common = []
    for parts in zip(*split):
        if len(set(parts)) > 1:
            break
        common.append(parts[0])
    return ".".join(common)


def owner(modules: dict[str, Any]) -> str:
    """The deepest module holding more than half of the nodes (module path -> node count,
    "" the model itself), counting each module's submodules' nodes as its own."""
    total = sum(int(n) for n in modules.values())
    held: dict[str, int] = {}
    for path, n in modules.items():
        parts = path.split(".") if path else []
        for depth in range(len(parts) + 1):
            prefix = ".".join(parts[:depth])
            held[prefix] = held.get(prefix, 0) + int(n)
    majority = [p for p, n in held.items() if 2 * n > total]
    return max(majority, key=lambda p: (p.count(".") + bool(p), p), default="")


def apply(events: pd.DataFrame, kernels: dict[str, list[str]]) -> tuple[pd.DataFrame, list[Note]]:
    """Events with `module` set and appended to `scope` for the rows whose name is a kernel of
    the map (module docstring), and notes. A kernel called k times per run of its graph, from
    different modules, gives its i-th row (in start order) the module of call i mod k: exact
    for whole runs of the graph; a count that is no multiple of k is noted. Rows without a
    start (proton's aggregates) get the calls' deepest common module."""
    if not kernels or not len(events):
        return events, []
    names = events["name"].astype(str).str.replace(_CPP_PREFIX, "", n=1, regex=True)
    library = names.str.startswith("aten::") & ~events["scope"].astype(str).str.contains(_COMPILED_RANGE)
    names = names.where(~library, "")  # an aten op counts only inside a compiled graph's call
    module = pd.Series("", index=events.index, dtype=object)
    notes = []
    for name, rows in names[names.isin(kernels.keys())].groupby(names, sort=False).groups.items():
        owners = kernels[name]
        timed = len(owners) > 1 and events.loc[rows, "start_ns"].notna().all()
        order = events.loc[rows, "start_ns"].sort_values(kind="stable").index if timed else rows
        module[order] = [owners[i % len(owners)] for i in range(len(order))] if timed else _common(owners)
        if timed and len(order) % len(owners):
            notes.append(Note("modules_may_shift", {"kernel": name, "runs": len(order), "calls_per_graph": len(owners)}))
    return _with_modules(events, module), notes


def _with_modules(events: pd.DataFrame, module: pd.Series) -> pd.DataFrame:
    hit = (module != "").to_numpy()
    if not hit.any():
        return events
    out = events.copy()
    scope = out.loc[hit, "scope"].astype(str).str.replace(_COMPILED_RANGE, "", regex=True)
    scope = scope.str.replace(r"//+", "/", regex=True).str.strip("/")
    found = module[hit].astype(str)
    out.loc[hit, "scope"] = np.where(scope == "", found, scope + "/" + found)
    out.loc[hit, "module"] = found.to_numpy()
    return out
