"""`tracelab compare`'s renderers: the aligned table, totals, straggler lines, timeline and skew
tables (rich), CSV and JSON, and the proton tree diff. Units converted here only."""
from __future__ import annotations

import pandas as pd
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..align.align import Comparison, summed_over
from ..align.straggler_text import straggler_line
from ..csvout import csv_text
from ..fmt import ms_cell, us_cell
from ..html.figures import MANY_RANKS
from ..jsonout import dumps, records
from ..stats import MIN_LEAD_SHARE as MIN_LEAD
from ..text import pct, spread_table


_MAX_RATIO_COLUMNS = 3  # beyond this many inputs the terminal table shows times only


def _ratio(x: float) -> str:
    return "-" if pd.isna(x) else f"x{x:.2f}"


def _key_text(row: pd.Series, keys: list[str]) -> Text:
    parts = [str(row[k]) or "(no scope)" for k in keys]
    return Text(" | ".join(parts))


def aligned_share(table: pd.DataFrame, n_inputs: int) -> float:
    """Share of the largest per-row time that sits on rows every input has."""
    total = table["max_ns"].sum()
    return float(table.loc[table["inputs"] == n_inputs, "max_ns"].sum() / total) if total else float("nan")


SHORT_LABEL_CHARS = 14  # longer input labels become letters in table headers, with a legend


def short_labels(labels: list[str]) -> dict[str, str]:
    """Each label as it is when all are short; else A, B, ... Z, A1, B1, ... so that headers
    and the slowest column stay whole (run folder names fragmented into header pieces)."""
    if all(len(label) <= SHORT_LABEL_CHARS for label in labels):
        return {label: label for label in labels}
    return {label: chr(ord("A") + i % 26) + (str(i // 26) if i >= 26 else "") for i, label in enumerate(labels)}


def slowest_rule(table: pd.DataFrame) -> str:
    """How 'slowest' was decided: against the step-to-step noise only where every input's steps
    give one (stats.noise.slowest), else on the material lead alone."""
    if table.attrs.get("noise", True):
        return "slowest only where its lead beats the step-to-step noise"
    return (f"slowest where its lead is over {100 * MIN_LEAD:.0f}% (and beyond the step-to-step noise where an "
            "input's steps give one; some have no steps)")


def _compare_table(c: Comparison, keys: list[str], top: int | None) -> Table:
    shown = c.table if not top else c.table.head(top)
    if len(c.labels) > MANY_RANKS:
        return _compare_spread_table(c, shown, keys)
    title = (f"aligned on {c.by}: {len(c.table):,} rows (showing {len(shown):,}); "
             f"{pct(aligned_share(c.table, len(c.labels)))} of the time is on rows every input has")
    if "scope" in keys and aligned_share(c.table, len(c.labels)) < 0.5:
        title += " (scopes differ between inputs: try --by kernel)"
    title += f"; compared {c.table.attrs.get('basis', 'totals')}"  # totals, or per call and why
    title += "; " + slowest_rule(c.table)
    short = short_labels(c.labels)
    t = Table(title=Text(title), title_justify="left", show_edge=False)
    ratios = 1 < len(c.labels) <= _MAX_RATIO_COLUMNS
    column, unit, cell = _shown_basis(c)
    for i, label in enumerate(c.labels):
        t.add_column(Text(f"{short[label]} ({unit})"), justify="right", overflow="fold")
        if ratios and i:
            t.add_column(Text(f"{short[label]} / first"), justify="right", overflow="fold")
    t.add_column("spread", justify="right")
    t.add_column("slowest", no_wrap=True)
    t.add_column(" | ".join(keys), overflow="fold")
    for _, r in shown.iterrows():
        cells = []
        for i, label in enumerate(c.labels):
            cells.append(cell(r[f"{column}[{label}]"]))
            if ratios and i:
                cells.append(_ratio(r[f"ratio[{label}]"]))
        t.add_row(*cells, _ratio(r["spread"]), Text(short.get(str(r["slowest"]), str(r["slowest"]))),
                  _key_text(r, keys))
    return t


def _shown_basis(c: Comparison):
    """The columns the table shows, their unit and formatter: the totals (ms), or where the
    comparison is per call (stats.noise.basis) each input's mean per call (us), as the ratios are;
    the totals stay in the totals table, the CSV and the JSON."""
    if c.table.attrs.get("basis_kind") == "per call":
        return "mean_ns", "us/call", us_cell
    return "time_ns", "ms", ms_cell


def _compare_spread_table(c: Comparison, shown: pd.DataFrame, keys: list[str]) -> Table:
    """Many inputs: per row, how many inputs have it and its smallest, median and largest time
    over them, the spread and the slowest input, instead of a column per input."""
    column, unit, cell = _shown_basis(c)
    values = shown[[f"{column}[{label}]" for label in c.labels]]
    t = Table(title=Text(f"aligned on {c.by}: {len(c.table):,} rows (showing {len(shown):,}) over {len(c.labels):,} "
                         f"inputs; compared {c.table.attrs.get('basis', 'totals')}; {slowest_rule(c.table)}"),
              title_justify="left", show_edge=False)
    for name in ("inputs", f"min ({unit})", f"median ({unit})", f"max ({unit})", "spread", "slowest"):
        t.add_column(name, justify="right", no_wrap=name == "slowest")
    t.add_column(" | ".join(keys), overflow="fold")
    for (_, r), (_, v) in zip(shown.iterrows(), values.iterrows()):
        t.add_row(f"{int(r['inputs']):,}", cell(v.min()), cell(v.median()), cell(v.max()), _ratio(r["spread"]),
                  Text(str(r["slowest"])), _key_text(r, keys))
    return t


def _totals_table(totals: pd.DataFrame, measured: str) -> Table:
    if len(totals) > MANY_RANKS:
        return spread_table(f"{measured} per input", totals, {"total_ns": "total (ms)", "compute_ns": "compute (ms)",
                                                              "comm_ns": "communication (ms)"},
                             ["total_ns", "compute_ns", "comm_ns"])
    t = Table(title=f"{measured} per input ({summed_over(measured)})", title_justify="left", show_edge=False)
    for name in ("input", "source", "total (ms)", "compute (ms)", "communication (ms)", "/ first"):
        t.add_column(name, justify="left" if name in ("input", "source") else "right")
    for _, r in totals.iterrows():
        t.add_row(Text(r["label"]), r["source"], ms_cell(r["total_ns"]), ms_cell(r["compute_ns"]), ms_cell(r["comm_ns"]),
                  _ratio(r["ratio"]))
    return t


def _timeline_table(tl: pd.DataFrame, groups: pd.DataFrame | None = None) -> Table:
    if len(tl) > MANY_RANKS:
        per_input = tl.merge(groups, on="label", how="left") if groups is not None else tl.assign(group="")
        return spread_table("GPU timeline per input", per_input,
                             {"busy_ns": "busy (ms)", "idle_share": "idle share", "exposed_ns": "exposed comm (ms)"},
                             ["busy_ns", "exposed_ns"])
    t = Table(title="GPU timeline per input (union of intervals over streams)", title_justify="left",
              show_edge=False)
    heads = ("input", "busy (ms)", "span (ms)", "idle", "comm (ms)", "overlapped (ms)", "exposed (ms)", "exposed")
    for name in heads:
        t.add_column(name, justify="left" if name == "input" else "right")
    for _, r in tl.iterrows():
        t.add_row(Text(r["label"]), ms_cell(r["busy_ns"]), ms_cell(r["span_ns"]), pct(r["idle_share"]), ms_cell(r["comm_ns"]),
                  ms_cell(r["overlap_ns"]), ms_cell(r["exposed_ns"]), pct(r["exposed_share"]))
    return t


def _skew_table(skew: pd.DataFrame) -> Table:
    t = Table(title="collective skew across ranks (i-th launch of each kernel aligned)", title_justify="left",
              show_edge=False)
    for name in ("run", "collectives", "mean start skew (us)", "max (us)", "last rank (share)", "clock", "kernel"):
        t.add_column(name, justify="right" if "(" in name or name == "collectives" else "left", overflow="fold")
    for _, r in skew.iterrows():
        t.add_row(Text(r["group"] or "-"), f"{int(r['instances']):,}", us_cell(r["mean_skew_ns"]), us_cell(r["max_skew_ns"]),
                  f"{int(r['last_rank'])} ({pct(r['last_share'])})", r["clock"], Text(r["kernel"]))
    return t


def compare_tables(c: Comparison, keys: list[str], top: int | None = None) -> Group:
    """The aligned table, totals, straggler lines, and timeline and skew tables when timed."""
    legend = [Text(f"{s} = {label}") for label, s in short_labels(c.labels).items() if s != label]
    parts = [*legend, _compare_table(c, keys, top), _totals_table(c.totals, c.measured)]
    parts += [Text(straggler_line(r, c.measured)) for _, r in c.stragglers.iterrows()]
    if len(c.timeline):
        parts.append(_timeline_table(c.timeline, c.totals[["label", "group"]]))
    if len(c.skew):
        parts.append(_skew_table(c.skew))
    return Group(*parts)


def compare_csv(c: Comparison, keys: list[str], top: int | None = None) -> str:
    return csv_text(c.table if not top else c.table.head(top))


def compare_json(c: Comparison, keys: list[str], top: int | None = None) -> str:
    doc = {"by": c.by, "basis": c.table.attrs.get("basis"), "inputs": records(c.totals),
           "straggler": c.straggler, "stragglers": records(c.stragglers),
           "timeline": records(c.timeline), "collective_skew": records(c.skew),
           "rows": records(c.table if not top else c.table.head(top))}
    return dumps(doc)


# format name -> renderer(comparison, keys, top); the CLI's --format choices come from here
COMPARE_RENDERERS = {"table": compare_tables, "csv": compare_csv, "json": compare_json}


def tree_diff_text(rows: pd.DataFrame, first: str, second: str):
    """A rich tree of a proton tree diff: delta, then first -> second (ms), then the name;
    red where the second is slower, green where faster, a mark where a node is in one tree only."""
    from rich.tree import Tree

    from tracelab.core.classify import canonical

    def label(r: pd.Series) -> Text:
        name = canonical(r["name"]) if r["is_kernel"] else r["name"]
        style = "red" if r["delta_ns"] > 0 else "green" if r["delta_ns"] < 0 else ""
        only = {"first": f"  (only in {first})", "second": f"  (only in {second})"}.get(r["only_in"], "")
        text = Text(f"{r['delta_ns'] / 1e6:+,.3f} ms", style=style)
        text.append(f"  {ms_cell(r['first_ns'])} -> {ms_cell(r['second_ns'])}  ")
        text.append(name + only)
        return text

    nodes: dict[int, Tree] = {}
    root = Tree(Text(f"time difference, {second} - {first} (inclusive, ms)"))
    for _, r in rows.iterrows():
        parent = nodes.get(int(r["parent"]), root)
        nodes[int(r["node"])] = parent.add(label(r))
    return root
