"""The profiler's own host cost, and the step without it. Pure.

A profiler makes the host slower than it runs for the user: torch.profiler records every CPU
operator (more with record_shapes, more again with profile_memory), CUPTI hooks every launch
call, nsys and proton every launch and range. Each recorded event costs the host about the
same time whatever it does, so the cost is a few constants: per CPU operator, per launch
call and per range (user annotation, NVTX, proton scope), for each profiler configuration
(`Config`), fitted by benchmarks/profiler_cost.py on pairs of the same job run with the
profiler and without it (tracelab run times both: results' unprofiled_step_ns and
profiled_step_ns). `COSTS` holds them with the pairs they were fitted on and the error of
the model on those pairs (a band, as bands.py: never as if measured on the user's trace).

`deflate` takes them out of a replay's Params: the records made between two host nodes come
off the gap between them, those made inside a node (a CPU operator's own and its nested
operators' and ranges'; a launch call's) off its duration, each never below 0 (a node never
shorter than the records inside it leave: the nested ones lose only their own). The replay
of the deflated graph is the predicted step without the profiler.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracelab.core.schema import kind_mask

from .bands import Band

RANGE_KINDS = ("range", "step")  # user annotations, NVTX ranges, the step ranges themselves
COUNTED = ("cpu_ops", "launches", "ranges")


@dataclass(frozen=True)
class Config:
    """How a trace was profiled: the source (torch, nsys, proton), torch's record_shapes and
    profile_memory (None: not torch, or the trace does not say), and the device (cpu, gpu)."""

    source: str
    record_shapes: bool | None
    profile_memory: bool | None
    device: str

    @property
    def key(self) -> str:
        """'torch shapes memory gpu', 'torch noshapes nomemory cpu', 'nsys gpu'."""
        parts = [self.source]
        if self.record_shapes is not None:
            parts.append("shapes" if self.record_shapes else "noshapes")
        if self.profile_memory is not None:
            parts.append("memory" if self.profile_memory else "nomemory")
        return " ".join([*parts, self.device])


@dataclass(frozen=True)
class Costs:
    """The profiler's host cost per recorded event (ns) of one Config, what it was fitted on,
    and the error of the step it predicts on those pairs (`band`: leave-one-out, never the
    user's trace's)."""

    per_op_ns: float
    per_launch_ns: float
    per_range_ns: float
    fitted_on: str  # the pairs, machine and date
    band: Band | None

    def of(self, counts: np.ndarray) -> np.ndarray:
        """The cost (ns) of events counted as columns COUNTED (cpu ops, launches, ranges)."""
        return counts @ np.array([self.per_op_ns, self.per_launch_ns, self.per_range_ns], dtype=np.float64)


def config_of(meta, memory: pd.DataFrame | None, gpu: bool) -> Config:
    """The Config of one rank's trace: its meta (source; torch's record_shapes, from the operators'
    Input Dims: the parser's meta "record_shapes") and whether it holds memory events."""
    torch = meta.source == "torch"
    shapes = meta.extras.get("record_shapes") if torch else None
    mem = (memory is not None and len(memory) > 0) if torch else None
    return Config(meta.source, None if shapes is None else bool(shapes), mem, "gpu" if gpu else "cpu")


def step_counts(events: pd.DataFrame, host: pd.DataFrame | None, meta) -> pd.DataFrame:
    """Per step of one rank (its host step ranges): the CPU operators, launch calls and ranges the
    profiler recorded in it (columns step, *COUNTED). A proton trace has no timeline: one row
    (step -1) of its kernel launches per step covered (meta.steps), no operators or ranges."""
    from .nodes import _spans, _step_of  # the graph's own step ranges and step of a time

    if meta.source == "proton":
        launches = float(events["count"].fillna(1).sum()) / max(meta.steps or 1, 1)
        return pd.DataFrame({"step": [-1], "cpu_ops": [0.0], "launches": [launches], "ranges": [0.0]})
    _, steps = _spans(host)
    out = pd.DataFrame({"step": steps["step"].to_numpy()}).drop_duplicates().reset_index(drop=True)
    for name, kinds in (("cpu_ops", ("cpu_op",)), ("ranges", RANGE_KINDS)):
        rows = host[kind_mask(host, kinds)] if host is not None else host
        at = _step_of(rows["start_ns"].to_numpy(np.int64), steps) if rows is not None else np.empty(0, np.int64)
        out[name] = out["step"].map(pd.Series(at).value_counts()).fillna(0).to_numpy(np.float64)
    calls = events[events["launch_start_ns"].notna()].drop_duplicates("launch_start_ns")
    per = calls["step"].dropna().astype(np.int64).value_counts()
    out["launches"] = out["step"].map(per).fillna(0).to_numpy(np.float64)
    return out[["step", *COUNTED]]
