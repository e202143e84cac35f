"""One Chrome/Perfetto trace (JSON object format) of every rank of one or several runs.

    doc = perfetto.trace(inputs, ranks={0, 1}, window_ns=(0, 5_000_000))   # a plain dict

A process per (run, rank), a track per stream, kernels, copies and sets as complete
("X") events; scopes as slices over the kernels they hold on their stream, and steps
(where the events carry a `step` column) on a track of their own; each collective
matched across the ranks of a run (reports/timeline/collectives.py) linked by flow events. Pure:
no file is read or written here (the CLI writes the dict).

Clocks: each trace's start_ns counts from its own first event. A run's ranks are put on
one clock as the collectives work estimates it: the traces' epoch starts where the
collectives' ends then agree (a collective ends on every rank at about the same moment),
else offsets from those ends, else each trace from its start; otherData.tracelab.clocks
says which, per run, with each rank's offset.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import msgspec
import numpy as np
import pandas as pd

from tracelab.core import limits
from tracelab.core.errors import UsageError
from ..timeline import collectives as C
from ..html.slices import lanes, scope_slices, step_slices
from ..ranks import Input
from ..timeline.intervals import clock_offsets

MATCHING = ("reports/timeline/collectives.py: the i-th launch of a communication kernel of one message size on one "
            "rank is the i-th such launch on every other rank of its run (streams need not have the same id)")
SCOPE_NOTE = "a scope slice spans the kernels it holds on that stream (first start to last end)"


def timed_rows(events: pd.DataFrame) -> pd.DataFrame:
    """Rows with a start time, sorted by it; start_ns as int64 and end_ns added."""
    rows = events[events["start_ns"].notna()].copy()
    rows["start_ns"] = rows["start_ns"].astype("int64")
    rows["end_ns"] = rows["start_ns"] + rows["dur_ns"]
    return rows.sort_values(["start_ns", "end_ns"], kind="stable")


def align(comm: pd.DataFrame, epochs: dict[int, int | None]) -> tuple[dict[int, int], str, pd.DataFrame]:
    """rank -> ns to add to its start_ns, how that was found, and the run's matched
    collectives on that clock (reports/timeline/collectives.py), from every rank's communication rows
    (collectives.comm_rows; `epochs` names the run's ranks). The traces' epoch starts where
    every rank gives one and the collectives' ends then agree (collectives.clock_check); else
    each rank's offset from the collective ends (collectives.end_offsets, the median over
    them); else each trace from its own first event."""
    ranks = sorted(int(r) for r in epochs)
    offsets = clock_offsets([{"rank": r, "trace_start_epoch_ns": epochs.get(r)} for r in ranks])
    coll = C.match(comm, offsets)
    if offsets is not None and (coll.empty or C.clock_check(coll)["agree"]):
        return offsets, "trace starts on the epoch clock" + (", collective ends agree" if len(coll) else ""), coll
    if coll.empty:
        return {r: 0 for r in ranks}, "each trace from its own first event (no epoch start, no collective)", coll
    base = offsets or {}
    offsets = {r: base.get(r, 0) + C.end_offsets(coll).get(r, 0) for r in ranks}
    why = "the traces give no common clock" if not base else "their ends disagreed on the epoch clock"
    return offsets, f"estimated from the ends of {coll['collective'].nunique()} collectives ({why})", \
        C.match(comm, offsets)


def parse_window_ms(text: str) -> tuple[int, int]:
    """'START_MS:END_MS' (either side may be empty) -> (start_ns, end_ns); each a finite
    number of ms within the clock's range (limits.MAX_TIME_NS), NaN and inf refused."""
    start, sep, end = text.partition(":")
    bound_ms = limits.MAX_TIME_NS / 1e6
    try:
        lo = float(start) if start.strip() else 0.0
        hi = float(end) if end.strip() else None
    except ValueError:
        raise UsageError("--window", f"{text!r} is not START_MS:END_MS") from None
    if not sep or not 0 <= lo <= bound_ms or (hi is not None and not lo < hi <= bound_ms):
        raise UsageError("--window", f"{text!r} is not START_MS:END_MS with 0 <= START < END <= {bound_ms:.3g} "
                                     "(finite numbers of ms)")
    return int(lo * 1e6), (int(hi * 1e6) if hi is not None else np.iinfo(np.int64).max)


MAX_LISTED = 2**20  # ranks or steps one option may name: no job has more


def parse_ints(option: str, text: str) -> set[int]:
    """'0,2,4-7' -> {0, 2, 4, 5, 6, 7}; each number within 0..2**31-1 and at most MAX_LISTED
    of them, checked before any range is built (`0-99999999999` is refused, not counted out)."""
    spans: list[tuple[int, int]] = []
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            lo, _, hi = part.partition("-")
            spans.append((int(lo), int(hi or lo)))
    except ValueError:
        raise UsageError(option, f"{text!r} is not a list such as 0,2,4-7") from None
    if bad := [s for s in spans if not 0 <= s[0] <= s[1] <= limits.INT32[1]]:
        raise UsageError(option, f"{bad[0][0]}-{bad[0][1]} is not a range of numbers from 0 to {limits.INT32[1]}, "
                                 "low to high")
    if (count := sum(hi - lo + 1 for lo, hi in spans)) > MAX_LISTED:
        raise UsageError(option, f"{text!r} names {count:,} numbers, more than {MAX_LISTED:,}")
    out = {n for lo, hi in spans for n in range(lo, hi + 1)}
    if not out:
        raise UsageError(option, f"{text!r} names none")
    return out


# About 1 GB of JSON (~480 bytes an event, benchmarks/RESULTS.md): Perfetto's UI works in a
# browser tab of ~2 GB and holds a trace at 2-4x its size (perfetto.dev, "Visualising large traces").
MAX_EVENTS = 2_000_000


def rows_of_steps(events: pd.DataFrame, steps: frozenset[int]) -> pd.DataFrame:
    """The rows of these steps: what `export perfetto --steps` needs of a rank, kept in the
    worker that parsed it (inputs.with_events), so a thousand ranks' other steps never travel."""
    return events[events["step"].isin(list(steps))]


def oversize(inputs: Iterable[Input], ranks: set[int] | None, steps: set[int] | None,
             max_events: int) -> tuple[int, int, str] | None:
    """When the merged trace of these ranks and steps would be too large for Perfetto's UI
    (more than max_events rows, estimated from each rank's sums and, with steps, the share
    of its steps picked): (the rows, the ranks, ranks to pick instead, as "0-2,777": the ranks
    whose compute is an outlier and the first ones, as many as fit); None if it fits or
    max_events is 0."""
    timed = [i for i in inputs if i.timed and (ranks is None or i.rank in ranks)]
    if not max_events or not timed:
        return None
    rows = 0.0
    for i in timed:
        share = 1.0
        if steps is not None:
            known = _steps_of(i)
            share = len(known & steps) / len(known) if known else 1.0
        rows += share * float(i.sums["count"].sum())
    if rows <= max_events:
        return None
    from ..html.figures import TIMELINE_RANKS, outliers_and_first

    fit = max(1, min(TIMELINE_RANKS, int(max_events // (rows / len(timed)))))  # ranks of a typical size that fit
    return int(rows), len(timed), _ranges(sorted({i.rank for i in outliers_and_first(timed, fit)}))


def _ranges(numbers: list[int]) -> str:
    """'0-11,777' for [0, 1, ..., 11, 777]."""
    parts, start = [], None
    for k, n in enumerate(numbers):
        if start is None:
            start = n
        if k + 1 == len(numbers) or numbers[k + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ",".join(parts)


def _select(rows: pd.DataFrame, steps: set[int] | None, window_ns: tuple[int, int] | None) -> pd.DataFrame:
    """Rows of the chosen steps that overlap the window (start_ns already on the run's clock)."""
    if steps is not None:
        rows = rows[rows["step"].isin(steps)]
    if window_ns is not None:
        rows = rows[(rows["end_ns"] > window_ns[0]) & (rows["start_ns"] < window_ns[1])]
    return rows


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


@dataclass
class Pick:
    """What to keep: ranks, steps, and a window in ns on the run's merged clock (None: all)."""

    ranks: set[int] | None = None
    steps: set[int] | None = None
    window_ns: tuple[int, int] | None = None


class _Builder:
    """Collects trace events; pids and tids are small integers named by metadata events.
    With a `sink`, flush() hands the events so far to it as JSON text (comma-separated, no
    brackets) and drops them, so a large trace is never held as Python objects at once."""

    def __init__(self, sink: Callable[[bytes], object] | None = None) -> None:
        self.events: list[dict] = []
        self.flow_id = 0
        self.sink, self.written = sink, 0

    def flush(self) -> None:
        if self.sink is None or not self.events:
            return
        self.sink((b"," if self.written else b"") + msgspec.json.encode(self.events)[1:-1])
        self.written += len(self.events)
        self.events = []

    def process(self, pid: int, name: str) -> None:
        self.events += [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
                        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}]

    def thread(self, pid: int, tid: int, name: str) -> None:
        self.events += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}},
                        {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}]

    def slice(self, pid: int, tid: int, name: str, cat: str, start_ns: int, end_ns: int, args: dict) -> None:
        self.events.append({"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid,
                            "ts": _us(start_ns), "dur": _us(end_ns - start_ns), "args": args})

    def flow(self, name: str, ends: list[tuple[int, int, int]]) -> None:
        """Link (pid, tid, ns) points, each inside a slice, one flow per consecutive pair."""
        for (p0, t0, ns0), (p1, t1, ns1) in zip(ends, ends[1:]):
            self.flow_id += 1
            common = {"name": name, "cat": "collective", "id": self.flow_id}
            self.events += [{**common, "ph": "s", "pid": p0, "tid": t0, "ts": _us(ns0)},
                            {**common, "ph": "f", "bp": "e", "pid": p1, "tid": t1, "ts": _us(ns1)}]


ARG_COLUMNS = ("kernel", "op_class", "scope", "stream", "step", "bytes", "msg_bytes", "flops", "count")


def _plain_column(values: pd.Series, key: str) -> list:
    """JSON values of one column, None where it says nothing (NA, "", a count of 1)."""
    if key in ("kernel", "op_class", "scope"):
        return [v or None for v in values.astype(str).tolist()]
    if key in ("stream", "step"):
        return values.astype("Int64").astype(object).where(values.notna(), None).tolist()
    if key == "count":
        return values.astype(object).where(values != 1, None).tolist()
    return values.astype(object).where(values.notna(), None).tolist()


def args_of(rows: pd.DataFrame) -> list[dict]:
    """Per row, the schema fields that say something, as plain JSON values."""
    cols = {k: _plain_column(rows[k], k) for k in ARG_COLUMNS if k in rows.columns}
    return [{k: v for k, v in zip(cols, values) if v is not None} for values in zip(*cols.values())]


def _stream_tracks(b: _Builder, pid: int, rows: pd.DataFrame, first_tid: int) -> dict:
    """The rank's rows, one track per stream (and lane), with its scopes over lane 0; CPU
    operators (no stream) on a track of their own. Returns index -> (tid, mid-point ns) for
    flow ends. Columns are turned into Python lists once per rank: per-stream pandas calls
    cost more than the events at 64 ranks."""
    start, end = rows["start_ns"].to_numpy(np.int64), rows["end_ns"].to_numpy(np.int64)
    names, kinds, args = rows["name"].astype(str).tolist(), rows["kind"].astype(str).tolist(), args_of(rows)
    scope, index = rows["scope"].fillna("").astype(str).to_numpy(object), rows.index.tolist()
    mid, start_list, end_list = ((start + end) // 2).tolist(), start.tolist(), end.tolist()
    codes, streams = pd.factorize(rows["stream"], sort=True)
    tid, where = first_tid, {}
    for code in sorted(set(codes.tolist())):
        on = np.flatnonzero(codes == code)
        lane = lanes(start[on], end[on])
        cpu = all(kinds[j] == "cpu_op" for j in on[:50].tolist())  # CPU-only traces put the thread in stream
        label = "CPU operators" if code < 0 else f"{'CPU thread' if cpu else 'stream'} {streams[code]}"
        for k in range(int(lane.max()) + 1):
            mine = on[lane == k]
            b.thread(pid, tid, label + (f" (overlapping, lane {k})" if k else ""))
            if k == 0:
                for s in scope_slices(scope[mine], start[mine], end[mine]).itertuples(index=False):
                    b.slice(pid, tid, s.name, "scope", s.start_ns, s.end_ns, {"scope": s.path})
            for j in mine.tolist():
                b.slice(pid, tid, names[j], kinds[j], start_list[j], end_list[j], args[j])
                where[index[j]] = (tid, mid[j])
            tid += 1
    return where


def _rank_process(b: _Builder, pid: int, name: str, rows: pd.DataFrame) -> dict:
    b.process(pid, name)
    tid = 1
    steps = step_slices(rows)
    if len(steps):
        b.thread(pid, tid, "steps")
        for s in steps.itertuples(index=False):
            b.slice(pid, tid, f"step {int(s.step)}", "step", s.start_ns, s.end_ns, {"step": int(s.step)})
        tid += 1
    return _stream_tracks(b, pid, rows, tid)


def _link_collectives(b: _Builder, coll: pd.DataFrame, kept: dict[int, pd.DataFrame], where: dict[int, dict],
                      pids: dict[int, int]) -> None:
    """A flow arrow between consecutive ranks' kernels of each matched collective, where
    both were kept. kept rows carry arrival_ns: their start on the clock `coll` is on."""
    index = {(r, k, t): i for r, rows in kept.items()
             for i, k, t in zip(rows.index, rows["kernel"].astype(str), rows["arrival_ns"])}
    for _, g in coll.sort_values(["collective", "rank"]).groupby("collective", sort=False):
        ends = [(pids[r], *where[r][index[(r, k, t)]]) for r, k, t in zip(g["rank"], g["kernel"], g["arrival_ns"])
                if (r, k, t) in index]
        if len(ends) > 1:
            b.flow(str(g["kernel"].iloc[0]), ends)


def _run(b: _Builder, group: str, members: list[Input], first_pid: int, pick: Pick, many_runs: bool) -> dict:
    """Put the run's ranks on one clock (all of them, so a --ranks subset keeps the run's
    times: from each rank's summaries, its communication rows and first start), then add
    the picked ranks' processes from first_pid on (only they need their events)."""
    offsets, how, coll = align(comm_rows(members), {i.rank: i.epoch_ns for i in members})
    origin = min(i.digest("first_ns") + offsets[i.rank] for i in members if i.digest("first_ns") is not None)
    picked = [i for i in members if pick.ranks is None or i.rank in pick.ranks]
    kept, where, pids = {}, {}, {}
    for i in picked:
        mine, shift = timed_rows(i.events), offsets[i.rank] - origin
        shifted = mine.assign(arrival_ns=mine["start_ns"] + offsets[i.rank], start_ns=mine["start_ns"] + shift,
                              end_ns=mine["end_ns"] + shift)
        rows = _select(shifted, pick.steps, pick.window_ns)
        pids[i.rank] = first_pid + len(pids)
        name = f"{group} rank {i.rank}" if many_runs and group else f"rank {i.rank}"
        where[i.rank] = _rank_process(b, pids[i.rank], f"{name} ({i.source})", rows)
        kept[i.rank] = rows[["kernel", "arrival_ns"]]  # what the flows need of it
        b.flush()
    _link_collectives(b, coll, kept, where, pids)
    b.flush()
    return {"run": group, "clock": how, "offsets_ns": {str(r): int(o - origin) for r, o in offsets.items()},
            "pids": {str(r): p for r, p in pids.items()}}


def comm_rows(members: list[Input]) -> pd.DataFrame:
    """The run's communication rows, every rank's (its who-waits digest's), each on its own clock."""
    parts = [i.digest("waits").comm.assign(rank=i.rank) for i in members]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _steps_of(i: Input) -> set[int]:
    """The steps a rank marks (its who-waits digest's step rows)."""
    return {int(s) for s in i.digest("waits").steps["step"].dropna().unique()}


def check_steps(inputs: list[Input], steps: set[int]) -> None:
    known = set().union(*map(_steps_of, inputs))
    if not known:
        raise UsageError("--steps", "the inputs mark no steps (no step ranges in the traces)")
    if not known & steps:
        raise UsageError("--steps", f"none of {_span(steps)} is in the inputs (their steps: {_span(known)})")


def _span(numbers: set[int]) -> str:
    """'3-7' for a contiguous set, else its first few: '1, 4, 9, ...'."""
    ordered = sorted(numbers)
    if ordered[-1] - ordered[0] == len(ordered) - 1:
        return f"{ordered[0]}-{ordered[-1]}" if len(ordered) > 1 else str(ordered[0])
    return ", ".join(map(str, ordered[:5])) + (", ..." if len(ordered) > 5 else "")


def trace(inputs: Iterable[Input], ranks: set[int] | None = None, steps: set[int] | None = None,
          window_ns: tuple[int, int] | None = None) -> dict:
    """The Chrome trace (JSON object format) of the timed inputs, as a dict; inputs without
    timestamps (proton aggregates) are listed in otherData.tracelab.skipped."""
    b = _Builder()
    meta = _build(b, list(inputs), Pick(ranks, steps, window_ns))
    return {"traceEvents": b.events, "displayTimeUnit": "ns", "otherData": {"tracelab": meta}}


def write_json(put: Callable[[bytes], object], inputs: Iterable[Input], ranks: set[int] | None = None,
               steps: set[int] | None = None, window_ns: tuple[int, int] | None = None) -> int:
    """The same trace as trace(), as JSON text handed to `put` rank by rank (a file, a gzip
    stream), never held whole; the number of trace events."""
    put(b'{"traceEvents":[')
    b = _Builder(sink=put)
    meta = _build(b, list(inputs), Pick(ranks, steps, window_ns))
    b.flush()
    put(b'],"displayTimeUnit":"ns","otherData":' + msgspec.json.encode({"tracelab": meta}) + b"}")
    return b.written


def _build(b: _Builder, inputs: list[Input], pick: Pick) -> dict:
    """Every run's ranks into the builder; otherData.tracelab."""
    timed = [i for i in inputs if i.timed]
    if not timed:
        raise UsageError("export perfetto", "no input has timestamps (proton profiles are aggregates: "
                                            "export torch.profiler or nsys traces)")
    if pick.ranks is not None and not any(i.rank in pick.ranks for i in timed):
        raise UsageError("--ranks", f"none of {_span(pick.ranks)} is in the timed inputs (their ranks: "
                                    f"{_span({i.rank for i in timed})})")
    if pick.steps is not None:
        check_steps(timed, pick.steps)
    groups = list(dict.fromkeys(i.group for i in timed))
    clocks = []
    for group in groups:
        members = [i for i in timed if i.group == group]
        clocks.append(_run(b, group, members, 1 + sum(len(c["pids"]) for c in clocks), pick, len(groups) > 1))
    exported = {id(i) for i in timed}
    meta = {"clocks": clocks, "collectives": MATCHING, "scopes": SCOPE_NOTE,
            "skipped": [f"{i.label}: no timestamps ({i.source})" for i in inputs if id(i) not in exported]}
    if pick.window_ns is not None:
        meta["window_ns"] = [int(pick.window_ns[0]), int(pick.window_ns[1])]
    return meta
