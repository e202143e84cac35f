"""One rank's dependency graph, made from its events and host frame alone (in the worker
that parsed it: load_many's reduce). Pure: frames in, a RankGraph of numpy arrays out.

Nodes, each on one chain (a sequence run in measured start order):
- host (GPU traces): the launch calls of the GPU rows (launch_start_ns, launch_dur_ns; one
  node per call, so a graph launch is one) and the synchronising calls of the host frame, on
  one chain per rank (the trace keeps no launching thread; calls of concurrent threads overlap
  and keep their measured offset). A blocking copy is both: one node;
- device: each GPU op on its stream's chain; in a CPU-only trace, the gloo/MPI ranges on their
  worker thread's chain, and the CPU operators on their own thread's chain (the host).

Edges (ns offsets; `edges.py` sets them from the measured times):
- chain: a node starts `gap_ns` after its chain predecessor ends;
- launch (xs): a device node starts `xs_off_ns` after its launch call (or, CPU-only, the
  host op that enqueued it) starts;
- wait (xe): a node starts after another node ends (a stream waiting on another, inferred
  where nothing else explains its start; a CPU thread blocked until a collective ended);
- sync (y): a synchronising call ends after the GPU op it waited on ends;
- collective: a matched collective's transfer starts when its last rank arrives (join.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from tracelab.core.devices import Device
from tracelab.core.note import Note
from tracelab.core.schema import RankData, kind_mask, str_array

from ..timeline.collectives import CPU_COLLECTIVE
from ..roofs import least_time_ns, min_ns_of, trace_device  # the per-row least time, as roofline has it
from ..timeline.intervals import timed
from .profiler_cost import COUNTED, RANGE_KINDS, Config, config_of, node_counts
from .regions import region_counts, region_spans, step_regions
from ..timeline.stalls import host_stalls, shared_stalls

from .kinds import COLL, GPU, HOST_OP, LAUNCH, NONE, SYNC
_CPU_COLL = re.compile(CPU_COLLECTIVE)
_STEP_NUMBER = re.compile(r"(\d+)(?!.*\d)")


@dataclass
class RankGraph:
    """One rank's nodes (arrays of equal length, own clock) and what the builder noted."""

    rank: int
    kind: np.ndarray  # int8, kinds.KIND_NAMES
    chain: np.ndarray  # int32, index into chain_labels
    start_ns: np.ndarray  # int64 measured
    end_ns: np.ndarray
    step: np.ndarray  # int64, -1 outside every step
    name: np.ndarray  # object: kernel or call name
    scope: np.ndarray  # object
    op_class: np.ndarray  # object
    msg_bytes: np.ndarray  # float64
    process_group: np.ndarray  # object: a collective's process group where the trace names it, else ""
    roof_ns: np.ndarray  # float64: a GPU op's least time on the device's roofline (reports/roofline.py), NaN unknown
    event_row: np.ndarray  # int64, the events row of a device node (-1 for host nodes)
    launch: np.ndarray  # int64, local index of the launching host node, -1 none
    copy: np.ndarray  # bool: a memcpy or memset (the copy engine's work, not a kernel's compute)
    chain_labels: list[str]
    cpu_only: bool
    host_spans: pd.DataFrame  # name, start_ns, end_ns: ranges, CPU ops and OS calls (scenario remove, top host ops)
    step_ranges: pd.DataFrame  # step, start_ns, end_ns of the host's step ranges
    notes: list[Note] = field(default_factory=list)
    graph_gap_ns: float = float("nan")  # median gap between kernels of one graph launch in this trace, NaN none
    # per node, the events the profiler recorded in the gap before it and inside it (profiler_cost.COUNTED:
    # CPU ops, launch calls, ranges; float64 [n, 3]), and how the trace was profiled (shared_graph sets it)
    profiled_before: np.ndarray | None = None
    profiled_inside: np.ndarray | None = None
    profiler: Config | None = None
    stalls: pd.DataFrame | None = None  # timeline/stalls.STALL_COLUMNS: untraced host time the device idled through
    # regions.REGION_COLUMNS: the phases per step (its ranges); a GPU trace's with the records its host
    # nodes hold (regions.COUNT_COLUMNS: what the profiler's cost per event takes off each)
    regions: pd.DataFrame | None = None

    def __len__(self) -> int:
        return len(self.kind)


def rank_graph(events: pd.DataFrame, host: pd.DataFrame | None, rank: int | None = None,
               device: Device | None = None, stalls: pd.DataFrame | None = None, counts: bool = True) -> RankGraph:
    """The nodes of one rank (module docstring); `rank` overrides the events' own; `device`
    gives the GPU ops' roofline times; `stalls` the rank's host stalls where the caller made them
    (timeline/stalls.host_stalls, made here otherwise); `counts`: with the profiler's records per
    node and per phase (profiled_before, profiled_inside, regions: what the replay's profiler cost
    reads), else those stay None (a caller that only walks the critical path)."""
    rank = int(events["rank"].iloc[0]) if rank is None and len(events) else int(rank or 0)
    stalls = host_stalls(events, host) if stalls is None else stalls
    gpu = timed(events)
    if len(gpu):
        return replace(_gpu_graph(_positional(gpu), host, rank, device, counts), stalls=stalls)
    cpu = events[(events["kind"] == "cpu_op") & events["start_ns"].notna()].reset_index(drop=True)
    return replace(_cpu_graph(cpu, host, rank, counts), stalls=stalls)


def _positional(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with the index 0..n-1: itself where it has it (most ranks' GPU rows, a 20-column copy saved)."""
    index = frame.index
    if isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1:
        return frame
    return frame.reset_index(drop=True)


def _spans(host: pd.DataFrame | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    cols = ["name", "start_ns", "end_ns"]
    if host is None or not len(host):
        return pd.DataFrame(columns=cols), pd.DataFrame(columns=["step", "start_ns", "end_ns"])
    start = host["start_ns"].to_numpy(dtype=np.int64)
    end = start + host["dur_ns"].to_numpy(dtype=np.int64)
    name = np.asarray(host["name"].array, dtype=object)  # str already (schema.HOST_COLUMNS)
    on = kind_mask(host, ("range", "cpu_op", "osrt"))
    spans = pd.DataFrame({"name": name[on], "start_ns": start[on], "end_ns": end[on]})
    at = np.flatnonzero(kind_mask(host, ("step",)))
    found = [(i, _STEP_NUMBER.search(n)) for i, n in zip(at.tolist(), name[at]) if isinstance(n, str)]
    found = [(i, int(m.group(1))) for i, m in found if m]  # the name's last number
    rows = np.array([i for i, _ in found], dtype=np.int64)
    steps = pd.DataFrame({"step": np.array([k for _, k in found], dtype=np.int64), "start_ns": start[rows],
                          "end_ns": end[rows]})
    return spans, steps


def _host_nodes(gpu: pd.DataFrame, host: pd.DataFrame | None) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """One row per launch or sync call (start_ns, end_ns, sync (bool), name), by start, end and
    syncs first, one per (start, end); and per GPU row, the row of its launch call (NONE unknown)."""
    known = gpu["launch_start_ns"].notna().to_numpy()
    ls = gpu["launch_start_ns"].to_numpy(dtype=np.float64, na_value=np.nan)[known].astype(np.int64)
    ld = gpu["launch_dur_ns"].to_numpy(dtype=np.float64, na_value=np.nan)[known].astype(np.int64)
    start, end, sync, name = ls, ls + ld, np.zeros(len(ls), bool), _filled(len(ls), "launch")
    n_sync = 0
    if host is not None and len(host):
        at = kind_mask(host, ("sync",))
        s = host["start_ns"].to_numpy(dtype=np.int64)[at]
        n_sync = len(s)
        start = np.r_[s, start]
        end = np.r_[s + host["dur_ns"].to_numpy(dtype=np.int64)[at], end]
        sync = np.r_[np.ones(n_sync, bool), sync]
        name = np.r_[np.asarray(host["name"].array, dtype=object)[at].astype(str).astype(object), name]
    order = np.lexsort((~sync, end, start))  # stable: by start, end, syncs first, then as listed
    s_sorted, e_sorted = start[order], end[order]
    new = np.r_[True, (s_sorted[1:] != s_sorted[:-1]) | (e_sorted[1:] != e_sorted[:-1])] if len(order) else \
        np.zeros(0, bool)
    kept = order[new]  # the first call of each (start, end)
    row_of = np.empty(len(order), np.int64)
    row_of[order] = np.cumsum(new) - 1
    launch_of = np.full(len(gpu), NONE, np.int64)
    launch_of[known] = row_of[n_sync:]
    nodes = {"start_ns": start[kept].astype(np.int64), "end_ns": end[kept].astype(np.int64), "sync": sync[kept],
             "name": name[kept].astype(object)}  # columns as arrays: _gpu_graph reads them so
    return nodes, launch_of


def _step_of(start_ns: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """The step of the latest-starting step range holding each time, -1 outside every one."""
    if not len(steps):
        return np.full(len(start_ns), NONE, dtype=np.int64)
    order = np.argsort(steps["start_ns"].to_numpy(), kind="stable")
    s0 = steps["start_ns"].to_numpy(dtype=np.int64)[order]
    s1 = steps["end_ns"].to_numpy(dtype=np.int64)[order]
    num = steps["step"].to_numpy(dtype=np.int64)[order]
    i = np.searchsorted(s0, start_ns, side="right") - 1
    inside = (i >= 0) & (start_ns < s1[np.maximum(i, 0)])
    return np.where(inside, num[np.maximum(i, 0)], NONE)


def _gpu_graph(gpu: pd.DataFrame, host: pd.DataFrame | None, rank: int, device: Device | None,
               counts: bool = True) -> RankGraph:
    hn, launch_of = _host_nodes(gpu, host)
    spans, steps = _spans(host)
    known = gpu["launch_start_ns"].notna()
    g_start = gpu["start_ns"].to_numpy(dtype=np.int64)
    g_end = g_start + gpu["dur_ns"].to_numpy(dtype=np.int64)
    g_step = gpu["step"].fillna(NONE).to_numpy(dtype=np.int64)
    h_step = _step_of(hn["start_ns"], steps)
    if not len(steps):  # no host step ranges: a launch takes its first GPU row's step
        first = pd.Series(g_step[known.to_numpy()]).groupby(launch_of[known.to_numpy()]).first()
        h_step[first.index.to_numpy()] = first.to_numpy()
    streams = gpu["stream"].fillna(-1).to_numpy(dtype=np.int64)
    labels = ["host"] + [f"stream {s}" for s in np.unique(streams)]
    n_h = len(hn["start_ns"])
    chain = np.r_[np.zeros(n_h, np.int32), 1 + np.searchsorted(np.unique(streams), streams).astype(np.int32)]
    comm = (gpu["op_class"] == "communication").to_numpy() & (gpu["kind"] == "kernel").to_numpy()
    names = np.r_[hn["name"], str_array(gpu["kernel"])]
    notes = [] if known.any() else [Note("launches_unknown")]
    graph_gap = _graph_gap_ns(g_start, g_end, launch_of, streams)
    return RankGraph(
        rank=rank, kind=np.r_[np.where(hn["sync"], SYNC, LAUNCH), np.where(comm, COLL, GPU)].astype(np.int8),
        chain=chain, start_ns=np.r_[hn["start_ns"], g_start], end_ns=np.r_[hn["end_ns"], g_end], step=np.r_[h_step, g_step],
        name=names, scope=np.r_[_filled(n_h, ""), str_array(gpu["scope"])],
        op_class=np.r_[_filled(n_h, "host"), str_array(gpu["op_class"])],
        msg_bytes=np.r_[np.full(n_h, np.nan), gpu["msg_bytes"].to_numpy(dtype=np.float64)],
        process_group=np.r_[_filled(n_h, ""), str_array(gpu["process_group"])],
        roof_ns=np.r_[np.full(n_h, np.nan), least_time_ns(gpu, min_ns_of(gpu, device)[0]) if device is not None
                      else np.full(len(gpu), np.nan)],
        event_row=np.r_[np.full(n_h, NONE, np.int64), np.arange(len(gpu), dtype=np.int64)],
        launch=np.r_[np.full(n_h, NONE, np.int64), np.where(launch_of >= 0, launch_of, NONE)],
        copy=np.r_[np.zeros(n_h, bool), gpu["kind"].isin(("memcpy", "memset")).to_numpy(dtype=bool)],
        chain_labels=labels, cpu_only=False, host_spans=spans, step_ranges=steps, notes=notes, graph_gap_ns=graph_gap,
        **(_gpu_counts(hn, launch_of, len(gpu), host, steps) if counts else {}))


def _gpu_counts(hn: dict[str, np.ndarray], launch_of: np.ndarray, n_gpu: int, host: pd.DataFrame | None,
                steps: pd.DataFrame) -> dict:
    """RankGraph's profiled_before, profiled_inside and regions of a GPU trace's graph: the host
    nodes' (`hn`) records, none on its `n_gpu` GPU nodes (after them)."""
    n_h = len(hn["start_ns"])
    before, inside = node_counts(hn["start_ns"], hn["end_ns"], np.ones(n_h, bool), host)
    # a launch call's records: one per GPU op it launched (a graph launch's every kernel: CUPTI records each)
    launched = launch_of[launch_of >= 0]
    inside[:, 1] = np.bincount(launched, minlength=n_h)[:n_h] if len(launched) else 0
    regions = region_counts(region_spans(host, steps), np.asarray(hn["start_ns"], dtype=np.int64), before + inside,
                            hn["sync"])
    return {"profiled_before": np.r_[before, np.zeros((n_gpu, 3))],
            "profiled_inside": np.r_[inside, np.zeros((n_gpu, 3))], "regions": regions}


def _filled(n: int, value: str) -> np.ndarray:
    """An object array of `n` times the one str `value` (np.full makes a new str per element: 5x the time)."""
    out = np.empty(n, dtype=object)
    out.fill(value)
    return out


def _graph_gap_ns(start: np.ndarray, end: np.ndarray, launch_of: np.ndarray, streams: np.ndarray) -> float:
    """The median gap between consecutive GPU ops of one launch call on one stream (a CUDA
    graph replay's kernels), NaN where no launch call started several."""
    ok = launch_of >= 0
    if ok.sum() < 2:
        return float("nan")
    idx = np.flatnonzero(ok)
    idx = idx[np.lexsort((start[idx], streams[idx], launch_of[idx]))]
    same = (launch_of[idx[1:]] == launch_of[idx[:-1]]) & (streams[idx[1:]] == streams[idx[:-1]])
    gaps = start[idx[1:]][same] - end[idx[:-1]][same]
    gaps = gaps[gaps >= 0]
    return float(np.median(gaps)) if len(gaps) else float("nan")


def _cpu_graph(cpu: pd.DataFrame, host: pd.DataFrame | None, rank: int, counts: bool = True) -> RankGraph:
    """CPU-only trace: the CPU operators are the host's work, the gloo ranges the collectives."""
    spans, steps = _spans(host)
    names = cpu["name"].astype(str).to_numpy(dtype=object)
    coll = np.array([_CPU_COLL.match(n) is not None for n in names], dtype=bool)
    tids = cpu["stream"].fillna(-1).to_numpy(dtype=np.int64)
    start = cpu["start_ns"].to_numpy(dtype=np.int64)
    end = start + cpu["dur_ns"].to_numpy(dtype=np.int64)
    keys = sorted({(bool(c), int(t)) for c, t in zip(coll, tids)})
    labels = [f"{'worker ' if c else ''}thread {t}" for c, t in keys]
    chain = np.array([keys.index((bool(c), int(t))) for c, t in zip(coll, tids)], dtype=np.int32)
    launch = np.full(len(cpu), NONE, np.int64)
    host_rows = np.flatnonzero(~coll)
    if len(host_rows) and coll.any():  # a collective is enqueued by the latest host op begun before it
        order = host_rows[np.argsort(start[host_rows], kind="stable")]
        at = np.searchsorted(start[order], start[coll], side="right") - 1
        launch[coll] = np.where(at >= 0, order[np.maximum(at, 0)], NONE)
    counted = {}
    if counts:
        before, inside = node_counts(start, end, ~coll, host, tids)
        counted = {"profiled_before": before, "profiled_inside": inside, "regions": step_regions(host, steps)}
    return RankGraph(
        rank=rank, kind=np.where(coll, COLL, HOST_OP).astype(np.int8), chain=chain, start_ns=start, end_ns=end,
        step=cpu["step"].fillna(NONE).to_numpy(dtype=np.int64), name=names,
        scope=cpu["scope"].astype(str).to_numpy(dtype=object), op_class=cpu["op_class"].astype(str).to_numpy(dtype=object),
        msg_bytes=cpu["msg_bytes"].to_numpy(dtype=np.float64),
        process_group=cpu["process_group"].astype(str).to_numpy(dtype=object), roof_ns=np.full(len(cpu), np.nan),
        event_row=np.arange(len(cpu), dtype=np.int64),
        launch=launch, copy=np.zeros(len(cpu), bool), chain_labels=labels, cpu_only=True, host_spans=spans, step_ranges=steps,
        **counted)


def shared_graph(rank: RankData, counts: bool = True) -> RankGraph:
    """The rank's graph without roofline times, made once per rank (RankData.shared): the
    path_bounds digest (whatif/bound.py) and the whatif digest read the same one. `counts`: with
    the profiler's records (rank_graph), which only the whatif digest's replays read: path_bounds
    takes the graph with them where the whatif digest made it (a job of up to 16 ranks), else one
    without them (a third of the graph's time); a later ask with `counts` makes the counted one."""
    def made(with_counts: bool) -> RankGraph:
        return _profiled(rank_graph(rank.events, rank.host, rank.meta.rank, stalls=shared_stalls(rank),
                                    counts=with_counts), rank)

    if counts or "whatif.graph" in rank.memo:
        return rank.shared("whatif.graph", lambda: made(True))
    return rank.shared("whatif.graph.uncounted", lambda: made(False))


def _profiled(graph: RankGraph, rank: RankData) -> RankGraph:
    """`graph` with how its trace was profiled (profiler_cost.Config)."""
    graph.profiler = config_of(rank.meta, rank.memory, not graph.cpu_only)
    return graph


def with_roofline(graph: RankGraph, events: pd.DataFrame, device: Device | None) -> RankGraph:
    """A copy of `graph` (made without a device) whose GPU ops carry their least time on
    `device`'s roofline, as rank_graph(..., device) gives; the arrays it shares are not written."""
    gpu = timed(events)
    if device is None or graph.cpu_only or not len(gpu):
        return replace(graph, notes=list(graph.notes))
    gpu = gpu.reset_index(drop=True)
    roof = np.r_[np.full(len(graph) - len(gpu), np.nan), least_time_ns(gpu, min_ns_of(gpu, device)[0])]
    return replace(graph, roof_ns=roof, notes=list(graph.notes))


class RankGraphReduce:
    """load_many's reduce: one rank's graph, made in the worker that parsed it; None for a rank
    of a job of more than `max_ranks` (the findings' replay keeps no graphs of big jobs)."""

    def __init__(self, max_ranks: int | None = None):
        self.max_ranks = max_ranks

    def __call__(self, rank: RankData) -> RankGraph | None:
        meta = rank.meta
        if self.max_ranks is not None and (meta.world_size or 1) > self.max_ranks:
            return None
        graph = with_roofline(shared_graph(rank), rank.events, trace_device(meta))
        if meta.source == "proton":
            graph.notes.append(Note("no_timeline"))
        return graph


def step_counts(events: pd.DataFrame, host: pd.DataFrame | None, meta) -> pd.DataFrame:
    """Per step of one rank (its host step ranges): the CPU operators, launch calls and ranges the
    profiler recorded in it (columns step, *COUNTED). A proton trace has no timeline: one row
    (step -1) of its kernel launches per step covered (meta.steps), no operators or ranges."""
    if meta.source == "proton":
        launches = float(events["count"].fillna(1).sum()) / max(meta.steps or 1, 1)
        return pd.DataFrame({"step": [-1], "cpu_ops": [0.0], "launches": [launches], "ranges": [0.0]})
    _, steps = _spans(host)
    out = pd.DataFrame({"step": steps["step"].to_numpy()}).drop_duplicates().reset_index(drop=True)
    for name, kinds in (("cpu_ops", ("cpu_op",)), ("ranges", RANGE_KINDS)):
        rows = host[kind_mask(host, kinds)] if host is not None else host
        at = _step_of(rows["start_ns"].to_numpy(np.int64), steps) if rows is not None else np.empty(0, np.int64)
        out[name] = out["step"].map(pd.Series(at).value_counts()).fillna(0).to_numpy(np.float64)
    launched = events[events["launch_start_ns"].notna()]  # each GPU op a launch call started
    per = launched["step"].dropna().astype(np.int64).value_counts()
    out["launches"] = out["step"].map(per).fillna(0).to_numpy(np.float64)
    return out[["step", *COUNTED]]
