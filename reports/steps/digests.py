"""The per-rank digests of the steps topic (reports/topics.py): who waits on whom (the timeline
layer's rank_waits), each rank's first start (clocks, the merged Perfetto trace) and a CPU-only
rank's communication. Made in the worker that parsed the rank."""
from __future__ import annotations

import pandas as pd

from tracelab.core.schema import OnEvents

from ..timeline import intervals as timeline
from ..timeline.waits import rank_waits


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


DIGESTS = {"waits": rank_waits, "first_ns": OnEvents(first_start), "cpu_comm": OnEvents(rank_cpu_comm)}
