"""`tracelab breakdown`'s renderers: per rank a rich table under its summary line (many ranks: the
spread over them), CSV and JSON. Units converted here only."""
from __future__ import annotations

import pandas as pd
from rich.console import Group
from rich.table import Table
from rich.text import Text

from tracelab.core.schema import recorded

from .breakdown import spread
from ..csvout import csv_text
from ..fmt import ms_cell, us_cell
from ..html.figures import MANY_RANKS
from ..jsonout import dumps, records
from ..text import pct, spread_table


def _cpu_only(row: pd.Series) -> bool:
    """A rank whose trace holds CPU operators and no kernel (a CPU run under torch.profiler)."""
    return bool(row.get("cpu_op_ns", 0)) and not row["kernel_ns"]


def _cpu_what(row: pd.Series) -> str:
    """What the CPU-operator total adds up: top-level operators of each thread, threads summed,
    beside the span they ran over (several threads' sum may exceed it)."""
    threads, span = row.get("cpu_threads"), row.get("cpu_span_ns")
    if threads is None or pd.isna(threads) or span is None or pd.isna(span):
        return ""
    n = int(threads)
    return (f": top-level operators of {n} thread{'s, summed' if n > 1 else ''}, over a {ms_cell(span)} ms span")


def summary_line(row: pd.Series) -> str:
    """'rank 0 (torch): kernels 12.345 ms, memcpy 0.1 ms, busy 13 ms of a 20 ms span (35.0% idle)'."""
    if _cpu_only(row):
        parts = [f"CPU operators {ms_cell(row['cpu_op_ns'])} ms{_cpu_what(row)} (no GPU kernel, memcpy or memset in this trace)"]
    else:
        parts = [f"kernels {ms_cell(row['kernel_ns'])} ms",
                 f"memcpy {ms_cell(row['memcpy_ns'])} ms" if recorded(row["source"], "memcpy")
                 else f"memcpy not recorded ({row['source']} records kernels only)"]
    if row.get("memset_ns", 0) and not pd.isna(row.get("memset_ns")):
        parts.append(f"memset {ms_cell(row['memset_ns'])} ms")
    if not pd.isna(row.get("span_ns")):
        parts.append(f"GPU busy {ms_cell(row['busy_ns'])} ms of a {ms_cell(row['span_ns'])} ms span "
                     f"({pct(row['idle_share'])} idle)")
    run = f"{row['input']}: " if isinstance(row.get("input"), str) else ""  # several runs: whose rank
    return f"{run}rank {row['rank']} ({row['source']}, {row['events']:,} rows): " + ", ".join(parts)


def breakdown_tables(summary: pd.DataFrame, table: pd.DataFrame, by: str) -> Group:
    """One rich table per rank, headed by its summary line; above MANY_RANKS ranks, the
    spread over the ranks instead (_breakdown_spread)."""
    if len(summary) > MANY_RANKS:
        return _breakdown_spread(summary, table, by)
    parts = []
    for _, head in summary.iterrows():
        rows = table[(table["rank"] == head["rank"]) & ((table["input"] == head["input"]) if "input" in table else True)]
        t = Table(title=Text(summary_line(head)), title_justify="left", show_edge=False)
        t.add_column("time (ms)", justify="right")
        t.add_column("share", justify="right")
        t.add_column("count", justify="right")
        t.add_column("mean (us)", justify="right")
        name = "CPU operator" if by == "kernel" and _cpu_only(head) else by  # what the rows are
        t.add_column(name, overflow="ellipsis", no_wrap=True, max_width=100)
        for _, r in rows.iterrows():
            t.add_row(ms_cell(r["total_ns"]), pct(r["share"]), f"{int(r['count']):,}", us_cell(r["mean_ns"]),
                      Text(str(r[by]) or "(no scope)"))
        parts.append(t)
    return Group(*parts)


SUMMARY_MEASURES = {"kernel_ns": "kernels (ms)", "memcpy_ns": "memcpy (ms)", "memset_ns": "memset (ms)",
                    "cpu_op_ns": "CPU operators (ms)", "busy_ns": "GPU busy (ms)", "span_ns": "span (ms)",
                    "idle_share": "idle share"}


def _breakdown_spread(summary: pd.DataFrame, table: pd.DataFrame, by: str) -> Group:
    """Many ranks: each summary measure's spread over the ranks (and its outlier ranks),
    then per group the ranks that have it and its least, median and most time."""
    per_rank = summary.assign(label="rank " + summary["rank"].astype(str), group=summary["source"])
    measures = {c: name for c, name in SUMMARY_MEASURES.items() if c in per_rank and per_rank[c].fillna(0).any()}
    head = spread_table(f"{len(summary):,} ranks", per_rank, measures, [c for c in measures if c.endswith("_ns")])
    groups = spread(table, by)
    t = Table(title=Text(f"per {by}, over the {len(summary):,} ranks ({len(groups):,} rows; one rank's own table: "
                         f"--rank N)"), title_justify="left", show_edge=False)
    for name in ("ranks", "min (ms)", "median (ms)", "max (ms)", "median share", "most on"):
        t.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    t.add_column(by, overflow="ellipsis", no_wrap=True, max_width=100)
    for _, r in groups.iterrows():
        t.add_row(f"{int(r['ranks']):,}", ms_cell(r["min_ns"]), ms_cell(r["median_ns"]), ms_cell(r["max_ns"]),
                  pct(r["median_share"]), f"rank {r['largest_rank']}" if r["max_ns"] > r["min_ns"] else "-",
                  Text(str(r[by]) or "(no scope)"))
    return Group(head, t)


def breakdown_csv(summary: pd.DataFrame, table: pd.DataFrame, by: str) -> str:
    return csv_text(table)


def breakdown_json(summary: pd.DataFrame, table: pd.DataFrame, by: str) -> str:
    return dumps({"by": by, "summary": records(summary), "breakdown": records(table)})


# format name -> renderer(summary, table, by); the CLI's --format choices come from here
BREAKDOWN_RENDERERS = {"table": breakdown_tables, "csv": breakdown_csv, "json": breakdown_json}
