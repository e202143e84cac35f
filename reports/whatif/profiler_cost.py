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

`deflate` takes them out of a replay's Params: the records made inside a node (a CPU operator's
own and its nested operators' and ranges'; a launch call's, one per GPU op it launched) come off
its duration, those made between two host nodes, and what a node's own time could not hold (a
launch call shorter than its records: the profiler's callbacks around it), off the gap before
it; neither below 0 (a node never shorter than the records inside it leave: the nested ones lose
only their own). The replay of the deflated graph is the predicted step without the profiler.

Where a measured step calibrates the cost, `steady_host` comes first: under the profiler the host
also slows in bursts (the profiler's buffer handling, other work on its core) that reach a call in
some steps and not in most, while the steps repeat the same calls: each call's gap and time at its
median over those steps is the host's steady pace, which the step without the profiler keeps (a
cost per event cannot take a burst off: a step the bursts slowed stays host-bound in a scenario that
takes the device's work away). The fitted constants alone are taken off the host as profiled: they
were fitted on whole profiled steps, their bursts included.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from tracelab.core.schema import kind_mask

from .bands import ESTIMATED_STEP, Band
from .kinds import HOST_OP, LAUNCH, SYNC

MIN_STEADY_STEPS = 3  # steps sharing one host sequence before a median of them is a steady pace
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


# Config.key -> the fitted costs: `benchmarks/profiler_cost.py fit` of the pairs named (benchmarks/RESULTS.md,
# "The profiler's own cost per event": machine, date, figures). GPU: `measure --gpu` on one H100 (pairs of
# train tiny, small and small with a range per module, and decode tiny; the trace and the same steps
# timed with the profiler off). A band is the error of the predicted unprofiled step on pairs, said
# where: the replay less the cost where it was replayed, else the count model's, one pair left out.
_GPU_JOBS = "H100 pairs of tracelab run train and decode"


def _left_out(low_frac: float, high_frac: float) -> Band:
    """The count model's band: the profiled step less the cost per event against the step timed
    without the profiler, each of 4 H100 pairs left out of the fit in turn."""
    return Band(low_frac, high_frac, "the profiled step less this cost per event against the step timed without it, "
                "each of 4 H100 pairs left out of the fit in turn", "H100 pairs, one left out", ESTIMATED_STEP)


COSTS: dict[str, Costs] = {
    # train tiny 5.84 -> 10.94 ms, decode tiny 2.51 -> 4.94 ms per token (exact: 2 pairs). The replay less
    # it on 7 other torch-profiled H100 training runs against their unprofiled steps: -16% to +89%
    "torch shapes memory gpu": Costs(2065.2, 6049.3, 0.0, f"2 {_GPU_JOBS}", Band(
        -0.16, 0.89, "the replay less this cost against the step timed without the profiler, on 7 torch-profiled "
                     "H100 training runs not in the fit", "H100 training runs, profiled and not", ESTIMATED_STEP)),
    # 4 pairs (train tiny, small, small with scopes, decode tiny); the replay less it on them: -16% to +57%
    "torch noshapes nomemory gpu": Costs(2444.0, 0.0, 0.0, f"4 {_GPU_JOBS}", Band(
        -0.16, 0.57, "the replay less this cost against the step timed without the profiler, on the 4 H100 "
                     "pairs it was fitted on", "H100 pairs the cost was fitted on", ESTIMATED_STEP)),
    # 4 pairs; count model, one left out: -48% to +51%
    "nsys gpu": Costs(0.0, 7872.0, 0.0, f"4 {_GPU_JOBS}", _left_out(-0.48, 0.51)),
    # 4 pairs; count model, one left out: -8% to +12% (proton has no timeline to replay)
    "proton gpu": Costs(0.0, 2375.2, 0.0, f"4 {_GPU_JOBS}", _left_out(-0.08, 0.12)),
    # tests/data train-cpu-pair-torch: 297.3 ms unprofiled, 433.8 ms profiled; 1,645 CPU ops, 3 ranges per step
    "torch shapes memory cpu": Costs(82988.6, 0.0, 0.0, "1 pair: tests/data train-cpu-pair-torch (a loaded "
                                     "2-core CPU)", None),
}


def config_of(meta, memory: pd.DataFrame | None, gpu: bool) -> Config:
    """The Config of one rank's trace: its meta (source; torch's record_shapes, from the operators'
    Input Dims: the parser's meta "record_shapes") and whether it holds memory events."""
    torch = meta.source == "torch"
    shapes = meta.extras.get("record_shapes") if torch else None
    mem = (memory is not None and len(memory) > 0) if torch else None
    return Config(meta.source, None if shapes is None else bool(shapes), mem, "gpu" if gpu else "cpu")


def node_counts(start_ns: np.ndarray, end_ns: np.ndarray, host_node: np.ndarray, host: pd.DataFrame | None,
                node_tid: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per node of one rank's graph, the events (columns COUNTED) the profiler recorded in the
    gap before it and inside it: each CPU operator and range of `host` goes to the host node
    (`host_node`) that holds its start, else to the next one to start (on its thread where
    `node_tid` gives the nodes' threads; one host chain otherwise). Float64 [n, 3] each."""
    before, inside = np.zeros((len(start_ns), 3)), np.zeros((len(start_ns), 3))
    if host is None or not len(host) or not host_node.any():
        return before, inside
    for col, kinds in ((0, ("cpu_op",)), (2, RANGE_KINDS)):
        rows = kind_mask(host, kinds)
        at = host["start_ns"].to_numpy(np.int64)[rows]
        tids = host["tid"].to_numpy(np.int64)[rows]
        for tid in (np.unique(node_tid[host_node]) if node_tid is not None else [None]):
            nodes = np.flatnonzero(host_node & (node_tid == tid if tid is not None else True))
            nodes = nodes[np.argsort(start_ns[nodes], kind="stable")]
            mine = at[tids == tid] if tid is not None else at
            _count_into(mine, nodes, start_ns, end_ns, before[:, col], inside[:, col])
    return before, inside


def _count_into(at: np.ndarray, nodes: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray, before: np.ndarray,
                inside: np.ndarray) -> None:
    """Adds each time of `at` to the node (of `nodes`, by start) that holds it (`inside`), else to
    the next node's `before`; a time after the last node's end counts nowhere."""
    j = np.searchsorted(start_ns[nodes], at, side="right") - 1
    held = (j >= 0) & (at < end_ns[nodes[np.maximum(j, 0)]])
    inside += np.bincount(nodes[j[held]], minlength=len(inside))  # counts per node: np.add.at's sum, ~10x faster
    nxt = j[~held] + 1
    before += np.bincount(nodes[nxt[nxt < len(nodes)]], minlength=len(before))


def costs_for(config: Config | None) -> tuple[Costs | None, str]:
    """The Costs of `config` and where they come from, in words. A configuration not fitted takes
    the nearest fit, said so and with no band: the same profiler on the same device with other
    options (torch's shapes and memory), else, on a GPU, its CPU twin's operator and range costs
    (the host records an operator alike) with no launch cost: "estimated on CPU pairs only"."""
    if config is None:
        return None, "the trace does not say how it was profiled"
    if config.key in COSTS:
        return COSTS[config.key], COSTS[config.key].fitted_on
    near = [k for k in COSTS if k.split()[0] == config.source and k.split()[-1] == config.device]
    if near:
        c = COSTS[near[0]]
        return (replace(c, band=None), f"estimated from the fit of {near[0]} ({c.fitted_on}), not of {config.key}")
    twin = COSTS.get(Config(config.source, config.record_shapes, config.profile_memory, "cpu").key)
    if config.device == "gpu" and twin is not None:
        return (Costs(twin.per_op_ns, 0.0, twin.per_range_ns, twin.fitted_on, None),
                f"estimated on CPU pairs only ({twin.fitted_on}; launched GPU ops' cost not known)")
    return None, f"no profiler cost known for {config.key}"


@dataclass
class NodeCosts:
    """Per node of a joined graph, the profiler's cost (ns) in the gap before it and inside it,
    and per rank where its costs come from."""

    before_ns: np.ndarray
    inside_ns: np.ndarray
    source: dict[int, str]
    band: Band | None
    steady: bool = False  # taken off a host at its steady pace (steady_host) first

    def scaled(self, factor: float) -> "NodeCosts":
        """The same events at `factor` times the fitted cost each (calibrated_scale), off a host at
        its steady pace: the factor is solved on that host's replay, while the fitted cost alone was
        fitted on whole profiled steps, bursts and all, and is taken off the host as profiled."""
        return replace(self, before_ns=self.before_ns * factor, inside_ns=self.inside_ns * factor, steady=True)


def graph_costs(g) -> NodeCosts | None:
    """The profiler's cost per node of joined graph `g` (its ranks in order, as join.py lays them
    out), None where no rank's costs are known."""
    before, inside, source, bands = [], [], {}, []
    for r in sorted(g.ranks):
        rg = g.ranks[r]
        costs, source[r] = costs_for(getattr(rg, "profiler", None))
        counted = getattr(rg, "profiled_before", None) is not None and costs is not None
        before.append(costs.of(rg.profiled_before) if counted else np.zeros(len(rg)))
        inside.append(costs.of(rg.profiled_inside) if counted else np.zeros(len(rg)))
        bands.append(costs.band if counted else None)
    if not any(b.any() or i.any() for b, i in zip(before, inside)):
        return None
    band = bands[0] if len({id(b) for b in bands}) == 1 else None  # ranks profiled alike share their band
    return NodeCosts(np.concatenate(before), np.concatenate(inside), source, band)


def deflate(g, p, costs: NodeCosts) -> None:
    """Takes the profiler's cost out of replay Params `p` (module docstring): each host node's
    duration loses what was recorded inside it, its gap what was recorded before it and what its
    duration could not hold, neither below 0."""
    host = np.isin(g.kind, (LAUNCH, SYNC, HOST_OP))
    cut_dur = np.where(host, np.minimum(costs.inside_ns, np.maximum(p.dur_ns, 0)), 0)
    rest = costs.before_ns + costs.inside_ns - cut_dur  # a call's records that its own time cannot hold
    cut_gap = np.where(host, np.minimum(rest, np.maximum(p.gap_ns, 0)), 0)
    p.gap_ns -= np.rint(cut_gap).astype(np.int64)
    p.dur_ns -= np.rint(cut_dur).astype(np.int64)


def steady_host(g, p) -> None:
    """Each host node (call or CPU operator) of the steps that repeat one chain's most common host
    sequence (the same names in the same order) takes its gap and duration at their median over
    those steps (module docstring); a chain with fewer than MIN_STEADY_STEPS such steps is left."""
    host = np.isin(g.kind, (LAUNCH, SYNC, HOST_OP)) & (g.step >= 0)
    for chain in np.unique(g.chain[host]):
        same = _repeated_steps(g, np.flatnonzero(host & (g.chain == chain)))
        if same is not None:  # [steps, positions] node indices
            p.gap_ns[same] = np.median(p.gap_ns[same], axis=0).astype(np.int64)
            p.dur_ns[same] = np.median(p.dur_ns[same], axis=0).astype(np.int64)


def _repeated_steps(g, nodes: np.ndarray) -> np.ndarray | None:
    """One chain's `nodes` as [steps, positions], the steps that share its most common sequence of
    names, by start; None where fewer than MIN_STEADY_STEPS do."""
    nodes = nodes[np.lexsort((g.start_ns[nodes], g.step[nodes]))]
    cuts = np.flatnonzero(np.diff(g.step[nodes])) + 1
    steps = np.split(nodes, cuts)
    keys = [tuple(g.name[s]) for s in steps]
    common, n = Counter(keys).most_common(1)[0] if keys else (None, 0)
    return np.vstack([s for s, k in zip(steps, keys) if k == common]) if n >= MIN_STEADY_STEPS else None
