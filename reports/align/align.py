"""Compare ranks, runs and profilers: align, then subtract.

Inputs are labelled events frames. Rows are aligned on keys (default scope and
kernel) by an outer merge; then per input time and count, delta and ratio
against the first input, spread across inputs, and the slowest input per row.
The same function compares ranks of one run, runs, or profilers (labelled by
source, joined on canonical kernel names).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracelab.core.schema import str_array

from ..stats import noise
from ..timeline import intervals as timeline
from .digests import BY
from ..ranks import Input











def default_by(inputs: list[Input]) -> str:
    """scope,kernel for one profiler; kernel across profilers, whose scopes need not match
    (NVTX ranges, record_function names and proton scopes differ in detail)."""
    return "kernel" if len({i.source for i in inputs}) > 1 else "scope,kernel"


def _per_input(events: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    cols = {k: str_array(events[k]) for k in keys}
    frame = pd.DataFrame({**cols, "time_ns": events["dur_ns"].to_numpy(), "count": events["count"].to_numpy()})
    return frame.groupby(keys, sort=False).sum()


def compare(inputs: list[Input], by: str = "scope,kernel") -> pd.DataFrame:
    """One row per key present in any input. Columns: the keys; time_ns[L], count[L] and
    mean_ns[L] (per call) per input label L; per_step_ns[L] when the inputs' known step
    counts differ; delta_ns[L] and ratio[L] against the first input, on totals when every
    input covers the same known steps and per call otherwise (reports/noise.basis;
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
    b = noise.basis(time, count, steps)
    cmp = b.values
    out = pd.concat([time.add_prefix("time_ns[").add_suffix("]"),
                     count.add_prefix("count[").add_suffix("]"),
                     (time / count.where(count > 0)).add_prefix("mean_ns[").add_suffix("]")], axis=1)
    if b.per_step is not None:
        out = pd.concat([out, b.per_step.add_prefix("per_step_ns[").add_suffix("]")], axis=1)
    out = pd.concat([out, _against_first(cmp, labels, out.index)], axis=1)  # one concat: 128 ranks would fragment
    present = (time > 0) | (count > 0)
    out["inputs"] = present.sum(axis=1)
    out["max_ns"], out["min_ns"] = time.max(axis=1), time.min(axis=1)
    least = cmp.min(axis=1, skipna=False)  # NaN where an input has no call of the row
    out["spread"] = cmp.max(axis=1) / least.where(least > 0)
    out["slowest"] = noise.slowest(cmp, _sigmas(inputs, by, b, count))  # "" where the lead is within the noise
    out = out.reset_index().sort_values(["max_ns", *keys], ascending=[False] + [True] * len(keys),
                                        kind="stable")
    out = out.reset_index(drop=True)
    out.attrs.update(basis=b.note, basis_kind=b.kind,
                     noise=all(bool(i.digest("noise")["steps"]) for i in inputs))  # steps weigh every lead
    return out


def _sigmas(inputs: list[Input], by: str, b: noise.Basis, count: pd.DataFrame) -> dict:
    """Each input's noise of the compared values: of its total (std x sqrt(steps)), and per
    call that over its calls."""
    out = {}
    for i in inputs:
        s = noise.sigma_of(i.digest("noise")["std"][by], i.digest("noise")["steps"], False)
        if s is not None and b.kind == "per call":
            calls = count[i.label]
            s = s.reindex(calls.index) / calls.where(calls > 0)
        out[i.label] = s
    return out


def _against_first(cmp: pd.DataFrame, labels: list[str], index: pd.Index) -> pd.DataFrame:
    """delta_ns[L] and ratio[L] of each input L but the first, against the first (ratio NaN where
    the first has none): by numpy on the whole table where its columns share one dtype and its
    rows are `index`'s, else column by column (pandas aligns each)."""
    if len(set(cmp.dtypes)) <= 1 and cmp.index.equals(index) and list(cmp.columns) == labels:
        values = cmp.to_numpy()
        first = values[:, 0]
        delta, ratio = values[:, 1:] - first[:, None], values[:, 1:] / np.where(first > 0, first, np.nan)[:, None]
        return pd.DataFrame({name: column for k, L in enumerate(labels[1:])
                             for name, column in ((f"delta_ns[{L}]", delta[:, k]), (f"ratio[{L}]", ratio[:, k]))},
                            index=index)
    first = cmp[labels[0]]
    against = {}
    for L in labels[1:]:
        against[f"delta_ns[{L}]"] = cmp[L] - first
        against[f"ratio[{L}]"] = cmp[L] / first.where(first > 0)
    return pd.DataFrame(against, index=index)


def measured(events: pd.DataFrame) -> str:
    """What the rows time: "GPU time", or "CPU operator time" for traces with no GPU activity."""
    return "CPU operator time" if _cpu_only(events) else "GPU time"


def summed_over(measured_as: str) -> str:
    """How a rank's total adds its rows (measured_as: measured()'s words): over its threads or
    streams, which overlap, so the timeline's union and a finding's union of collectives are smaller."""
    return "summed over threads" if measured_as.startswith("CPU") else "summed over streams"


def rows_are(events: pd.DataFrame) -> str:
    """What the rows are, in the plural: "kernels", or "CPU operators" for traces with no GPU activity."""
    return "CPU operators" if _cpu_only(events) else "kernels"


def _measured_of(inputs: list[Input]) -> str:
    """measured() of the inputs' sums together, without concatenating them."""
    rows = sum(len(i.sums) for i in inputs)
    cpu_only = bool(rows) and all(bool((i.sums["kind"] == "cpu_op").all()) for i in inputs)
    return "CPU operator time" if cpu_only else "GPU time"


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


EXPLAINED_SHARE = 0.5  # a compute lead under half the others' extra wait does not explain it


def lead_and_wait(row) -> tuple[int, int]:
    """A totals straggler row's (compute lead over the runner-up, the others' extra communication
    time: their wait for it), in ns."""
    return int(row["compute_ns"] - row["next_compute_ns"]), int(row["comm_max_ns"] - row["comm_ns"])


def lead_explains_wait(row) -> bool:
    """Whether a totals straggler's compute lead is at least EXPLAINED_SHARE of the others' wait
    (lead_and_wait); where it is not, the rank is late for reasons outside its GPU kernels (a
    100 ms lead beside a 19.9 s wait: eager decode on 2 GPUs)."""
    lead, wait = lead_and_wait(row)
    return wait <= 0 or lead >= EXPLAINED_SHARE * wait


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
    from ..timeline.waits import run_verdicts

    totals_df = totals(inputs)
    analysed: dict = {}
    verdicts, straggler = run_verdicts(inputs, stragglers(totals_df), analysed)
    return Comparison(by, [i.label for i in inputs], compare(inputs, by), totals_df,
                      verdicts, _timelines(inputs), _skews(inputs),
                      _measured_of(inputs), straggler,
                      analysed)





def _comm_kernels(members: list[Input]) -> pd.DataFrame:
    """The members' comm_kernels digests as one frame, each under its rank as resolved after parsing."""
    parts = [i.digest("comm_kernels") for i in members]
    rank = np.repeat(np.array([i.rank for i in members], dtype=np.int32), [len(p) for p in parts])
    return pd.concat(parts, ignore_index=True).assign(rank=rank)  # one assign, not one per rank


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
        events = _comm_kernels(members)
        offsets = timeline.clock_offsets([{"rank": i.rank, "trace_start_epoch_ns": i.epoch_ns} for i in members])
        summary = timeline.skew_summary(timeline.collective_skew(events, offsets))
        if len(summary):  # a run with no timed collectives (proton) adds no rows
            parts.append(summary.assign(group=group, clock="epoch" if offsets else "trace start"))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

