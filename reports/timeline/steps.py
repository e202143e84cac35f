"""Per step and rank: where each step's time went. Pure DataFrame -> DataFrame.

Rows are the events of tracelab.core.schema with a `step`; rows outside every step are
left out. Times are the GPU's: a step's span runs from its first GPU activity's start
to its last one's end (the events keep no launch times), busy is the union of its
activity over streams, and compute and communication are unions of the kernels of
each kind, so concurrent streams are never counted twice. A step's period runs from its
first activity's start to the next step's (the step numbered one more, on the same rank):
what a throughput figure sees (tokens/s, steps/s), host time between steps included;
unknown (NaN) for the last step of a run of consecutive steps.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracelab.core.schema import RankData, kind_mask

from .collectives import activity
from .intervals import merge_intervals

COLUMNS = ["step", "rank", "kernels", "span_ns", "busy_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "period_ns",
           "wait_ns"]


def _union_ns(start: np.ndarray, end: np.ndarray) -> int:
    seg_start, seg_end = merge_intervals(start, end)
    return int((seg_end - seg_start).sum())


def _one(start: np.ndarray, end: np.ndarray, kernel: np.ndarray, comm: np.ndarray) -> dict[str, int]:
    compute = kernel & ~comm
    comm_ns, compute_ns = _union_ns(start[comm], end[comm]), _union_ns(start[compute], end[compute])
    both = _union_ns(start[kernel], end[kernel])
    return {"kernels": int(kernel.sum()), "span_ns": int(end.max() - start.min()), "busy_ns": _union_ns(start, end),
            "compute_ns": compute_ns, "comm_ns": comm_ns, "exposed_comm_ns": both - compute_ns}


def step_table(df: pd.DataFrame, coll: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (step, rank) with timed rows in that step (COLUMNS): kernels, span,
    busy, compute, communication, exposed communication (with no compute beside it) and
    wait (summed over the step's collectives, from collectives.collectives; 0 without)."""
    return with_waits(step_rows(df), coll)


def step_rows(df: pd.DataFrame) -> pd.DataFrame:
    """step_table without its wait column: what each rank's own events give (one rank's
    rows are its part of the table: reports/waits.rank_digest makes them per rank)."""
    rows = activity(df)
    stepped = rows["step"].notna().to_numpy()
    if not stepped.any():
        return pd.DataFrame(columns=COLUMNS[:-1])
    at = np.flatnonzero(stepped)  # the columns read, as arrays: no frame is copied
    step = rows["step"].to_numpy(dtype=np.int64, na_value=0)[at]
    rank = rows["rank"].to_numpy(dtype=np.int64)[at]
    start = rows["start_ns"].to_numpy(dtype=np.int64)[at]
    end = start + rows["dur_ns"].to_numpy(dtype=np.int64)[at]
    kernel = kind_mask(rows, ("kernel", "cpu_op"))[at]  # CPU runs: operators stand for kernels
    comm = kernel & (rows["op_class"] == "communication").to_numpy()[at]
    order = np.lexsort((rank, step))  # by (step, rank), each group's rows in their order
    bounds = np.flatnonzero(np.r_[True, (step[order][1:] != step[order][:-1]) | (rank[order][1:] != rank[order][:-1]),
                                  True])
    groups = [order[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    table = pd.DataFrame([{"step": int(step[i[0]]), "rank": int(rank[i[0]]), **_one(start[i], end[i], kernel[i], comm[i])}
                          for i in groups], columns=COLUMNS[:-2])
    first_ns = np.array([start[i].min() for i in groups], dtype=np.int64)
    return table.assign(period_ns=_period_ns(table["step"].to_numpy(), table["rank"].to_numpy(), first_ns))


def shared_step_rows(rank: RankData) -> pd.DataFrame:
    """step_rows of the rank's events, made once per rank (RankData.shared): the who-waits digest
    and idle's step table read the same one. Callers read it and never write to it."""
    return rank.shared("steps.step_rows", lambda: step_rows(rank.events))


def _period_ns(step: np.ndarray, rank: np.ndarray, first_ns: np.ndarray) -> np.ndarray:
    """Per (step, rank): the next step's first start minus this one's, where the step
    numbered one more follows on the same rank; NaN elsewhere."""
    order = np.lexsort((step, rank))
    s, r, t = step[order], rank[order], first_ns[order]
    period = np.full(len(step), np.nan)
    follows = (s[1:] == s[:-1] + 1) & (r[1:] == r[:-1])
    period[:-1][follows] = (t[1:] - t[:-1])[follows]
    out = np.empty_like(period)
    out[order] = period
    return out


def with_waits(table: pd.DataFrame, coll: pd.DataFrame | None = None) -> pd.DataFrame:
    """step_rows of any ranks, sorted by step and rank, with each (step, rank)'s wait at the
    collectives `coll` (collectives.collectives) summed; 0 without."""
    if table.empty:
        return pd.DataFrame(columns=COLUMNS)
    out = table.sort_values(["step", "rank"], kind="stable").reset_index(drop=True)
    out["wait_ns"] = 0
    if coll is not None and len(coll):
        wait = coll.dropna(subset=["step"]).groupby(["step", "rank"])["wait_ns"].sum()
        key = pd.MultiIndex.from_frame(out[["step", "rank"]].astype("int64"))
        out["wait_ns"] = wait.reindex(key).fillna(0).astype("int64").to_numpy()
    return out[COLUMNS]


def step_counts(df: pd.DataFrame) -> pd.Series:
    """Steps per rank (distinct non-NA steps); ranks without any give 0."""
    ranks = sorted(df["rank"].unique())
    counts = df.dropna(subset=["step"]).groupby("rank")["step"].nunique()
    return counts.reindex(ranks).fillna(0).astype("int64").rename("steps")


def by_step(df: pd.DataFrame, by: str = "kernel", top: int | None = None) -> pd.DataFrame:
    """GPU time per rank, step and group (kernel, op_class or scope), as breakdown(); rows
    outside every step under step NA. Columns: rank, step, <by>, total_ns, count, mean_ns."""
    keys = ["rank", "step", by]
    g = (df.assign(step=df["step"].astype("float64"))
           .groupby(keys, observed=True, sort=False, dropna=False)
           .agg(total_ns=("dur_ns", "sum"), count=("count", "sum")).reset_index())
    g[by] = g[by].astype(str)
    g["step"] = g["step"].astype("Int64")
    g = g.sort_values(["rank", "step", "total_ns"], ascending=[True, True, False], kind="stable")
    if top is not None:
        g = g.groupby(["rank", "step"], dropna=False, sort=False).head(top)
    g["mean_ns"] = g["total_ns"] / g["count"].where(g["count"] > 0)
    return g[["rank", "step", by, "total_ns", "count", "mean_ns"]].reset_index(drop=True)


def median_per_step(ns_by_step, n_steps: int) -> float:
    """The median over `n_steps` steps of a figure given for the steps that have it (a step not
    among them had none: 0): a finding's "X per step", as whatif's profiled step is a median over
    steps. One step far from the rest (the first profiled step of a job whose ranks started their
    profilers apart waits at its first collective for the last of them, up to seconds) moves a
    mean by its excess over the count of steps, a median not at all. Totals stay sums."""
    values = np.asarray(ns_by_step, dtype=np.float64)
    values = np.r_[values, np.zeros(max(n_steps - len(values), 0))]
    return float(np.median(values)) if len(values) else 0.0


def recorded_steps(run: dict | None) -> int | None:
    """Profiled steps a run.json records: `profiled_steps` where the workload wrote it, else
    train's `steps`, else decode's tokens after prefill (samples x (new_tokens - 1))."""
    if not run:
        return None
    config = run.get("config") or {}
    if isinstance(run.get("profiled_steps"), int):
        return run["profiled_steps"]
    if run.get("workload") == "train" and isinstance(config.get("steps"), int):
        return config["steps"]
    if run.get("workload") == "decode" and isinstance(config.get("new_tokens"), int):
        return int(config.get("samples") or 1) * (config["new_tokens"] - 1)
    return None


def kernel_totals(df: pd.DataFrame) -> pd.DataFrame:
    """Per rank: kernel calls, compute and communication kernel ns, summed (what
    per_step_totals divides; one rank's row is made where it is parsed)."""
    kernels = df[df["kind"] == "kernel"]
    comm = kernels["op_class"] == "communication"
    g = pd.DataFrame({"rank": kernels["rank"], "calls": kernels["count"],
                      "compute": kernels["dur_ns"].where(~comm, 0), "comm": kernels["dur_ns"].where(comm, 0)})
    return g.groupby("rank").sum().reset_index()


def per_step_totals(df: pd.DataFrame, n_steps: int, totals: pd.DataFrame | None = None) -> pd.DataFrame:
    """Sources without instances (proton): per rank, kernel calls, compute and communication
    kernel time summed (kernel_totals, or the `totals` given) and divided by the step count
    the user or run.json gives. Columns: rank, steps, calls_per_step, compute_ns_per_step,
    comm_ns_per_step."""
    out = (kernel_totals(df) if totals is None else totals).set_index("rank") / n_steps
    out = out.rename(columns={"calls": "calls_per_step", "compute": "compute_ns_per_step", "comm": "comm_ns_per_step"})
    return out.reset_index().assign(steps=n_steps)[["rank", "steps", "calls_per_step", "compute_ns_per_step",
                                                    "comm_ns_per_step"]]


def has_times(df: pd.DataFrame) -> bool:
    """Whether any row has a start time (torch, nsys; not proton)."""
    return bool(df["start_ns"].notna().any())
