"""Per-rank breakdown of GPU time: pure DataFrame -> DataFrame analyses."""
from __future__ import annotations

from functools import partial
from typing import Callable

import numpy as np
import pandas as pd

from tracelab.core.schema import OnEvents, recorded

BY_CHOICES = ("kernel", "op_class", "scope", "step", "module_type")
NO_STEP = "(no step)"  # --by step: rows outside every step
REST = "(rest)"


def breakdown(df: pd.DataFrame, by: str = "kernel", top: int | None = None) -> pd.DataFrame:
    """GPU time per group and rank, largest first.

    Columns: rank, <by>, total_ns, share (of the rank's total), count, mean_ns.
    With `top`, the `top` groups largest over all ranks together are kept on every rank that
    has them and each rank's other groups are one `(rest)` row (top_rows); None or 0 keeps
    them all (the CLI's --top 0), as everywhere in tracelab.
    """
    if by not in BY_CHOICES:
        raise ValueError(f"by must be one of {BY_CHOICES}, not {by!r}")
    if by == "module_type":
        df = df.assign(module_type=module_type(df["module"]))
    keys = ["rank", by]
    grouped = (df.groupby(keys, observed=True, sort=False, dropna=False)
                 .agg(total_ns=("dur_ns", "sum"), count=("count", "sum"))
                 .reset_index())
    grouped[by] = grouped[by].astype(str) if by != "step" else grouped[by].astype("string").fillna(NO_STEP)
    grouped = grouped.sort_values(["rank", "total_ns"], ascending=[True, False], kind="stable")
    rank_total = grouped.groupby("rank")["total_ns"].transform("sum")
    grouped["share"] = np.where(rank_total > 0, grouped["total_ns"] / rank_total.where(rank_total > 0, 1), 0.0)
    grouped["mean_ns"] = grouped["total_ns"] / grouped["count"].where(grouped["count"] > 0)
    return top_rows(grouped[["rank", by, "total_ns", "share", "count", "mean_ns"]].reset_index(drop=True), by, top)


def top_rows(table: pd.DataFrame, by: str, top: int | None) -> pd.DataFrame:
    """A full breakdown() table (any ranks) cut to the `top` groups with the most time summed
    over all its ranks, each rank's other groups summed into one (rest) row, last. Chosen
    over all ranks, so a group's row is on every rank that has it and its spread over the
    ranks (spread()) describes them all, not the ranks where it made a local top N."""
    if not top or table.empty:
        return table
    summed = table.groupby(by, sort=False)["total_ns"].sum().sort_values(ascending=False, kind="stable")
    chosen = table[by].isin(summed.index[:top])
    rest = (table[~chosen].groupby("rank", sort=True)[["total_ns", "share", "count"]].sum().reset_index()
            .assign(**{by: REST}))
    rest["mean_ns"] = rest["total_ns"] / rest["count"].where(rest["count"] > 0)
    out = pd.concat([table[chosen].assign(_rest=0), rest.assign(_rest=1)], ignore_index=True)
    out = out.sort_values(["rank", "_rest", "total_ns"], ascending=[True, True, False], kind="stable")
    return out[table.columns].astype({by: table[by].dtype}).reset_index(drop=True)


NO_MODULE = "(no module)"
_LAYER_INDEX = r"(?:(?<=\.)|^)\d+(?=\.|$)"


def module_type(module: pd.Series) -> pd.Series:
    """A module path (tracelab/provenance.py) with its layer indices as `*` (`layers.3.attention`
    -> `layers.*.attention`): like modules of every layer under one name; "" -> (no module)."""
    named = module.astype(str).str.replace(_LAYER_INDEX, "*", regex=True)
    return named.where(named != "", NO_MODULE)


def spread(table: pd.DataFrame, by: str) -> pd.DataFrame:
    """Over the ranks of a breakdown() table, per group: how many ranks have it, the least,
    median and most time of those ranks, the median share, the summed time and the rank
    with the most; largest summed time first, the (rest) rows of --top last (many ranks: one row per group,
    not per rank)."""
    grouped = table.groupby(by, sort=False, observed=True)
    out = grouped["total_ns"].agg(ranks="size", min_ns="min", median_ns="median", max_ns="max", sum_ns="sum")
    out["median_share"] = grouped["share"].median()
    out["largest_rank"] = table.loc[grouped["total_ns"].idxmax(), "rank"].to_numpy()
    out = out.reset_index()
    return out.sort_values(["sum_ns"], ascending=False, kind="stable", key=lambda s: s.where(out[by] != REST, -1),
                           ignore_index=True)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per rank: kernel, memcpy, memset and CPU-op time, events, and where
    timestamps exist the busy span (first start to last end), busy time and idle share."""
    from ..timeline.intervals import idle

    by_kind = df.pivot_table(index="rank", columns="kind", values="dur_ns", aggfunc="sum",
                             observed=False, fill_value=0)
    out = pd.DataFrame(index=pd.Index(sorted(df["rank"].unique()), name="rank"))
    for kind in ("kernel", "memcpy", "memset", "cpu_op"):
        out[f"{kind}_ns"] = by_kind[kind] if kind in by_kind else 0
    out["events"] = df.groupby("rank").size()
    out["source"] = df.groupby("rank", observed=True)["source"].first().astype(str)
    for kind in ("memcpy", "memset"):  # a source that never records them: unknown (NaN), not 0
        out[f"{kind}_ns"] = out[f"{kind}_ns"].astype("float64").where(
            [recorded(s, kind) for s in out["source"]])
    out = out.join(idle(df).set_index("rank")[["span_ns", "busy_ns", "idle_share"]])
    cpu = df[df["kind"] == "cpu_op"]  # what cpu_op_ns adds up: top-level ops per thread, threads summed
    ends = cpu["start_ns"] + cpu["dur_ns"]
    out["cpu_threads"] = cpu.groupby("rank")["stream"].nunique()
    out["cpu_span_ns"] = ends.groupby(cpu["rank"]).max() - cpu.groupby("rank")["start_ns"].min()
    return out.reset_index()



def per_rank(by: str = "kernel") -> dict[str, Callable]:
    """summary() and the full breakdown() as per-rank reductions (tracelab.load_many's
    `reduce`, run in the worker that parsed each rank). Both group by rank, so the ranks' own
    tables stacked in rank order (stacked()) are the tables of all the ranks' events
    together; --top is chosen over them all afterwards (top_rows)."""
    return {"summary": OnEvents(summary), "breakdown": OnEvents(partial(breakdown, by=by))}


def stacked(profiles: list, name: str) -> pd.DataFrame:
    """Every profile's summary[name] (one rank's table), the rank as resolved after parsing."""
    tables = [p.summary[name].assign(rank=np.int32(p.rank)) for p in profiles]
    kept = [t for t in tables if len(t)] or tables[:1]  # a rank without rows adds none
    return pd.concat(kept, ignore_index=True)
