"""What-if scenarios: each changes the replay's Params (durations, offsets, chains) of a
Graph; several given together change one Params, replayed once (never summed). Pure.

- `no-host-gaps`: the host issues work as fast as the device takes it (a whole-step CUDA
  graph, torch.compile's reduce-overhead): no time between host calls but the host's stalls
  (timeline/stalls.py: the Python between replays still runs, so the sleep, the data loader's
  batch or the `.item()` after a sync stay; `no-host-stalls` takes them off), launch calls take none
  but the first of each step and rank (a graph launch's cost), every launched op starts its
  rank's least launch-to-start delay after its launch, syncs keep their return latency and
  still wait for the GPU (one that found it drained takes none but waits all the same), and ops queued on a stream follow each other by a graph replay's
  gap between kernels (the trace's own, between the kernels of one graph launch, where it
  has graph launches; else GRAPH_GAP_NS), not by the eager queue's (about 1.2 us on H100:
  each kernel a launch of its own). In a CPU-only trace, no time between a thread's CPU ops.
- `no-host-stalls[@RANK]`: the rank's host stalls (timeline/stalls.py: untraced host time after
  a sync or between steps while the device idled) take no time, on RANK only: the host gaps
  they sit in shrink by them, so the work after each is issued that much earlier, and the
  other ranks' waits at the next collective shorten with it (its last arrival comes earlier).
- `remove:REGEX[@RANK]`: GPU ops (CPU ops in a CPU-only trace) whose name or scope matches
  take no time, the launch calls of only such ops too, and so does the host's time inside
  ranges, CPU ops and OS calls of a matching name (a host stall in a named range); on RANK only.
- `scale:REGEX=F`: ops whose name or scope matches take F times as long.
- `roofline`: every GPU op whose work the trace gives takes its roofline time (never longer
  than measured); the rest as measured.
- `balance`: per step, each rank's work (its GPU ops but collectives, or its CPU ops in a
  CPU-only trace) above the lower median rank's is scaled down to it: the late rank's extra work
  removed, right where that work is waste (a slow device, a redundant computation).
- `balance:share`: per step and segment (between two of the rank's collectives: where ranks wait
  for one another), each rank's work at the ranks' mean there: the late rank's extra work moved
  onto the others, as re-partitioning the work does. The total is kept (a rank of no work there
  takes none) and each rank's ops grow or shrink in proportion, so the moved work sits where the
  late rank did it, not spread over the other ranks' whole step.
- `overlap-comm`: collectives that share a stream with compute run on a chain of their own, so
  compute queued behind them no longer waits (still: waits inferred between streams, syncs, the
  last rank's arrival); in a CPU-only trace, host threads no longer block on them (the host's
  stalls after such a wait stay: its own time). Each is issued as its rank's step's work begins
  (the trace may issue them all after the backward; bucketing issues each as its gradients are ready)
  and still runs in order on its chain, so their transfers never run at once. It hides transfers
  behind compute, never the wait for a rank that has not arrived: each rank's step reads its
  collectives' results before it ends (the optimizer, the next step), so the collective that
  ended last in each rank's step stays where it is (on its stream, issued where it was; in a
  CPU-only trace what waited on it still waits), and it ends no sooner than its last rank arrives
  (depend.py). The trace does not say which later op reads a collective's result: a collective
  that sits between the compute feeding it and the compute reading it, layer after layer (tensor
  parallelism: depend.py), stays where it is (hiding it takes a fused AG-GEMM / GEMM-RS kernel,
  said in a note); for the rest (DDP's per-bucket or per-parameter all-reduces before the step's
  last) it is an upper bound: what bucketing achieves, each gradient taken as ready from the start
  of its step.
- `autocast:bf16=F`: a model of fp32 -> bf16 autocast. Its matrix products (PRODUCTS: aten's
  linear/matmul/mm/addmm/bmm and their backward, GPU GEMM kernels but attention's fused ones) take
  F times as long (a microbenchmark's bf16/fp32 ratio at the trace's shapes, or the roofline's);
  and the casts autocast adds take their time: each forward product casts its fp32 inputs (an
  activation and a weight: CASTS_PER_PRODUCT) and, in a training step (products under a backward
  scope), each cast's gradient is cast back. A cast costs the host the trace's median host time
  per issued op (a launch call and the gap before it; a CPU operator in a CPU-only trace), issued
  before its product, and the device the trace's median time of an op that is not a product. Not
  modelled (said in its note): inputs already in bf16 (fewer casts), the weight casts autocast
  caches, elementwise ops and attention on half the bytes, autocast's dispatch on every op.
- `autocast:bf16=@FILE`: the same, each product by its own shape's change from a factors file
  (bf16_factors.py: timed on the machine that runs the change, `tracelab factors`), and
  autocast's dispatch per CPU operator the profiler recorded where the file measured it on such a
  host (added to the host's time before each node); factors of another device are refused.
- `cuda-graph`: the whole step captured as one CUDA graph: no-host-gaps, and no profiler cost
  on the host (analyse.py: its prediction without the profiler is its profiled replay, since the
  host is off the path and kernels run as fast profiled).
- `compile`: eager -> torch.compile's default mode (Inductor, no CUDA graphs; fusion.py): extern
  ops (matrix products, fused attention, collectives, copies, unknown or already generated
  kernels, and the optimizer's step, gradient accumulation and the loss outside the compiled
  model) stay;
  each run of pointwise, reduction and copy ops between them on one stream (one thread in a
  CPU-only trace) becomes one kernel per reduction, of its largest member's time, issued by one
  launch: the other members' launches and the host's time before them gone.
  `compile:reduce-overhead`: the same, and the host off the path as `cuda-graph` (GPU traces only).
- `busbw:GBPS`: matched collectives whose message size is known transfer at that bus
  bandwidth (nccl-tests' factors, reports/collectives.BUS_FACTOR).

Values are bounded to what a step can mean: F within [0, MAX_SCALE], GBPS within
[MIN_BUS_GB_S, MAX_BUS_GB_S], and a changed duration at most limits.MAX_DUR_NS, so no
sum of them wraps int64. A REGEX is matched once per distinct name (a trace has thousands
of ops but few names), with a time budget (regexes.py): a pattern that backtracks without
bound, such as `(a+)+$` on a long name, is refused in one line, not waited for.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from tracelab.core.errors import UsageError
from tracelab.core.regexes import matches
from tracelab.core.note import Note

from ..timeline import collectives as C
from ..timeline.intervals import covered, merge_intervals
from . import autocast, bf16_factors, depend, fusion
from .autocast import PRODUCTS
from .join import Graph
from .kinds import COLL, GPU, HOST_OP, LAUNCH, SYNC
from .picks import changed_durations_ns, matching as _matching, regex as _regex
from .replay import Params

# The median gap between consecutive kernels of one CUDA graph launch, measured under
# torch.profiler on H100 (tests/data graph-1gpu-torch, graph-outside-1gpu-torch,
# decode-compile-1gpu-torch: 256 ns in each; eager kernels queued behind another: 1.2-1.5 us).
GRAPH_GAP_NS = 256
DEFAULTS = ("no-host-gaps", "no-host-stalls", "roofline", "balance", "overlap-comm")
NAMES = ("no-host-gaps", "cuda-graph", "no-host-stalls", "remove", "scale", "autocast", "compile", "roofline",
         "balance", "overlap-comm", "busbw")
MAX_SCALE = 1000.0  # a kernel 1000x slower; beyond that the replay says nothing a step can mean
MIN_BUS_GB_S, MAX_BUS_GB_S = 1e-3, 1e6  # 1 MB/s (a failing link) to 1 PB/s (beyond any fabric)


@dataclass
class Scenario:
    """One parsed scenario: its name, its argument (as given) and what it does to Params."""

    name: str
    arg: str
    apply: Callable[[Graph, Params], None]
    matched: Callable[[Graph], int] | None = None  # remove, scale: how many ops or host ranges match
    what: str = "names, kernels, scopes, host ranges"  # what `matched` looks for, in words
    note: Callable[[Graph], Note | list[Note] | None] | None = None  # what the scenario left undone on this graph
    host_free: bool = False  # the host is off the step's path: the profiler's host cost does not reach it
    check: Callable[[Graph], None] | None = None  # raises UsageError where the scenario cannot serve this graph

    @property
    def label(self) -> str:
        return label_of(self.name, self.arg)


def label_of(name: str, arg: str) -> str:
    """A scenario's text from its name and argument: `name:arg`, `name@RANK` (a rank alone), `name`."""
    return f"{name}{arg}" if arg.startswith("@") else f"{name}:{arg}" if arg else name


def parse(spec: str) -> Scenario:
    """A scenario from its text (module docstring); UsageError naming --scenario otherwise."""
    name, _, arg = spec.partition(":")
    if name.startswith("no-host-stalls@") and not arg:  # a rank alone: no-host-stalls@RANK
        name, arg = "no-host-stalls", name.removeprefix("no-host-stalls")
    if name == "overlap-comm" and not arg:
        return Scenario(name, "", _overlap_comm, note=lambda g: depend.note(g, depend.dependent(g)))
    if name == "balance" and arg == "share":
        return Scenario(name, arg, lambda g, p: _balance(g, p, share=True))
    if name in ("no-host-gaps", "cuda-graph", "roofline", "balance") and not arg:
        return Scenario(name, "", {"no-host-gaps": _no_host_gaps, "cuda-graph": _no_host_gaps, "roofline": _roofline,
                                   "balance": _balance}[name], host_free=name == "cuda-graph")
    if name == "autocast" and arg.startswith("bf16="):
        value, products = arg.removeprefix("bf16="), _regex(PRODUCTS)
        f = bf16_factors.read(value[1:], 0.0, MAX_SCALE) if value.startswith("@") else _number(value, spec, 0.0, MAX_SCALE)
        return Scenario(name, arg, lambda g, p: autocast.apply(g, p, products, f),
                        lambda g: _count(g, products, None, spans=False), "matrix products",
                        lambda g: autocast.notes(g, products, f),
                        check=None if isinstance(f, float) else lambda g: f.check_device(g.cpu_only))
    if name == "compile" and arg in ("", "reduce-overhead"):
        graphs = arg == "reduce-overhead"
        return Scenario(name, arg, lambda g, p: _compiled(g, p, graphs), lambda g: len(fusion.segments(g)),
                        "pointwise, reduction and copy ops Inductor fuses", lambda g: fusion.note(g, graphs),
                        host_free=graphs, check=_gpu_only(spec) if graphs else None)
    if name == "no-host-stalls" and (not arg or re.fullmatch(r"@\d+", arg)):
        at = int(arg[1:]) if arg else None
        return Scenario(name, arg, lambda g, p: _no_host_stalls(g, p, at), lambda g: len(_stalls(g, at)),
                        "host stalls: untraced host time after a sync or between steps")
    if name == "remove" and arg:
        pattern, _, rank = arg.rpartition("@") if re.search(r"@\d+$", arg) else (arg, "", "")
        regex = _regex(pattern)
        at = int(rank) if rank else None
        return Scenario(name, arg, lambda g, p: _remove(g, p, regex, at), lambda g: _count(g, regex, at, spans=True))
    if name == "scale" and "=" in arg:
        pattern, _, factor = arg.rpartition("=")
        f = _number(factor, spec, 0.0, MAX_SCALE)
        regex = _regex(pattern)
        return Scenario(name, arg, lambda g, p: _scale(g, p, regex, f), lambda g: _count(g, regex, None, spans=False))
    if name == "busbw" and arg:
        gb_s = _number(arg, spec, MIN_BUS_GB_S, MAX_BUS_GB_S)
        return Scenario(name, arg, lambda g, p: _busbw(g, p, gb_s))
    raise UsageError("--scenario", f"{spec!r} is not one of no-host-gaps, cuda-graph, no-host-stalls[@RANK], remove:REGEX[@RANK], "
                                   "scale:REGEX=F, autocast:bf16=F|@FILE, compile[:reduce-overhead], roofline, balance[:share], overlap-comm, busbw:GBPS")


def _number(text: str, spec: str, low: float, high: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError("--scenario", f"{spec!r}: {text!r} is not a number") from None
    if not low <= value <= high:  # NaN fails too
        raise UsageError("--scenario", f"{spec!r}: {text!r} must be a number from {low:g} to {high:g}")
    return value


def _compiled(g: Graph, p: Params, graphs: bool) -> None:
    fusion.apply(g, p)
    if graphs:
        _no_host_gaps(g, p)


def _gpu_only(spec: str) -> Callable[[Graph], None]:
    def check(g: Graph) -> None:
        if g.cpu_only:
            raise UsageError("--scenario", f"{spec!r} captures CUDA graphs: a CPU-only trace has none (use compile)")
    return check


def _count(g: Graph, regex: re.Pattern, rank: int | None, spans: bool) -> int:
    """Ops (and, with `spans`, host ranges, CPU ops and OS calls) matching `regex`, on `rank` or all."""
    n = int(_matching(g, regex, rank).sum())
    if spans:
        n += sum(int(matches(regex, rg.host_spans["name"], "--scenario").sum()) for r, rg in g.ranks.items()
                 if rank is None or r == rank)
    return n


def _no_host_gaps(g: Graph, p: Params) -> None:
    host = np.isin(g.kind, (LAUNCH, SYNC, HOST_OP))
    p.gap_ns[host] = np.minimum(np.maximum(p.gap_ns[host], 0), _standing_stalls(g, p)[host])
    if g.cpu_only:
        return
    keep = _first_launch_of_steps(g)
    p.dur_ns[(g.kind == LAUNCH) & ~keep] = 0
    _drained_syncs_wait(g, p)
    launched = p.xs_src >= 0
    p.xs_off_ns[launched] = np.minimum(p.xs_off_ns[launched], g.edges.launch_floor_ns[launched])
    device = np.isin(g.kind, (GPU, COLL))
    for r, rg in g.ranks.items():
        gap = getattr(rg, "graph_gap_ns", float("nan"))
        on = device & (g.rank == r)
        p.gap_ns[on] = np.minimum(p.gap_ns[on], int(gap) if np.isfinite(gap) else GRAPH_GAP_NS)


def _drained_syncs_wait(g: Graph, p: Params) -> None:
    """A sync call without a sync edge found its GPU drained (edges.py) and returned at once: with
    the host ahead of the GPU it takes none of its time, but returns no sooner than the launched op
    of its rank that ended last before it began (a stall after it begins once the GPU drained)."""
    sync = np.flatnonzero((g.kind == SYNC) & (p.y_src < 0))
    p.dur_ns[sync] = 0
    dev = np.flatnonzero(np.isin(g.kind, (GPU, COLL)) & (g.launch >= 0))
    for r in np.unique(g.rank[sync]).tolist():
        on, calls = dev[g.rank[dev] == r], sync[g.rank[sync] == r]
        on = on[np.argsort(g.end_ns[on], kind="stable")]  # launched and ended before the call: no cycle
        k = np.searchsorted(g.end_ns[on], g.start_ns[calls], side="right") - 1
        calls, k = calls[k >= 0], k[k >= 0]
        p.y_src[calls] = on[k]
        p.y_off_ns[calls] = 0


def _first_launch_of_steps(g: Graph) -> np.ndarray:
    idx = np.flatnonzero(g.kind == LAUNCH)
    frame = pd.DataFrame({"i": idx, "r": g.rank[idx], "s": g.step[idx], "t": g.start_ns[idx]})
    first = frame.sort_values("t").drop_duplicates(["r", "s"])["i"].to_numpy()
    out = np.zeros(len(g), bool)
    out[first] = True
    return out


def _remove(g: Graph, p: Params, regex: re.Pattern, rank: int | None) -> None:
    hit = _matching(g, regex, rank)
    p.dur_ns[hit] = 0
    p.group[hit & (g.kind == COLL)] = -1
    launched = pd.Series(hit[g.launch >= 0]).groupby(g.launch[g.launch >= 0]).all()
    only = launched[launched].index.to_numpy(dtype=np.int64)
    p.dur_ns[only] = 0
    for r, rg in g.ranks.items():
        if rank is not None and r != rank:
            continue
        spans = rg.host_spans[matches(regex, rg.host_spans["name"], "--scenario")]
        if len(spans):
            off = g.offsets_ns.get(r, 0)
            _drop_host_time(g, p, r, spans["start_ns"].to_numpy(np.int64) + off, spans["end_ns"].to_numpy(np.int64) + off)


def _host_gaps(g: Graph, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(the rank's host nodes by chain and start, where each one's measured gap begins)."""
    host = np.flatnonzero(np.isin(g.kind, (LAUNCH, SYNC, HOST_OP)) & (g.rank == rank))
    order = host[np.lexsort((g.start_ns[host], g.chain[host]))]
    if not len(order):
        return order, order
    prev_end = np.r_[g.start_ns[order[0]], g.end_ns[order[:-1]]]
    first = np.r_[True, g.chain[order][1:] != g.chain[order][:-1]]
    return order, np.where(first, g.start_ns[order], np.minimum(prev_end, g.start_ns[order]))


def _drop_host_time(g: Graph, p: Params, rank: int, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The host's time inside [start, end) spans of one rank: gaps shrink by what they cover,
    calls inside take none and wait for nothing. Returns (host nodes, ns taken off each one's gap)."""
    u0, u1 = merge_intervals(start, end)
    order, gap_lo = _host_gaps(g, rank)
    if not len(order):
        return order, order
    dropped = np.minimum(covered(gap_lo, g.start_ns[order], u0, u1), np.maximum(p.gap_ns[order], 0))
    p.gap_ns[order] -= dropped
    held = _standing_stalls(g, p)
    held[order] = np.minimum(held[order], np.maximum(p.gap_ns[order], 0))  # a stall in a dropped range goes with it
    inside = covered(g.start_ns[order], g.end_ns[order], u0, u1) >= (g.end_ns[order] - g.start_ns[order])
    calls = order[inside & (g.kind[order] != HOST_OP)]
    p.dur_ns[calls] = 0
    p.y_src[calls] = -1
    return order, dropped


def _standing_stalls(g: Graph, p: Params) -> np.ndarray:
    """p.stall_ns, made from the graph's stalls where no scenario has yet: per host node, the
    stalls' time inside its measured gap (at most the gap as it stands)."""
    if p.stall_ns is None:
        p.stall_ns = np.zeros(len(g), np.int64)
        for r, start, end in _stalls(g, None):
            order, gap_lo = _host_gaps(g, r)
            u0, u1 = merge_intervals(start, end)
            inside = covered(gap_lo, g.start_ns[order], u0, u1).astype(np.int64)
            p.stall_ns[order] = np.minimum(inside, np.maximum(p.gap_ns[order], 0))
    return p.stall_ns


def _stalls(g: Graph, rank: int | None) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(rank, starts, ends) of each rank's host stalls on the joined clock, on `rank` or all."""
    out = []
    for r, rg in g.ranks.items():
        stalls = getattr(rg, "stalls", None)
        if (rank is None or r == rank) and stalls is not None and len(stalls):
            off = g.offsets_ns.get(r, 0)
            out.append((r, stalls["start_ns"].to_numpy(np.int64) + off, stalls["end_ns"].to_numpy(np.int64) + off))
    return out


def _no_host_stalls(g: Graph, p: Params, rank: int | None) -> None:
    for r, start, end in _stalls(g, rank):
        _standing_stalls(g, p)[_drop_host_time(g, p, r, start, end)[0]] = 0  # what no-host-gaps keeps: gone too


def _scale(g: Graph, p: Params, regex: re.Pattern, factor: float) -> None:
    hit = _matching(g, regex, None)
    p.dur_ns[hit] = changed_durations_ns(p.dur_ns[hit] * factor)


def _roofline(g: Graph, p: Params) -> None:
    known = ~np.isnan(g.roof_ns) & (g.kind == GPU)
    p.dur_ns[known] = np.minimum(p.dur_ns[known], np.rint(g.roof_ns[known]).astype(np.int64))


def _balance(g: Graph, p: Params, share: bool = False) -> None:
    """Per step, each rank's work at the lower median rank's where above it (`balance`); or
    (`share`) per step and segment, each rank's work at the mean of the ranks that have work there."""
    work = np.flatnonzero(g.work())
    work = work[(g.step[work] >= 0) & (g.op_class[work] != "communication")]
    if not len(work) or len(set(g.rank.tolist())) < 2:
        return
    frame = pd.DataFrame({"i": work, "r": g.rank[work], "s": g.step[work], "d": p.dur_ns[work]})
    if share:
        frame["s"] = list(zip(frame["s"], _segments(g, work)))
    per = frame.groupby(["s", "r"])["d"].sum()
    target = per.groupby(level="s").transform(_shared_ns if share else _lower_median_ns)
    factor = target / per.where(per > 0)
    factor = (factor if share else factor.clip(upper=1.0)).fillna(1.0)  # a rank of no work there: unchanged
    f = factor.reindex(pd.MultiIndex.from_frame(frame[["s", "r"]])).to_numpy()
    p.dur_ns[work] = changed_durations_ns(p.dur_ns[work] * f)


def _lower_median_ns(per_rank_ns: pd.Series) -> float:
    return float(np.sort(per_rank_ns.to_numpy())[(len(per_rank_ns) - 1) // 2])


def _shared_ns(per_rank_ns: pd.Series) -> float:
    """The mean of the ranks that have work: none is lost or made (a rank of none cannot take any)."""
    busy = per_rank_ns[per_rank_ns > 0]
    return float(busy.mean()) if len(busy) else 0.0


def _segments(g: Graph, nodes: np.ndarray) -> np.ndarray:
    """Per node, how many collectives of its rank and step began before it: its segment. Work moved
    between ranks stays between the same collectives, where the ranks wait for one another: spread
    over the whole step it would lengthen every segment of the rank that takes it."""
    coll = np.flatnonzero((g.kind == COLL) & (g.step >= 0))
    ops = pd.DataFrame({"k": np.arange(len(nodes)), "r": g.rank[nodes], "s": g.step[nodes], "t": g.start_ns[nodes]})
    colls = pd.DataFrame({"r": g.rank[coll], "s": g.step[coll], "t": g.start_ns[coll]}).sort_values("t", kind="stable")
    colls["n"] = colls.groupby(["r", "s"]).cumcount() + 1
    found = pd.merge_asof(ops.sort_values("t", kind="stable"), colls, on="t", by=["r", "s"], allow_exact_matches=False)
    return found.sort_values("k")["n"].fillna(0).to_numpy(dtype=np.int64)


def _overlap_comm(g: Graph, p: Params) -> None:
    hidden = (g.kind == COLL) & ~depend.dependent(g)  # a layer's collective whose result the next layer reads stays
    hidden &= ~depend.last_of_steps(g, hidden)  # so does each rank's step's last: the step reads its result
    if g.cpu_only:  # the host threads that blocked on a hidden collective go on
        waits = (p.xe_src >= 0) & (g.kind == HOST_OP)
        _stop_waiting(g, p, np.flatnonzero(waits & hidden[np.maximum(p.xe_src, 0)]))
    _off_compute_chains(g, p, hidden)
    _issued_at_step_start(g, p, hidden)


def _stop_waiting(g: Graph, p: Params, nodes: np.ndarray) -> None:
    """Host ops that waited on a collective no longer do; the host's stalls between its end and
    theirs (untraced time of its own: a sleep after the wait returned) stay, as time before them."""
    kept = np.zeros(len(nodes), np.int64)
    src = p.xe_src[nodes]
    for r, start, end in _stalls(g, None):
        on = g.rank[nodes] == r
        u0, u1 = merge_intervals(start, end)
        after = g.end_ns[src[on]]
        until = np.minimum(after + np.maximum(p.xe_off_ns[nodes[on]], 0), g.start_ns[nodes[on]])
        kept[on] = covered(after, until, u0, u1)
    p.gap_ns[nodes] = np.maximum(p.gap_ns[nodes], kept)
    if p.stall_ns is not None:  # no-host-gaps, where it comes later, keeps them too
        p.stall_ns[nodes] = np.maximum(p.stall_ns[nodes], kept)
    p.xe_src[nodes] = -1


def _issued_at_step_start(g: Graph, p: Params, hidden: np.ndarray) -> None:
    """Hidden collectives launched by a host call (or CPU op) are issued as their rank's step's
    work begins instead (its first GPU op; in a CPU-only trace its first CPU operator): bucketing
    issues each all-reduce as its gradients are ready, during the backward, where the trace may
    issue them all after it; which gradient is ready when, it does not say (an upper bound). Their
    chain still runs them in order, so their transfers add up behind each other, never at once."""
    idx = np.flatnonzero(hidden & (p.xs_src >= 0))
    work = np.flatnonzero(g.work() | (g.kind == COLL) if not g.cpu_only else g.work())
    if not len(idx) or not len(work):
        return
    work = work[np.lexsort((g.start_ns[work], g.step[work], g.rank[work]))]
    new = np.r_[True, (g.rank[work][1:] != g.rank[work][:-1]) | (g.step[work][1:] != g.step[work][:-1])]
    first = work[new]  # per rank and step, its work's first node
    at = pd.Series(first, index=pd.MultiIndex.from_arrays([g.rank[first], g.step[first]]))
    src = at.reindex(pd.MultiIndex.from_arrays([g.rank[idx], g.step[idx]])).to_numpy()
    ok = ~np.isnan(src)
    idx, src = idx[ok], src[ok].astype(np.int64)
    # only earlier than its launch and its start as measured: every edge still runs forward in time, no cycle
    ok = (src != idx) & (g.start_ns[src] <= np.minimum(g.start_ns[p.xs_src[idx]], g.start_ns[idx]))
    idx, src = idx[ok], src[ok]
    p.xs_src[idx] = src
    p.xs_off_ns[idx] = 0


def _off_compute_chains(g: Graph, p: Params, hidden: np.ndarray) -> None:
    """Hidden collectives queued on a chain with compute move to a chain of their own (one per
    chain they leave, so they still run in order), and what was queued behind them no longer
    waits; a chain of collectives alone (NCCL's stream, gloo's worker thread) keeps them."""
    order = g.chain_order(p.chain)
    mixed = np.unique(p.chain[(g.kind != COLL)])
    moved = hidden & np.isin(p.chain, mixed)
    behind = np.zeros(len(g), bool)
    same = p.chain[order[1:]] == p.chain[order[:-1]]
    behind[order[1:][same]] = moved[order[:-1][same]]
    p.gap_ns[behind & ~moved] = np.minimum(p.gap_ns[behind & ~moved], 0)
    p.gap_ns[hidden] = np.minimum(p.gap_ns[hidden], 0)
    p.chain[moved] = p.chain[moved] + max(int(p.chain.max()), int(g.chain.max())) + 1
    p.pinned[moved & (p.xs_src < 0) & (p.xe_src < 0)] = True  # one without a launch call starts as measured


def _busbw(g: Graph, p: Params, gb_s: float) -> None:
    idx = np.flatnonzero((g.group >= 0) & ~np.isnan(g.msg_bytes))
    kinds = [C.collective_type(str(n)) for n in g.name[idx]]
    factor = np.array([C.BUS_FACTOR.get(k, lambda n: np.nan)(int(n)) for k, n in zip(kinds, g.group_ranks[idx])],
                      dtype=np.float64)
    algbw = gb_s / factor  # GB/s = bytes per ns
    ok = np.isfinite(algbw) & (algbw > 0)
    p.dur_ns[idx[ok]] = changed_durations_ns(g.msg_bytes[idx[ok]] / algbw[ok])
