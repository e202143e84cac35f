"""The per-rank digests every comparison reads (reports/session.Input.digest): one rank's
timeline row, its sums per kind/scope/kernel/op class, its step-to-step noise per --by
choice, its span and first start. Made in the worker that parsed the rank (load_many's
`reduce`, registered in reports/topics.py), so a thousand ranks' events never meet."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..stats import noise
from ..timeline import intervals as timeline

# --by choice -> alignment keys
BY: dict[str, list[str]] = {
    "scope,kernel": ["scope", "kernel"],
    "kernel": ["kernel"],
    "op_class": ["op_class"],
    "scope": ["scope"],
}


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
    of each row's time over the steps (noise.step_std): what 'slowest' weighs leads against."""
    return {"steps": noise.step_count(events),
            "std": noise.step_stds(events, BY)}


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


def rank_cpu_comm(events: pd.DataFrame) -> dict | None:
    """A CPU-only rank's communication (gloo): its CPU operators' span (first start to last end),
    the time a collective was in flight (the union over all threads of its communication
    operators' intervals: the caller's blocking call and gloo's own threads run at the same time,
    so their sum would count that time twice), the threads that ran them, and the communication
    operator taking most time (name, ns, calls). None where the rank has GPU rows or no CPU
    operators (reports/findings/findings_more.cpu_comm_findings)."""
    cpu = events[events["kind"] == "cpu_op"]
    if not len(cpu) or len(cpu) != len(events):
        return None
    comm = (cpu["op_class"].astype(str) == "communication").to_numpy()
    out = {"span_ns": timeline.span_ns(cpu), "in_flight_ns": timeline.union_ns(cpu[comm]),
           "summed_ns": int(cpu["dur_ns"].to_numpy()[comm].sum()), "threads": int(cpu["stream"][comm].nunique()),
           "top_op": None, "top_op_ns": 0, "top_op_calls": 0}
    if comm.any():
        ops = cpu[comm].groupby(cpu["kernel"].astype(str)[comm], sort=True)[["dur_ns", "count"]].sum()
        top = ops["dur_ns"].idxmax()
        out.update(top_op=str(top), top_op_ns=int(ops.loc[top, "dur_ns"]), top_op_calls=int(ops.loc[top, "count"]))
    return out
