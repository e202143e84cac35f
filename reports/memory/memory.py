"""Where the memory went, per rank and step: the memory frame (schema.MEMORY_COLUMNS) and the
host frame in, tables out. Pure.

One device per rank: the GPU with the most memory events, else the CPU (-1). A step is the
rows the parser placed in its step range (`step`); a trace without steps is one window
(step NA). Per step:

- `allocated_start_bytes`: the allocated total before the step's first event (its total
  after, less its bytes); `allocated_end_bytes`: the total after its last;
- `peak_allocated_bytes`: the most allocated after any of its events (or at its start),
  `peak_at_ns` when (the events' clock), `peak_during` the op and scope open then;
- `reserved_bytes`: the reserved total at that peak, `held_back_bytes` reserved less
  allocated there (what the caching allocator holds back);
- `alloc_calls`, `alloc_ns`, `alloc_sync_calls`: the allocator's own calls (host frame kind
  `alloc`, and the synchronising frees) within the step's span, their CPU time, how many
  synchronised (cudaFree does);
- `top`: the blocks live at the peak (allocated in the trace, not freed by then: per address,
  the last event up to the peak is an allocation) summed by op, scope and module, the N largest
  of each, and `(allocated before the trace)`: the allocated total at the peak less those
  blocks, by "before_trace" (weights, optimizer state, whatever was allocated before the
  profiler started).

Where the source gives no allocated total (nsys: CUDA's allocations only), the peak is of the
reserved total and the allocated figures are None; `notes` say so.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracelab.core.note import Note
from tracelab.core.schema import RankData

from .live import BEFORE_TRACE, GROUPS, live_tops  # noqa: F401  (BEFORE_TRACE, GROUPS: this module's names too)

STEP_COLUMNS = ["rank", "step", "device", "allocated_start_bytes", "allocated_end_bytes", "peak_allocated_bytes",
                "peak_at_ns", "peak_during", "reserved_bytes", "held_back_bytes", "alloc_calls", "alloc_ns",
                "alloc_sync_calls"]
TOP_COLUMNS = ["rank", "step", "by", "name", "bytes"]
TIMELINE_POINTS = 2000  # points kept per rank for the report's timeline
NO_ALLOCATED = Note("allocated_unknown")


@dataclass
class RankMemory:
    """One rank's memory digest, made in the worker that parsed it: per step (STEP_COLUMNS),
    what was live at each step's peak (TOP_COLUMNS), the timeline (time_ns, allocated_bytes,
    reserved_bytes, at most TIMELINE_POINTS), the steps' spans and notes."""

    rank: int
    steps: pd.DataFrame
    top: pd.DataFrame
    timeline: pd.DataFrame
    spans: pd.DataFrame
    notes: list[str] = field(default_factory=list)


def main_device(memory: pd.DataFrame) -> int:
    """The rank's device: the GPU with the most memory events, else the CPU (-1)."""
    gpu = memory.loc[memory["device"] >= 0, "device"]
    return int(gpu.value_counts().idxmax()) if len(gpu) else -1


def rank_memory(memory: pd.DataFrame | None, host: pd.DataFrame | None, rank: int, top: int | None = 10,
                source: str | None = None, timed: bool = True) -> RankMemory:
    """The digest of one rank (module docstring); `memory` None: the trace recorded none. Not
    `timed` (a snapshot without timestamps, whose time_ns are its actions' places): no peak time
    (None), and a note of the action it is at, so an action's place is never shown as a time."""
    if memory is None or not len(memory):
        return RankMemory(rank, _frame(STEP_COLUMNS), _frame(TOP_COLUMNS), _frame(["time_ns", "allocated_bytes",
                          "reserved_bytes"]), _frame(["step", "start_ns", "end_ns"]), [Note("proton_no_memory" if source == "proton" else "no_memory_events")])
    device = main_device(memory)
    mem = memory[memory["device"] == device].reset_index(drop=True)
    level = _level(mem)
    spans = with_host_spans(step_spans(mem), host)
    calls, allocated = AllocatorCalls(host), mem["total_allocated_bytes"].astype("float64").to_numpy()
    rows, ats, peaks = [], [], []
    for _, span in spans.iterrows():
        row, at, peak = _step(mem, level, allocated, span, calls)
        rows.append({"rank": rank, "device": device, **row})
        ats.append(at)
        peaks.append(peak)
    tops = live_tops(mem, np.array(ats, dtype=np.int64), np.array(peaks, dtype=np.float64), spans["step"], top)
    notes = ([] if mem["total_allocated_bytes"].notna().any() else [NO_ALLOCATED])
    if timed:
        notes += _before_start(rows)
    else:
        notes += _untimed(rows, len(mem))
    return RankMemory(rank, pd.DataFrame(rows, columns=STEP_COLUMNS), tops.assign(rank=rank)[TOP_COLUMNS],
                      timeline(mem), spans, notes)


def _untimed(rows: list[dict], events: int) -> list[Note]:
    """Each peak's time made unknown (None) and said by its memory event instead (1-based, of the
    rank's device's `events`): without timestamps a row's time_ns is only its action's place."""
    notes = []
    for row in rows:
        row["peak_at_ns"] = None
        at = row["peak_row"]
        notes.append(Note("peak_at_event", {"event": None if at is None else at + 1, "events": events}))
    return notes


def _before_start(rows: list[dict]) -> list[Note]:
    """A note where a peak falls before the trace's start (time 0): memory allocated before the
    capture began (nsys counts CUDA's allocations since the process began), so its time is
    negative, not an error."""
    early = [r for r in rows if r["peak_at_ns"] < 0]
    if not early:
        return []
    first = min(r["peak_at_ns"] for r in early)
    return [Note("peaks_before_start", {"peaks": len(early), "steps": len(rows), "peak_at_ns_min": int(first)})]


def _frame(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: [] for c in columns})


def _level(mem: pd.DataFrame) -> np.ndarray:
    """The total the peak is of: allocated where the source gives it, else reserved."""
    column = "total_allocated_bytes" if mem["total_allocated_bytes"].notna().any() else "total_reserved_bytes"
    return mem[column].astype("float64").to_numpy()


def step_spans(mem: pd.DataFrame) -> pd.DataFrame:
    """Per step, the first and last row index and time of its events; one window (step NA) without steps."""
    stepped = mem[mem["step"].notna()]
    if not len(stepped):
        return pd.DataFrame({"step": [pd.NA], "first": [0], "last": [len(mem) - 1], "start_ns": [mem["time_ns"].min()],
                             "end_ns": [mem["time_ns"].max()]})
    g = stepped.reset_index().groupby("step", sort=True)
    return pd.DataFrame({"step": pd.array(list(g.groups), dtype="Int64"), "first": g["index"].min().to_numpy(),
                         "last": g["index"].max().to_numpy(), "start_ns": g["time_ns"].min().to_numpy(),
                         "end_ns": g["time_ns"].max().to_numpy()})


def with_host_spans(spans: pd.DataFrame, host: pd.DataFrame | None) -> pd.DataFrame:
    """The steps' spans widened to their step ranges on the host (kind `step`) where the host
    frame has them: a step's allocator calls start before its first memory event (cudaMalloc
    runs, then the allocator reports the block). A host range is the step whose span it holds."""
    if host is None or spans["step"].isna().all():
        return spans
    ranges = host[host["kind"] == "step"]
    out = spans.copy()
    for k, row in spans.iterrows():
        holds = ranges[(ranges["start_ns"] <= row["start_ns"]) & (ranges["start_ns"] + ranges["dur_ns"] >= row["end_ns"])]
        if len(holds):
            inner = holds.loc[holds["dur_ns"].idxmin()]  # the innermost range that holds it
            out.loc[k, ["start_ns", "end_ns"]] = [int(inner["start_ns"]), int(inner["start_ns"] + inner["dur_ns"])]
    return out


def _step(mem: pd.DataFrame, level: np.ndarray, allocated: np.ndarray, span: pd.Series,
          calls: "AllocatorCalls") -> tuple[dict, int, float]:
    """One step's row (STEP_COLUMNS but rank and device), its peak's row and allocated total."""
    first, last = int(span["first"]), int(span["last"])
    index = np.arange(first, last + 1)
    index = index[mem["step"].iloc[index].eq(span["step"]).fillna(True).to_numpy()] if pd.notna(span["step"]) else index
    start = allocated[index[0]] - mem["bytes"].iloc[index[0]]
    at = index[np.nanargmax(level[index])] if not np.isnan(level[index]).all() else index[0]
    at_start = not np.isnan(start) and start > level[at]
    peak_ns = int(mem["time_ns"].iloc[index[0]] if at_start else mem["time_ns"].iloc[at])
    reserved = mem["total_reserved_bytes"].iloc[at]
    peak = start if at_start else allocated[at]
    row = {"step": span["step"], "allocated_start_bytes": _int(start), "allocated_end_bytes": _int(allocated[index[-1]]),
           "peak_allocated_bytes": _int(peak), "peak_at_ns": peak_ns, "peak_row": None if at_start else int(at), "peak_during": _during(mem, at),
           "reserved_bytes": _int(reserved), "held_back_bytes": _int(reserved - peak) if pd.notna(reserved) and
           not np.isnan(peak) else None, **calls.between(int(span["start_ns"]), int(span["end_ns"]))}
    return row, int(at), float(peak)


def _int(value) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def _during(mem: pd.DataFrame, at: int) -> str:
    op, scope = mem["op"].iloc[at], mem["scope"].iloc[at]
    return f"{op} in {scope}" if op and scope else op or scope or ""


class AllocatorCalls:
    """The allocator's calls (host kind `alloc`, and the synchronising frees), found once per rank
    and sorted by start, so each step's count is two searches (between)."""

    def __init__(self, host: pd.DataFrame | None):
        self.known = host is not None
        if not self.known:
            return
        calls = host[is_allocator(host)]
        order = np.argsort(calls["start_ns"].to_numpy(), kind="stable")
        self.start_ns = calls["start_ns"].to_numpy(dtype=np.int64)[order]
        self.dur_ns = np.r_[0, np.cumsum(calls["dur_ns"].to_numpy(dtype=np.int64)[order])]
        self.syncs = np.r_[0, np.cumsum((calls["kind"] == "sync").to_numpy()[order])]

    def between(self, start_ns: int, end_ns: int) -> dict[str, int | None]:
        """The calls starting within [start_ns, end_ns]: how many, their CPU time, how many
        synchronised; None without a host frame."""
        if not self.known:
            return {"alloc_calls": None, "alloc_ns": None, "alloc_sync_calls": None}
        lo = int(np.searchsorted(self.start_ns, start_ns, "left"))
        hi = int(np.searchsorted(self.start_ns, end_ns, "right"))
        return {"alloc_calls": hi - lo, "alloc_ns": int(self.dur_ns[hi] - self.dur_ns[lo]),
                "alloc_sync_calls": int(self.syncs[hi] - self.syncs[lo])}


def is_allocator(host: pd.DataFrame) -> pd.Series:
    """Mask of the host frame's allocator calls: kind `alloc`, and the frees among the sync calls."""
    return (host["kind"] == "alloc") | ((host["kind"] == "sync") & host["name"].str.contains("Free", regex=False))


def timeline(mem: pd.DataFrame, points: int = TIMELINE_POINTS) -> pd.DataFrame:
    """allocated and reserved over time, at most `points` rows: where there are more events,
    per bin of time the row of the highest level (the peaks survive the thinning)."""
    out = pd.DataFrame({"time_ns": mem["time_ns"].to_numpy(), "allocated_bytes": mem["total_allocated_bytes"],
                        "reserved_bytes": mem["total_reserved_bytes"]})
    if len(out) <= points:
        return out
    level = _level(mem)
    edges = np.linspace(out["time_ns"].min(), out["time_ns"].max() + 1, points // 2 + 1)
    bins = np.searchsorted(edges, out["time_ns"].to_numpy(), side="right")
    keep = pd.Series(np.nan_to_num(level, nan=-1)).groupby(bins).idxmax().to_numpy()
    firsts = pd.Series(np.arange(len(out))).groupby(bins).min().to_numpy()
    return out.iloc[np.unique(np.r_[keep, firsts])].reset_index(drop=True)


class RankMemoryDigest:
    """A per-rank reducer (schema.RankData): one rank's RankMemory, made in the worker that
    parsed it (the rank is set where the digests meet: across.combine)."""

    def __init__(self, top: int | None = 10):
        self.top = top

    def __call__(self, rank: RankData) -> RankMemory:
        timed = not any(note.code == "snapshot_untimed" for note in rank.meta.notes)
        return rank_memory(rank.memory, rank.host, -1, self.top, rank.meta.source, timed)


DIGESTS = {"memory": RankMemoryDigest()}  # memory's per-rank digest (reports/topics.py)
