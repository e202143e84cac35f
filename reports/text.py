"""Renderers for the terminal (rich tables), CSV and JSON. Units converted here only."""
from __future__ import annotations

import pandas as pd
from rich.console import Group
from rich.table import Table
from rich.text import Text

from tracelab.core.schema import recorded

from .breakdown.breakdown import spread
from .fmt import ms_cell, us_cell
from .compare.compare import Comparison, lead_and_wait, lead_explains_wait, summed_over
from .csvout import csv_text
from .jsonout import dumps, records
from .stats import MIN_LEAD_SHARE as MIN_LEAD
from .timeline.waits import material_lead
from .html.figures import MANY_RANKS, distribution


def _pct(x: float) -> str:
    return "-" if pd.isna(x) else f"{100 * x:.1f}%"


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
                     f"({_pct(row['idle_share'])} idle)")
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
            t.add_row(ms_cell(r["total_ns"]), _pct(r["share"]), f"{int(r['count']):,}", us_cell(r["mean_ns"]),
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
    head = _spread_table(f"{len(summary):,} ranks", per_rank, measures, [c for c in measures if c.endswith("_ns")])
    groups = spread(table, by)
    t = Table(title=Text(f"per {by}, over the {len(summary):,} ranks ({len(groups):,} rows; one rank's own table: "
                         f"--rank N)"), title_justify="left", show_edge=False)
    for name in ("ranks", "min (ms)", "median (ms)", "max (ms)", "median share", "most on"):
        t.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    t.add_column(by, overflow="ellipsis", no_wrap=True, max_width=100)
    for _, r in groups.iterrows():
        t.add_row(f"{int(r['ranks']):,}", ms_cell(r["min_ns"]), ms_cell(r["median_ns"]), ms_cell(r["max_ns"]),
                  _pct(r["median_share"]), f"rank {r['largest_rank']}" if r["max_ns"] > r["min_ns"] else "-",
                  Text(str(r[by]) or "(no scope)"))
    return Group(head, t)


def breakdown_csv(summary: pd.DataFrame, table: pd.DataFrame, by: str) -> str:
    return csv_text(table)


def breakdown_json(summary: pd.DataFrame, table: pd.DataFrame, by: str) -> str:
    return dumps({"by": by, "summary": records(summary), "breakdown": records(table)})


# format name -> renderer(summary, table, by); the CLI's --format choices come from here
BREAKDOWN_RENDERERS = {"table": breakdown_tables, "csv": breakdown_csv, "json": breakdown_json}


# ---- compare (tracelab compare) ----------------------------------------------

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


def straggler_line(row: pd.Series, measured: str) -> str:
    """One straggler row in words; `measured` is Comparison.measured ("GPU time", "CPU operator time").
    A run with timed collectives has its who-waits verdict (`line`, reports/timeline/waits.py)."""
    where = f" in {row['group']}" if row["group"] else ""
    if row.get("line"):
        return f"{row['line'].split(':', 1)[0]}{where}:{row['line'].split(':', 1)[1]}"
    if row.get("pattern") == "none":
        lead = (row["compute_ns"] - row["next_compute_ns"]) / row["compute_ns"] if row["compute_ns"] else 0.0
        why = (f"a lead of {_pct(lead)}, too small for totals without steps to tell from noise"
               if not material_lead(row) else f"but not the least communication time ({ms_cell(row['comm_ns'])} ms)")
        return (f"no clear straggler{where} (from totals, no timeline): {row['label']} has the most "
                f"non-communication {measured} ({ms_cell(row['compute_ns'])} ms against {ms_cell(row['next_compute_ns'])} ms "
                f"next), {why}")
    line = (f"straggler{where}: {row['label']}: the most non-communication {measured} "
            f"({ms_cell(row['compute_ns'])} ms against {ms_cell(row['next_compute_ns'])} ms next)")
    if row["comm_rank_min"] and row["comm_max_ns"] > row["comm_ns"]:
        line += (f" and the least in communication kernels ({ms_cell(row['comm_ns'])} ms against up to "
                 f"{ms_cell(row['comm_max_ns'])} ms): the other ranks wait for it in collectives")
        if lead_explains_wait(row):
            return line
        lead, wait = lead_and_wait(row)
        return line + (f"; its compute lead ({ms_cell(lead)} ms) is {100 * lead / wait:.1f}% of their extra wait: "
                       "the rest is outside its GPU kernels")
    return line + f"; its communication time ({ms_cell(row['comm_ns'])} ms) is not the lowest"


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
             f"{_pct(aligned_share(c.table, len(c.labels)))} of the time is on rows every input has")
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


def _spread_table(title: str, per_input: pd.DataFrame, measures: dict[str, str], ms: list[str]) -> Table:
    """Many inputs: per run and measure, the spread over its inputs and the outliers (figures.distribution)."""
    scaled = per_input.assign(**{c: per_input[c] / 1e6 for c in ms})
    dist = distribution(scaled, measures)
    t = Table(title=f"{title}: over {len(per_input):,} inputs, per run and measure (beyond 3 MADs: outliers)",
              title_justify="left", show_edge=False)
    for name in ("run", "measure", "inputs", "min", "median", "max", "largest", "outliers"):
        t.add_column(name, justify="right" if name in ("inputs", "min", "median", "max") else "left", overflow="fold")
    for _, r in dist.iterrows():
        number = (lambda x: f"{x:,.3f}") if r["measure"].endswith("(ms)") else (lambda x: f"{x:,.3g}")
        t.add_row(Text(str(r["group"])), r["measure"], f"{int(r['inputs']):,}", number(r["min"]), number(r["median"]),
                  number(r["max"]), Text(str(r["largest"])), Text(str(r["outliers"])))
    return t


def _totals_table(totals: pd.DataFrame, measured: str) -> Table:
    if len(totals) > MANY_RANKS:
        return _spread_table(f"{measured} per input", totals, {"total_ns": "total (ms)", "compute_ns": "compute (ms)",
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
        return _spread_table("GPU timeline per input", per_input,
                             {"busy_ns": "busy (ms)", "idle_share": "idle share", "exposed_ns": "exposed comm (ms)"},
                             ["busy_ns", "exposed_ns"])
    t = Table(title="GPU timeline per input (union of intervals over streams)", title_justify="left",
              show_edge=False)
    heads = ("input", "busy (ms)", "span (ms)", "idle", "comm (ms)", "overlapped (ms)", "exposed (ms)", "exposed")
    for name in heads:
        t.add_column(name, justify="left" if name == "input" else "right")
    for _, r in tl.iterrows():
        t.add_row(Text(r["label"]), ms_cell(r["busy_ns"]), ms_cell(r["span_ns"]), _pct(r["idle_share"]), ms_cell(r["comm_ns"]),
                  ms_cell(r["overlap_ns"]), ms_cell(r["exposed_ns"]), _pct(r["exposed_share"]))
    return t


def _skew_table(skew: pd.DataFrame) -> Table:
    t = Table(title="collective skew across ranks (i-th launch of each kernel aligned)", title_justify="left",
              show_edge=False)
    for name in ("run", "collectives", "mean start skew (us)", "max (us)", "last rank (share)", "clock", "kernel"):
        t.add_column(name, justify="right" if "(" in name or name == "collectives" else "left", overflow="fold")
    for _, r in skew.iterrows():
        t.add_row(Text(r["group"] or "-"), f"{int(r['instances']):,}", us_cell(r["mean_skew_ns"]), us_cell(r["max_skew_ns"]),
                  f"{int(r['last_rank'])} ({_pct(r['last_share'])})", r["clock"], Text(r["kernel"]))
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
