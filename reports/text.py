"""Renderers for the terminal (rich tables), CSV and JSON. Units converted here only."""
from __future__ import annotations

import json

import pandas as pd
from rich.console import Group
from rich.table import Table
from rich.text import Text


def _ms(ns: float) -> str:
    return "-" if pd.isna(ns) else f"{ns / 1e6:,.3f}"


def _us(ns: float) -> str:
    return "-" if pd.isna(ns) else f"{ns / 1e3:,.2f}"


def _pct(x: float) -> str:
    return "-" if pd.isna(x) else f"{100 * x:.1f}%"


def summary_line(row: pd.Series) -> str:
    """'rank 0 (torch): kernels 12.345 ms, memcpy 0.1 ms, busy 13 ms of a 20 ms span (35.0% idle)'."""
    if row.get("cpu_op_ns", 0) and not row["kernel_ns"]:
        parts = [f"CPU operators {_ms(row['cpu_op_ns'])} ms (no GPU activity in this trace)"]
    else:
        parts = [f"kernels {_ms(row['kernel_ns'])} ms", f"memcpy {_ms(row['memcpy_ns'])} ms"]
    if row.get("memset_ns", 0):
        parts.append(f"memset {_ms(row['memset_ns'])} ms")
    if not pd.isna(row.get("span_ns")):
        parts.append(f"GPU busy {_ms(row['busy_ns'])} ms of a {_ms(row['span_ns'])} ms span "
                     f"({_pct(row['idle_share'])} idle)")
    return f"rank {row['rank']} ({row['source']}, {row['events']:,} rows): " + ", ".join(parts)


def breakdown_tables(summary: pd.DataFrame, table: pd.DataFrame, by: str) -> Group:
    """One rich table per rank, headed by its summary line."""
    parts = []
    for _, head in summary.iterrows():
        rows = table[table["rank"] == head["rank"]]
        t = Table(title=Text(summary_line(head)), title_justify="left", show_edge=False)
        t.add_column("time (ms)", justify="right")
        t.add_column("share", justify="right")
        t.add_column("count", justify="right")
        t.add_column("mean (us)", justify="right")
        t.add_column(by, overflow="ellipsis", no_wrap=True, max_width=100)
        for _, r in rows.iterrows():
            t.add_row(_ms(r["total_ns"]), _pct(r["share"]), f"{int(r['count']):,}", _us(r["mean_ns"]),
                      Text(str(r[by]) or "(no scope)"))
        parts.append(t)
    return Group(*parts)


def breakdown_csv(summary: pd.DataFrame, table: pd.DataFrame, by: str) -> str:
    return table.to_csv(index=False)


def breakdown_json(summary: pd.DataFrame, table: pd.DataFrame, by: str) -> str:
    doc = {"by": by,
           "summary": json.loads(summary.to_json(orient="records")),
           "breakdown": json.loads(table.to_json(orient="records"))}
    return json.dumps(doc, indent=1)


# format name -> renderer(summary, table, by); the CLI's --format choices come from here
BREAKDOWN_RENDERERS = {"table": breakdown_tables, "csv": breakdown_csv, "json": breakdown_json}
