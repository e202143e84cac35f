"""Compare ranks, runs and profilers: align, then subtract.

Inputs are labelled events frames. Rows are aligned on keys (default scope and
kernel) by an outer merge; then per input time and count, delta and ratio
against the first input, spread across inputs, and the slowest input per row.
The same function compares ranks of one run, runs, or profilers (labelled by
source, joined on canonical kernel names).
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..schema import Profile
from . import normalise, timeline
from .roofline import rank_roofline
from .steps import has_times
from .idle import RankIdle  # issue 21

# --by choice -> alignment keys
BY: dict[str, list[str]] = {
    "scope,kernel": ["scope", "kernel"],
    "kernel": ["kernel"],
    "op_class": ["op_class"],
    "scope": ["scope"],
}

_TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json", ".hatchet",
                   ".sqlite3", ".sqlite")


@dataclass
class Input:
    """One compared column: `label` names it; `group` is its run (or "" for ranks of one run)."""

    label: str
    group: str
    rank: int
    source: str
    events: pd.DataFrame
    epoch_ns: int | None = None  # the trace's start on the epoch clock, when it says
    device: str = ""  # the GPU model(s) the trace names, "" when it names none (proton)
    steps: int | None = None  # steps covered, given for traces without step instances (proton)
    summary: dict = field(default_factory=dict)  # RANK_SUMMARIES, computed where the rank was parsed
    path: str = ""  # the file it came from
    meta: dict = field(default_factory=dict)  # the trace's meta (devices, proton's scope metrics)

    def digest(self, name: str):
        """RANK_SUMMARIES[name] of this input: as its worker made it, else from its events
        (kept, so each is made once). Reports read inputs through these, never their events,
        so a thousand ranks' events need never meet in one process."""
        if name not in self.summary:
            if self.summary and not len(self.events):  # its worker dropped the events: a bug, not a zero
                raise KeyError(f"digest {name!r} of {self.label} was not made where it was parsed "
                               f"(made: {', '.join(self.summary)})")
            fn = RANK_SUMMARIES[name]
            self.summary[name] = fn(self.events, self.meta) if getattr(fn, "with_meta", False) else fn(self.events)
        return self.summary[name]

    @property
    def sums(self) -> pd.DataFrame:
        return self.digest("sums")

    @property
    def timed(self) -> bool:
        """Whether its rows have start times (torch, nsys; CPU-only traces too; not proton)."""
        return self.digest("has_times")


def _input(label: str, group: str, p: Profile) -> Input:
    return Input(label, group, p.rank, str(p.meta.get("source")), p.events, p.meta.get("trace_start_epoch_ns"),
                 device_names(p.meta), p.meta.get("steps"), p.summary, str(p.meta.get("path", "")), p.meta)
    # the profile's own summary: a digest made from its events for one labelling (the report) is
    # reused by the next (its findings), not made again


def device_names(meta: dict) -> str:
    """The GPU model(s) a trace's meta names ("NVIDIA H200"), "" when none is named."""
    names = {str(d.get("name")) for d in (meta.get("devices") or {}).values() if isinstance(d, dict) and d.get("name")}
    return ", ".join(sorted(names))


def _stem(path: Path) -> str:
    name = path.name
    for suffix in _TRACE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _parts(paths: list[Path], folders: list[bool]) -> list[tuple[str, ...]]:
    """Folders, then the stem (or folder name); the whole file name where two files
    of one folder share a stem (rank0.json beside rank0.json.gz)."""
    parts = [(*p.parent.parts, p.name if folder else _stem(p)) for p, folder in zip(paths, folders)]
    seen = Counter(parts)
    return [(*p.parent.parts, p.name) if seen[t] > 1 else t for p, t in zip(paths, parts)]


def _shortest_suffix(parts: list[tuple[str, ...]], i: int) -> str:
    mine, others = parts[i], parts[:i] + parts[i + 1:]
    depth = next((d for d in range(1, len(mine)) if all(o[-d:] != mine[-d:] for o in others)), len(mine))
    return Path(*mine[-depth:]).as_posix()


def path_labels(paths: list[Path], folders: list[bool]) -> list[str]:
    """Each path's shortest tail (stem, or a folder's name, then as many parent folders as it
    takes) that no other input path shares: `a/rank0` and `b/rank0`, but `rank1` beside them.
    The very same path given more than once is numbered in the order given: `rank0#1`, `rank0#2`.
    `folders` says which paths are folders (the caller looked)."""
    full = [Path(os.path.abspath(p)) for p in paths]
    is_folder = dict(zip(full, folders))
    distinct = list(dict.fromkeys(full))
    parts = _parts(distinct, [is_folder[p] for p in distinct])
    label = {p: _shortest_suffix(parts, i) for i, p in enumerate(distinct)}
    times, nth = Counter(full), Counter()
    out = []
    for p in full:
        nth[p] += 1
        out.append(label[p] if times[p] == 1 else f"{label[p]}#{nth[p]}")
    return out


def _group_names(paths: list[Path], folders: list[bool], groups: list[list[Profile]]) -> list[str]:
    """A short unique name per input path: the source when each input is one distinct
    profiler, else its path label (see path_labels)."""
    sources = [{p.meta.get("source") for p in g} for g in groups]
    if all(len(s) == 1 for s in sources) and len({next(iter(s)) for s in sources}) == len(groups):
        return [str(next(iter(s))) for s in sources]
    return path_labels(paths, folders)


def label(paths: list[str | Path], folders: list[bool], groups: list[list[Profile]]) -> list[Input]:
    """Label the profiles loaded from each path (`folders`: which paths are folders):
    `rank3` when all are ranks of one run (distinct ranks, one source, at most one folder),
    else `<run>/rank3` (or `<run>` for a lone profile) since ranks collide across runs.
    tracelab.inputs.label_inputs looks at the paths and calls this."""
    paths = [Path(p) for p in paths]
    profiles = [p for g in groups for p in g]
    ranks = [p.rank for p in profiles]
    one_run = (len(set(ranks)) == len(ranks) and len({p.meta.get("source") for p in profiles}) == 1
               and sum(folders) <= 1)
    if one_run:  # in the order given (the first is the reference); a folder's ranks by rank
        return [_input(f"rank{p.rank}", "", p) for g in groups for p in sorted(g, key=lambda p: p.rank)]
    out = []
    for name, group in zip(_group_names(paths, folders, groups), groups):
        for p in sorted(group, key=lambda p: p.rank):
            label = name if len(group) == 1 else f"{name}/rank{p.rank}"
            out.append(_input(label, name, p))
    return out


def default_by(inputs: list[Input]) -> str:
    """scope,kernel for one profiler; kernel across profilers, whose scopes need not match
    (NVTX ranges, record_function names and proton scopes differ in detail)."""
    return "kernel" if len({i.source for i in inputs}) > 1 else "scope,kernel"


def _per_input(events: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    cols = {k: events[k].astype(str) for k in keys}
    frame = pd.DataFrame({**cols, "time_ns": events["dur_ns"].to_numpy(), "count": events["count"].to_numpy()})
    return frame.groupby(keys, sort=False).sum()


def compare(inputs: list[Input], by: str = "scope,kernel") -> pd.DataFrame:
    """One row per key present in any input. Columns: the keys; time_ns[L], count[L] and
    mean_ns[L] (per call) per input label L; per_step_ns[L] when the inputs' known step
    counts differ; delta_ns[L] and ratio[L] against the first input, on totals when every
    input covers the same known steps and per call otherwise (reports/normalise.basis;
    `attrs["basis"]` is its note, `attrs["basis_kind"]` "totals" or "per call"; ratio NaN
    where the first has no time); inputs (how many have the row); max_ns, min_ns (totals);
    spread (max / min on the same basis, NaN where an input lacks the row); slowest (label
    of the largest where its lead beats the step-to-step noise, else ""). Sorted by max_ns,
    largest first."""
    keys = BY[by]
    labels = [i.label for i in inputs]
    per = [_per_input(i.sums, keys) for i in inputs]
    wide = pd.concat(per, axis=1, keys=labels, join="outer").fillna(0)
    time = pd.DataFrame({L: wide[(L, "time_ns")].astype("int64") for L in labels})
    count = pd.DataFrame({L: wide[(L, "count")].astype("int64") for L in labels})
    steps = {i.label: i.digest("noise")["steps"] or i.steps for i in inputs}
    if {i.group for i in inputs} == {""} and not any(steps.values()):
        steps = dict.fromkeys(steps, "one run")  # ranks of one capture cover the same steps, however many
    b = normalise.basis(time, count, steps)
    cmp = b.values
    out = pd.concat([time.add_prefix("time_ns[").add_suffix("]"),
                     count.add_prefix("count[").add_suffix("]"),
                     (time / count.where(count > 0)).add_prefix("mean_ns[").add_suffix("]")], axis=1)
    if b.per_step is not None:
        out = pd.concat([out, b.per_step.add_prefix("per_step_ns[").add_suffix("]")], axis=1)
    first = cmp[labels[0]]
    against = {}  # one concat, not a column at a time: 128 ranks would fragment the frame
    for L in labels[1:]:
        against[f"delta_ns[{L}]"] = cmp[L] - first
        against[f"ratio[{L}]"] = cmp[L] / first.where(first > 0)
    out = pd.concat([out, pd.DataFrame(against, index=out.index)], axis=1)
    present = (time > 0) | (count > 0)
    out["inputs"] = present.sum(axis=1)
    out["max_ns"], out["min_ns"] = time.max(axis=1), time.min(axis=1)
    least = cmp.min(axis=1, skipna=False)  # NaN where an input has no call of the row
    out["spread"] = cmp.max(axis=1) / least.where(least > 0)
    out["slowest"] = normalise.slowest(cmp, _sigmas(inputs, by, b, count))  # "" where the lead is within the noise
    out = out.reset_index().sort_values(["max_ns", *keys], ascending=[False] + [True] * len(keys),
                                        kind="stable")
    out = out.reset_index(drop=True)
    out.attrs.update(basis=b.note, basis_kind=b.kind)
    return out


def _sigmas(inputs: list[Input], by: str, b: normalise.Basis, count: pd.DataFrame) -> dict:
    """Each input's noise of the compared values: of its total (std x sqrt(steps)), and per
    call that over its calls."""
    out = {}
    for i in inputs:
        s = normalise.sigma_of(i.digest("noise")["std"][by], i.digest("noise")["steps"], False)
        if s is not None and b.kind == "per call":
            calls = count[i.label]
            s = s.reindex(calls.index) / calls.where(calls > 0)
        out[i.label] = s
    return out


def measured(events: pd.DataFrame) -> str:
    """What the rows time: "GPU time", or "CPU operator time" for traces with no GPU activity."""
    return "CPU operator time" if _cpu_only(events) else "GPU time"


def rows_are(events: pd.DataFrame) -> str:
    """What the rows are, in the plural: "kernels", or "CPU operators" for traces with no GPU activity."""
    return "CPU operators" if _cpu_only(events) else "kernels"


def _cpu_only(events: pd.DataFrame) -> bool:
    return bool(len(events)) and bool((events["kind"] == "cpu_op").all())


def totals(inputs: list[Input]) -> pd.DataFrame:
    """Per input: label, group, rank, source, total_ns (GPU time), comm_ns (communication
    kernels), compute_ns (the rest), ratio (total against the first input)."""
    rows = []
    for i in inputs:
        sums = i.sums
        total = int(sums["dur_ns"].sum())
        comm = int(sums.loc[sums["op_class"] == "communication", "dur_ns"].sum())
        rows.append({"label": i.label, "group": i.group, "rank": i.rank, "source": i.source,
                     "total_ns": total, "comm_ns": comm, "compute_ns": total - comm})
    out = pd.DataFrame(rows, columns=["label", "group", "rank", "source", "total_ns", "comm_ns", "compute_ns"])
    first = out["total_ns"].iloc[0] if len(out) else 0
    out["ratio"] = out["total_ns"] / first if first > 0 else np.nan
    return out


def stragglers(totals_df: pd.DataFrame) -> pd.DataFrame:
    """Per group of several ranks, the straggler: the rank with the most non-communication
    GPU time. The other ranks wait for it inside collectives, so it tends to show the
    least communication time (comm_rank_min says whether it does).
    Columns: group, label, rank, compute_ns, next_compute_ns (the runner-up), comm_ns,
    comm_max_ns (most communication time of any rank), comm_rank_min."""
    rows = []
    for group, g in totals_df.groupby("group", sort=False):
        if len(g) < 2:
            continue
        ordered = g.sort_values("compute_ns", ascending=False, kind="stable")
        slow = ordered.iloc[0]
        rows.append({"group": group, "label": slow["label"], "rank": int(slow["rank"]),
                     "compute_ns": int(slow["compute_ns"]), "next_compute_ns": int(ordered["compute_ns"].iloc[1]),
                     "comm_ns": int(slow["comm_ns"]), "comm_max_ns": int(g["comm_ns"].max()),
                     "comm_rank_min": bool(slow["comm_ns"] == g["comm_ns"].min())})
    cols = ["group", "label", "rank", "compute_ns", "next_compute_ns", "comm_ns", "comm_max_ns", "comm_rank_min"]
    return pd.DataFrame(rows, columns=cols)


@dataclass
class Comparison:
    """Everything `tracelab compare` shows: the aligned table, per-input totals, the
    straggler per run, and for timed inputs busy/idle/overlap per input and collective
    skew per run. `measured` says what the times are (see measured())."""

    by: str
    labels: list[str]
    table: pd.DataFrame
    totals: pd.DataFrame
    stragglers: pd.DataFrame
    timeline: pd.DataFrame
    skew: pd.DataFrame
    measured: str
    straggler: dict | None = None  # the first run's who-waits verdict (reports/waits.straggler_json)
    waits: dict = field(default_factory=dict)  # group -> its reports.waits.Waits, analysed once


def comparison(inputs: list[Input], by: str = "scope,kernel") -> Comparison:
    from .waits import run_verdicts

    totals_df = totals(inputs)
    analysed: dict = {}
    verdicts, straggler = run_verdicts(inputs, stragglers(totals_df), analysed)
    return Comparison(by, [i.label for i in inputs], compare(inputs, by), totals_df,
                      verdicts, _timelines(inputs), _skews(inputs),
                      measured(pd.concat([i.sums[["kind"]] for i in inputs], ignore_index=True)), straggler,
                      analysed)


def rank_timeline(events: pd.DataFrame) -> pd.DataFrame:
    """The one-row timeline (busy, idle, overlap) of one rank's events, without its rank."""
    return timeline.rank_timeline(events).drop(columns="rank")


SUM_KEYS = ["kind", "scope", "kernel", "op_class"]


def rank_sums(events: pd.DataFrame) -> pd.DataFrame:
    """One rank's time (dur_ns) and calls (count) summed per kind, scope, kernel and op class:
    what the comparison, the figures' bars, heatmap and top table, the totals and the scope
    trees add up (a sum of sums is the sum)."""
    g = events.groupby(SUM_KEYS, observed=True, sort=False, dropna=False)[["dur_ns", "count"]].sum()
    return g.reset_index()


def rank_noise(events: pd.DataFrame) -> dict:
    """One rank's steps (distinct, None without) and, per `--by` choice, the standard deviation
    of each row's time over the steps (normalise.step_std): what 'slowest' weighs leads against."""
    return {"steps": normalise.step_count(events),
            "std": {by: normalise.step_std(events, keys) for by, keys in BY.items()}}


def rank_span(events: pd.DataFrame) -> tuple[int, int] | None:
    """One rank's first GPU start and last GPU end (its own clock), None without timed rows:
    the timeline figure's shared bins are made from these (figures.timeline_edges)."""
    rows = timeline.timed(events)
    if rows.empty:
        return None
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    return int(start.min()), int((start + rows["dur_ns"].to_numpy(dtype=np.int64)).max())


def first_start(events: pd.DataFrame) -> int | None:
    """One rank's first start time, any row (its own clock), None without times."""
    start = events["start_ns"].dropna()
    return int(start.min()) if len(start) else None


def _waits_digest(events: pd.DataFrame):
    from .waits import rank_digest

    return rank_digest(events)


# per-rank tables the comparison and the report need, computed in the worker that parses each
# rank (tracelab.load_many's `reduce`): the parent gathers these, never a rank's events
RANK_SUMMARIES = {"timeline": rank_timeline, "comm_kernels": timeline.comm_kernels, "sums": rank_sums,
                  "noise": rank_noise, "span": rank_span, "has_times": has_times, "waits": _waits_digest,
                  "first_ns": first_start, "roofline": rank_roofline, "segments": timeline.rank_segments}
RANK_SUMMARIES["idle"] = RankIdle()  # issue 21: the report's idle section (reports/idle_html.py)
# the digests each output reads; a command asks its workers for these only (the report: all)
COMPARISON = ("sums", "noise", "has_times", "waits", "timeline", "comm_kernels")
FINDINGS = (*COMPARISON, "idle", "roofline")  # reports/findings*.py: the comparison, idle, roofline
PERFETTO = ("sums", "has_times", "first_ns", "waits")  # export perfetto: sizes, clocks, steps


def rank_digests(names: tuple[str, ...] | None = None) -> dict:
    """RANK_SUMMARIES of these names (every one where None): load_many's reduce for one output."""
    return dict(RANK_SUMMARIES) if names is None else {n: RANK_SUMMARIES[n] for n in names}


def _comm_kernels(i: Input) -> pd.DataFrame:
    rows = i.digest("comm_kernels")
    return rows.assign(rank=np.int32(i.rank))  # the rank as resolved after parsing


def _timelines(inputs: list[Input]) -> pd.DataFrame:
    parts = [i.digest("timeline").assign(label=i.label) for i in inputs]
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    return out[["label", *[c for c in out.columns if c != "label"]]] if len(out) else out


def _skews(inputs: list[Input]) -> pd.DataFrame:
    parts = []
    for group in dict.fromkeys(i.group for i in inputs):
        members = [i for i in inputs if i.group == group]
        if len(members) < 2:
            continue
        events = pd.concat([_comm_kernels(i) for i in members], ignore_index=True)
        offsets = timeline.clock_offsets([{"rank": i.rank, "trace_start_epoch_ns": i.epoch_ns} for i in members])
        summary = timeline.skew_summary(timeline.collective_skew(events, offsets))
        if len(summary):  # a run with no timed collectives (proton) adds no rows
            parts.append(summary.assign(group=group, clock="epoch" if offsets else "trace start"))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

