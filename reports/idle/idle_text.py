"""Renderers of `tracelab idle` (reports/idle.Idle): terminal tables, CSV, JSON (strict:
null, never NaN). Units converted here only."""
from __future__ import annotations

import json
import math

import pandas as pd
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..csvout import csv_text
from ..fmt import ms_cell, us_cell
from .idle import CAUSES, Idle

MANY_RANKS = 16  # above this many ranks, per step the spread over ranks instead of a row per rank
CAUSE_HEADS = {"idle_host_ns": "host", "idle_stall_ns": "stall", "idle_launch_ns": "launch", "idle_sync_ns": "sync",
               "idle_dependency_ns": "dependency", "idle_other_ns": "other"}


def _pct(part, whole) -> str:
    return "-" if not whole or pd.isna(whole) or pd.isna(part) else f"{100 * part / whole:.0f}%"


def _step(step) -> str:
    return "whole trace" if pd.isna(step) else str(step)


def _input(row: pd.Series) -> list[str]:
    """The input's cell, where several inputs are shown (an `input` column)."""
    return [str(row["input"])] if "input" in row.index else []


def _heads(df: pd.DataFrame) -> list[str]:
    return ["input"] if "input" in df.columns else []


def _table(title: str, heads: list[str]) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False)
    for h in heads:
        t.add_column(h, justify="left" if h in ("input", "bound", "kind", "name", "rank with most idle", "after kernel",
                                            "wait call") else "right")
    return t


def steps_table(steps: pd.DataFrame) -> Table:
    if steps["rank"].nunique() > MANY_RANKS:
        return _spread_table(steps)
    t = _table("GPU idle per step and rank, by cause (ms; the causes add up to idle)",
               [*_heads(steps), "step", "rank", "step time", "busy", "idle", "% of step", *CAUSE_HEADS.values(),
                "bound"])
    for _, r in steps.iterrows():
        t.add_row(*_input(r), _step(r["step"]), str(r["rank"]), ms_cell(r["span_ns"]), ms_cell(r["busy_ns"]), ms_cell(r["idle_ns"]),
                  _pct(r["idle_ns"], r["span_ns"]), *(ms_cell(r[c]) for c in CAUSES), _bound(r))
    return t


def _bound(r: pd.Series) -> str:
    """The step's bound; 'host (profiler only)' where the device paces it without the profiler (idle.for_the_user)."""
    return "host (profiler only)" if r.get("host_bound_without_profiler") is False else str(r["bound"])


def _spread_table(steps: pd.DataFrame) -> Table:
    """Many ranks: per step, the ranks' median idle and causes, the most idle rank, the bounds."""
    t = _table("GPU idle per step over ranks (ms; medians over the ranks)",
               ["step", "ranks", "idle", "% of step", *CAUSE_HEADS.values(), "rank with most idle", "bound (ranks)"])
    for step, g in steps.groupby("step", sort=True, dropna=False):
        most = g.loc[g["idle_ns"].idxmax()]
        bounds = ", ".join(f"{b} {n}" for b, n in g["bound"].value_counts().items())
        t.add_row(_step(step), f"{len(g):,}", ms_cell(g["idle_ns"].median()),
                  _pct((g["idle_ns"] / g["span_ns"]).median(), 1), *(ms_cell(g[c].median()) for c in CAUSES),
                  f"{int(most['rank'])} ({ms_cell(most['idle_ns'])})", bounds)
    return t


def _graphs(r: pd.Series) -> str:
    n = r.get("graph_launches")
    return f" ({int(n):,} graph launches, counted once)" if n is not None and not pd.isna(n) and n else ""


def launch_table(launches: pd.DataFrame) -> Table:
    t = _table("kernel launches per rank (delay = kernel start - launch call start: how far ahead the host ran)",
               [*_heads(launches), "rank", "kernels/step", "launched", "delay median (us)", "delay p90 (us)", "launch CPU (ms/step)",
                "kernels shorter than their launch", "their GPU time (ms)"])
    for _, r in launches.iterrows():
        t.add_row(*_input(r), str(int(r["rank"])), "-" if pd.isna(r["kernels_per_step"]) else f"{r['kernels_per_step']:,.1f}",
                  f"{int(r['launched']):,} of {int(r['kernels']):,}" + _graphs(r), us_cell(r["delay_median_ns"]),
                  us_cell(r["delay_p90_ns"]),
                  ms_cell(r["launch_cpu_per_step_ns"]), f"{int(r['short_kernels']):,}", ms_cell(r["short_kernels_gpu_ns"]))
    return t


def ops_table(ops: pd.DataFrame, top: int | None) -> Table:
    t = _table("what the host was doing while the GPU waited for it (host-caused idle covered, ms; a "
               "name's nested ops and ranges are counted on their own rows)",
               [*_heads(ops), "rank", "kind", "name", "covered", "% of host idle"])
    for _, g in ops.groupby([c for c in ("input", "rank") if c in ops.columns], sort=False):
        for _, r in g.head(top).iterrows():
            share = r["covered_ns"] / r["host_idle_ns"] * 100 if r["host_idle_ns"] else math.nan
            t.add_row(*_input(r), str(int(r["rank"])), r["kind"], Text(r["name"][:80]), ms_cell(r["covered_ns"]),
                      "-" if math.isnan(share) else f"{share:.1f}")
    return t


def waits_table(waits: pd.DataFrame, top: int | None) -> Table:
    t = _table("what the dependency idle waited on (the stream and op that ended just before each gap; the call "
               "that made the stream wait)", [*_heads(waits), "rank", "stream", "waited on stream", "after kernel",
                                              "wait call", "gaps", "dependency (ms)"])
    for _, g in waits.groupby([c for c in ("input", "rank") if c in waits.columns], sort=False):
        for _, r in g.head(top).iterrows():
            t.add_row(*_input(r), str(int(r["rank"])), str(int(r["stream"])), str(int(r["waited_on_stream"])),
                      Text(str(r["waited_on_kernel"])[:60]), r["wait_call"], f"{int(r['gaps']):,}",
                      ms_cell(r["dependency_ns"]))
    return t


def idle_tables(result: Idle, top: int | None = 10) -> Group:
    parts = [steps_table(result.steps)] if len(result.steps) else []
    if len(result.waits):
        parts.append(waits_table(result.waits, top))
    if len(result.launches):
        parts.append(launch_table(result.launches))
    if len(result.ops):
        parts.append(ops_table(result.ops, top))
    return Group(*parts, *(Text(n.text) for n in result.notes))


def idle_csv(result: Idle, top: int | None = 10) -> str:
    return csv_text(result.steps)


def _records(df: pd.DataFrame) -> list:
    return json.loads(df.to_json(orient="records")) if len(df) else []  # NaN/NA -> null


def idle_json(result: Idle, top: int | None = 10) -> str:
    keys = [c for c in ("input", "rank") if c in result.ops.columns]
    ops = result.ops.groupby(keys, sort=False).head(top) if top is not None else result.ops
    return json.dumps({"steps": _records(result.steps), "launches": _records(result.launches),
                       "host_ops": _records(ops), "waits": _records(result.waits),
                       "notes": [n.as_json() for n in result.notes]}, indent=1, allow_nan=False)


# format name -> renderer(idle, top); the CLI's --format choices come from here
IDLE_RENDERERS = {"table": idle_tables, "csv": idle_csv, "json": idle_json}
