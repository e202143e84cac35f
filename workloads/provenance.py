"""Inductor's kernel-to-module map, written at compile time into the run folder.

Inductor names each kernel it generates (`triton_red_fused_mm_10`, `cpp_fused_add_mean_0`)
after the operations fused into it, never the module. Its provenance tracking
(`torch._inductor.config.trace.provenance_tracking_level = 1`) records, per generated kernel,
the post-grad FX nodes it was made from, and emits that map as the structured-trace artifact
`inductor_provenance_tracking_node_mappings`; the post-grad nodes carry the module they came
from (`nn_module_stack`) and their aten op. `record(out_dir, rank)` turns both on for the
compiles that follow: a custom post-grad pass notes each node's module path and op, a handler
on the structured-trace log takes the map, and `write()` leaves

    rank{r}.provenance.json  {"version": 1, "torch": "2.x", "graphs": [[{"name": kernel, "modules":
                              {path: nodes}, "module_types": {path: class}, "aten": [op, ...]}, ...], ...]}

one list per compiled graph, its kernels in the order the generated code calls them (Inductor's
provenance handles). A kernel whose code serves several layers is generated once and called
once per layer: its entries share the name, in call order.

Beside the map, `"work": {kernel: {"bytes": n, "flops": n, "dtype": "bf16"}}`: what one call of
each Triton kernel moves and computes, as Inductor estimated it while generating the kernel
(`kernel_num_gb` and `kernel_flop` in the kernel's `inductor_meta`, written with
`torch._inductor.config.benchmark_kernel`, set here; read from the generated code Inductor logs
as `inductor_output_code`), and the floating type of most of its pointer arguments. FLOPs only
where Inductor counted some (its matmul-like nodes; 0 means none counted, left out). C++
kernels get none: Inductor estimates no work for them. `benchmark_kernel` adds a benchmark
harness to each kernel's source and a line on stderr per compiled graph; the kernels run as
they would without it.

beside the trace, read by tracelab (tracelab/provenance.py). `name` is the kernel's name as
Inductor made it, which a GPU trace shows as is (Triton) and a CPU trace as `graph_N_name`
(with `torch._inductor.config.cpp.enable_kernel_profile`, set here, every C++ kernel is a
record_function range). Costs: the FX graph cache is bypassed (the pass must see the nodes)
and every structured-trace artifact is formatted while compiling.
"""
from __future__ import annotations

import json
import logging
import re
from collections import Counter
from pathlib import Path

import torch

NAME = "rank{rank}.provenance.json"
VERSION = 2  # 2: "work" beside "graphs"
_TRITON_SOURCE = re.compile(r"async_compile\.triton\(\s*'(\w+)',\s*'''(.*?)'''", re.DOTALL)
_NUM_GB = re.compile(r"'kernel_num_gb':\s*([0-9.eE+-]+)")
_FLOP = re.compile(r"'kernel_flop':\s*([0-9]+)")
_POINTER = re.compile(r"'\*(bf16|fp16|fp32|fp64|fp8e4nv|fp8e5|fp8e4b15)'")
_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "fp64": "fp64", "fp8e4nv": "fp8", "fp8e5": "fp8",
          "fp8e4b15": "fp8"}


def kernel_work(code: str) -> dict[str, dict]:
    """Per Triton kernel of Inductor's generated code: {"bytes", "flops", "dtype"} of one call
    (module docstring); a kernel without `kernel_num_gb` (benchmark_kernel off) is left out."""
    out = {}
    for name, source in _TRITON_SOURCE.findall(code):
        if not (gb := _NUM_GB.search(source)):
            continue
        work: dict = {"bytes": round(float(gb.group(1)) * 1e9)}
        if (flop := _FLOP.search(source)) and int(flop.group(1)) > 0:
            work["flops"] = int(flop.group(1))
        pointers = Counter(_POINTER.findall(source.split("inductor_meta", 1)[0]))
        if pointers:
            work["dtype"] = _DTYPE[pointers.most_common(1)[0][0]]
        out[name] = work
    return out


class _NodeModules:
    """A post-grad pass that changes nothing and notes, per node name, its module and aten op."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[str, str, str]] = {}  # node -> (module path, module class, aten op)

    def __call__(self, graph) -> None:
        for node in graph.nodes:
            if node.op == "call_function":
                path, cls = innermost_module(node.meta.get("nn_module_stack") or {})
                self.nodes[node.name] = (path, cls, str(node.target))

    def uuid(self) -> str:
        return "tracelab-provenance-1"


def innermost_module(stack: dict) -> tuple[str, str]:
    """The innermost module of an nn_module_stack ({key: (path, class)}): its dotted path from the
    compiled function's arguments (`L['model'].layers[3].attention` -> `layers.3.attention`)."""
    if not stack:
        return "", ""
    path, cls = list(stack.values())[-1]
    text = str(path)
    for old, new in (("L['self']", ""), ("L['model']", ""), ("._modules['", "."), ("']", ""), ("[", "."), ("]", "")):
        text = text.replace(old, new)
    text = text.split("L[", 1)[-1].strip(".'")
    name = getattr(cls, "__name__", None) or str(cls).rsplit(".", 1)[-1].strip("'>")
    return text, name


class _Artifacts(logging.Handler):
    """Takes Inductor's kernel -> post-grad nodes maps from the structured-trace log."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.graphs: list[list[tuple[str, list[str]]]] = []  # per compiled graph: (kernel, nodes) in call order
        self.work: dict[str, dict] = {}  # Triton kernel -> its work per call (kernel_work)

    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "metadata", {}) or {}
        if "inductor_output_code" in meta:
            self.work.update(kernel_work(str(getattr(record, "payload", "") or "")))
            return
        if (meta.get("artifact") or {}).get("name") != "inductor_provenance_tracking_node_mappings":
            return
        try:
            mapping = json.loads(getattr(record, "payload", "") or "{}")
        except ValueError:
            return
        calls = [(*_handle(key), list(nodes)) for key, nodes in (mapping.get("cppCodeToPost") or {}).items()]
        calls.sort(key=lambda c: c[1])  # the handle: call order (stable where a torch writes none)
        if calls:
            self.graphs.append([(name, nodes) for name, _, nodes in calls])


def _handle(key: str) -> tuple[str, int]:
    """`name:7` -> (name, 7): Inductor's provenance keys carry the call's debug handle (torch
    2.9 and later); a key without one is the name, at handle 0."""
    name, sep, handle = key.rpartition(":")
    return (name, int(handle)) if sep and handle.isdigit() else (key, 0)


class Recorder:
    """Inductor's provenance, on from `record()` to `write()`."""

    def __init__(self, out_path: Path) -> None:
        self.out_path, self.pass_, self.artifacts = out_path, _NodeModules(), _Artifacts()

    def write(self) -> Path:
        """The kernels seen so far, with their modules, to out_path; the handler removed."""
        from torch._logging._internal import trace_log
        trace_log.removeHandler(self.artifacts)
        graphs = [[{"name": name, **self._kernel(nodes)} for name, nodes in g] for g in self.artifacts.graphs]
        self.out_path.write_text(json.dumps({"version": VERSION, "torch": torch.__version__, "graphs": graphs,
                                             "work": self.artifacts.work}, indent=1))
        return self.out_path

    def _kernel(self, nodes: list[str]) -> dict:
        known = [self.pass_.nodes[n] for n in nodes if n in self.pass_.nodes]
        modules: dict[str, int] = {}
        for path, _, _ in known:
            modules[path] = modules.get(path, 0) + 1
        return {"modules": modules, "module_types": {p: c for p, c, _ in known},
                "aten": sorted({op for _, _, op in known})}


def record(out_dir: Path, rank: int) -> Recorder:
    """Turn on Inductor's provenance for the compiles that follow (module docstring)."""
    import torch._inductor.config as inductor
    from torch._logging._internal import trace_log

    recorder = Recorder(Path(out_dir) / NAME.format(rank=rank))
    if hasattr(inductor.trace, "provenance_tracking_level"):
        inductor.trace.provenance_tracking_level = 1
    else:  # torch before 2.9: a switch
        inductor.trace.provenance_tracking = True
    inductor.fx_graph_cache = False
    inductor.benchmark_kernel = True  # each Triton kernel's bytes and FLOPs in its inductor_meta
    inductor.cpp.enable_kernel_profile = True
    inductor.post_grad_custom_post_pass = recorder.pass_
    trace_log.addHandler(recorder.artifacts)
    return recorder
