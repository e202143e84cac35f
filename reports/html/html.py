"""One self-contained, offline HTML report (plotly.js packed once in the page, reports/html/page.py;
no network requests). `render(...) -> str` only: loading the traces and reading run.json are the
Session's, writing the file the CLI's (tracelab/cli/html_report.write_report).

Every string from a trace (kernel names, scopes, file names, run info) is untrusted:
it is HTML-escaped in markup, entity-escaped inside plotly labels (plotly decodes
entities and shows the text), and the figures' JSON has `<`, `>` and `&` written
as \\u escapes so nothing in it can close the <script> that holds it.
"""
from __future__ import annotations

import html
import json
from typing import Any

import pandas as pd

from tracelab.core.errors import UsageError
from .. import fmt
from . import figures, notes, page, scopetree, side_by_side, workload_plots
from ..jsonout import strict
from ..runtable import number_text, run_table, shared_rows
from ..align.align import Comparison, comparison, rows_are, summed_over
from ..ranks import Input
from ..topics import TOPICS
from ..findings.findings import Evidence, Finding, as_json, findings, none_text

TOP_KERNELS_TABLE = 200
COMPARE_ROWS = 50

_STYLE = """
body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
td,th{padding:3px 8px;border-bottom:1px solid #eee;text-align:right;vertical-align:top}
td.t,th.t{text-align:left;overflow-wrap:anywhere;min-width:120px;max-width:640px}
th{background:#f4f4f4;position:sticky;top:0;overflow-wrap:normal;word-break:normal;min-width:64px}
table.sortable th{cursor:pointer}table.sortable td.t:first-child{min-width:280px}table.runs td{text-align:left;max-width:420px}table.runs th.f{text-align:left}
pre{margin:0;white-space:pre-wrap;font-size:12px}.note{color:#666}.plot{width:100%}
#findings{background:#fff8e6;border:1px solid #f0d9a0;border-radius:6px;padding:4px 16px 8px}
#findings h2{border:0;margin-top:8px}#findings ol{font-size:16px;line-height:1.5;padding-left:24px}
#findings a{color:#222;text-decoration:none;border-bottom:1px dotted #999}#findings a:hover{background:#fde9b5}
p.runline{color:#444;margin:-8px 0 12px}#notes{font-size:13px;color:#444;margin:0 0 12px}#notes p.note{margin:2px 0 2px 12px}details.notes summary{color:#666;cursor:pointer}
.box{overflow:auto;max-width:100%;margin:8px 0}.box table{margin:0}.box.long{max-height:640px}
p.shared{font-size:13px;color:#444;overflow-wrap:anywhere}
dl.run{display:grid;grid-template-columns:repeat(3,1fr);gap:2px 24px;font-size:13px;margin:4px 0 8px}
dl.run div{display:flex;gap:8px;border-bottom:1px solid #eee;padding:2px 0}dl.run dt{font-weight:600;min-width:140px}
dl.run dd{margin:0;overflow-wrap:anywhere}dl.run div.wide{grid-column:1/-1}
section.gate .pass{color:#17692e}section.gate .fail{color:#a11}section.gate tr.fail td{background:#fde2e2;color:#222}section.gate tr.warn td{background:#fff8e6}
""" + scopetree.TREE_STYLE

def script_json(value: Any) -> str:
    """JSON safe inside <script>: no `<`, `>`, `&` (so no `</script>`, no `<!--`) and no
    U+2028/U+2029 line separators."""
    text = json.dumps(strict(value), separators=(",", ":"), allow_nan=False, default=str)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                    ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def table(df: pd.DataFrame, columns: dict[str, str], sortable: bool = False) -> str:
    """An HTML table of df in a box that scrolls when wide or long; columns maps a column to its
    header, and a column with no value in any row is left out. Numbers carry data-v for sorting;
    a header ending in (ms)/(us) shows ns converted, one ending in % a share, a column named
    *_bytes a size (fmt.binary_size); a missing value reads '-'."""
    columns = {c: h for c, h in columns.items() if not _empty(df[c])}
    head = "".join(f'<th class="{"t" if _is_text(df[c]) else ""}">{wrap(h)}</th>' for c, h in columns.items())
    cells = [[_cell(v, h, _is_text(df[c]), c.endswith("_bytes")) for v in df[c].tolist()] for c, h in columns.items()]
    rows = "".join("<tr>" + "".join(row) + "</tr>" for row in zip(*cells))
    cls = ' class="sortable"' if sortable else ""
    box = "box long" if len(df) > LONG_TABLE_ROWS else "box"
    return f'<div class="{box}"><table{cls}><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'


LONG_TABLE_ROWS = 25  # a longer table scrolls inside a box of about this many rows


def _empty(column: pd.Series) -> bool:
    """No value in any row: every one missing, blank or '-' (a `run` column of one run)."""
    if not len(column):
        return False
    if _is_text(column):
        return bool(column.map(lambda v: _missing(v) or str(v).strip() in ("", "-")).all())
    return bool(column.isna().all())


def _missing(value: Any) -> bool:
    return value is None or (not isinstance(value, (str, list, dict, tuple)) and bool(pd.isna(value)))


def wrap(text: Any) -> str:
    """Escaped, with line breaks allowed only after - _ / . and spaces, so a long run name
    in a header wraps at its parts instead of mid-word."""
    out = _e(text)
    for sep in ("-", "_", "/", "."):
        out = out.replace(sep, sep + "<wbr>")
    return out


def _is_text(column: pd.Series) -> bool:
    return not pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column)


def _cell(value: Any, header: str, text: bool, size: bool = False) -> str:
    if _missing(value):
        return '<td class="t">-</td>' if text else '<td data-v="-1e300">-</td>'
    if text:
        return f'<td class="t">{_e(value)}</td>'
    if size:
        return f'<td data-v="{float(value)!r}">{fmt.binary_size(float(value))}</td>'
    scale, form = (1e6, "{:,.3f}") if header.endswith("(ms)") else (1e3, "{:,.2f}") if header.endswith("(us)") \
        else (0.01, "{:.1f}%") if header.endswith("%") else (1, None if isinstance(value, float) else "{:,}")
    shown = number_text(float(value), 3) if form is None else form.format(value / scale if scale != 1 else value)
    return f'<td data-v="{float(value)!r}">{shown}</td>'


def _runs_html(runs: list[tuple[str, dict]]) -> str:
    """The run table (one column per run: what differs first, what all share in one line), or
    for one run its fields in a compact grid; each run.json folded away below it."""
    raw = ('<p class="note">Each run.json in full: at the end of the page.</p>' if runs else "")
    if len(runs) == 1:
        df = run_table(runs)
        cells = "".join(f'<div{" class=wide" if len(_run_value(value)) > 60 else ""}><dt>{_e(field)}</dt>'
                        f"<dd>{_run_value(value)}</dd></div>" for field, value in zip(df.index, df.iloc[:, 0].tolist()))
        return f'<p><b>{_e(runs[0][0])}</b></p><dl class="run">{cells}</dl>{raw}'
    df, shared = shared_rows(run_table(runs))
    head = '<th class="f"></th>' + "".join(f'<th class="t">{wrap(name)}</th>' for name in df.columns)
    body = "".join(f'<tr><th class="f">{_e(field)}</th>' + "".join(f"<td>{_run_value(v)}</td>" for v in row) + "</tr>"
                   for field, row in zip(df.index, df.values.tolist()))
    same = f'<p class="shared"><b>Same in all {len(runs)} runs:</b> {_e(shared)}</p>' if shared else ""
    return f'<table class="runs"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{same}{raw}'


RUN_LINE_FIELDS = {"workload": "{}", "backend": "under {}", "GPUs": "on {}", "ranks": "ranks {}", "wall time (s)": "{} s wall"}


def _run_line(runs: list[tuple[str, dict]], inputs: list[Input]) -> str:
    """One line under the title: what ran (one run: its workload, backend, GPUs, ranks, wall
    time) or how many runs and inputs; the full table is the Run section's, at the end."""
    if len(runs) == 1:
        fields = run_table(runs).iloc[:, 0]
        parts = [form.format(_line_value(f, fields[f])) for f, form in RUN_LINE_FIELDS.items()
                 if f in fields and fields[f] not in (None, "-")]
    else:
        parts = [f"{len(runs):,} runs"] if runs else []
    parts += [f"{len(inputs):,} input{'s' if len(inputs) != 1 else ''}"] if inputs else []
    return f'<p class="runline">{", ".join(parts)} (<a href="#runs">what ran, in full</a>)</p>'


def _line_value(field: str, value: Any) -> str:
    """A run field for the line: a CPU-only run's 'none (CPU: x86_64, 2 cores)' GPUs as 'CPU: x86_64, 2 cores'."""
    text = _run_value(value)
    return text[len("none ("):-1] if field == "GPUs" and text.startswith("none (") and text.endswith(")") else text


def _run_jsons_html(runs: list[tuple[str, dict]]) -> str:
    """Each run.json folded away, for the end of the page (hundreds of lines: below the charts)."""
    if not runs:
        return ""
    return '<h2 id="run-json">run.json</h2>' + "".join(
        f'<details><summary>run.json of {_e(name)}</summary><table>'
        + "".join(f'<tr><th class="t">{_e(k)}</th><td class="t">{_info_value(v)}</td></tr>' for k, v in info.items())
        + "</table></details>" for name, info in runs)


def _run_value(value: Any) -> str:
    if isinstance(value, float):
        return _e(number_text(value))
    return _e("-" if value is None else _plain(value))


def _inputs_html(inputs: list[Input], paths: list[str], perfetto: str | None) -> str:
    """One row per input (its GPU model and, when exported, a link to the merged timeline);
    above MANY_RANKS inputs one row per run."""
    note = f'<p class="note">from {_e(", ".join(map(str, paths)))}</p>'
    if perfetto:
        note += (f'<p>Every timed rank on one clock, collectives linked: <a href="{_e(_href(perfetto))}">{_e(perfetto)}</a> '
                 "(open it in Perfetto's UI or chrome://tracing; one process per rank, one track per stream, "
                 "steps on a track of their own where the traces mark them)</p>")
    df = pd.DataFrame({"input": [i.label for i in inputs], "group": [i.group or "-" for i in inputs],
                       "source": [i.source for i in inputs], "rank": [i.rank for i in inputs],
                       "device": [i.device or "-" for i in inputs],
                       "timed": [i.timed for i in inputs]})
    if len(inputs) > figures.MANY_RANKS:
        runs = df.groupby("group", sort=False).agg(inputs=("input", "size"), first=("rank", "min"), last=("rank", "max"),
                                                   source=("source", lambda s: ", ".join(sorted(set(s)))),
                                                   device=("device", lambda s: ", ".join(sorted(set(s))))).reset_index()
        runs["ranks"] = runs["first"].astype(str) + "-" + runs["last"].astype(str)
        return note + table(runs, {"group": "run", "inputs": "ranks", "ranks": "rank range", "source": "source",
                                   "device": "device"})
    rows = "".join(f'<tr><td class="t">{_e(r.input)}</td><td class="t">{_e(r.source)}</td><td>{r.rank}</td>'
                   f'<td class="t">{_e(r.device)}</td><td class="t">{_timeline_link(r, perfetto)}</td></tr>'
                   for r in df.itertuples())
    return (note + '<table><thead><tr><th class="t">input</th><th class="t">source</th><th>rank</th>'
            f'<th class="t">device</th><th class="t">timeline</th></tr></thead><tbody>{rows}</tbody></table>')


def _href(name: str) -> str:
    """A link to a file beside the report: ./-relative and percent-encoded, so that a name such
    as `javascript:x` or `a#b` stays a file name, never a scheme or a fragment."""
    from urllib.parse import quote

    return "./" + quote(name)


def _timeline_link(row, perfetto: str | None) -> str:
    if not row.timed:
        return "no timestamps (aggregated profile)"
    if not perfetto:
        return "timed (tracelab report --perfetto links a merged trace)"
    return f'<a href="{_e(_href(perfetto))}">rank {row.rank} in the merged trace</a>'


def _info_value(value: Any) -> str:
    """Scalars inline; a list or mapping as one line, folded away when long."""
    if isinstance(value, (dict, list)):
        line = json.dumps(value, default=str)
        if len(line) <= 160:
            return f"<code>{_e(line)}</code>"
        return f"<details><summary>{_e(line[:120])}…</summary><pre>{_e(_plain(value))}</pre></details>"
    return _e(_plain(value))


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=1, default=str)


def render(inputs: list[Input], paths: list[str], info: dict | None = None, title: str = "tracelab report",
           runs: list[tuple[str, dict]] | None = None, perfetto: str | None = None) -> str:
    """The whole report as one HTML string. `runs` are (folder name, run.json) of the run
    folders given (else `info`, one run.json); `perfetto` names a merged trace to link."""
    runs = runs if runs is not None else ([("run", info)] if info else [])
    figs: dict[str, dict] = {}
    across = workload_plots.across_runs(runs)
    combined = {workload for workload, _, _ in across}
    plots = [(note, fig) for _, note, fig in across]
    plots += [(f"{name}: {note}" if len(runs) > 1 else note, fig) for name, run in runs
              if run.get("workload") not in combined for note, fig in workload_plots.workload_figures(run)]
    if not inputs and not plots:
        raise UsageError("report", "no traces and no workload figures to report on")
    c = comparison(inputs, by="kernel") if inputs else None
    # the first screen: what ran in a line, the notes the findings rest on, the findings; then a
    # chart per question; what ran in full, the inputs and each run.json below them
    body = [f"<h1>{_e(title)}</h1>", _run_line(runs, inputs), notes_html(inputs)]
    body += [findings_html(findings(Evidence(inputs, c, runs)), inputs)] if c is not None else []
    if plots:
        body += ['<h2 id="workload">Workload figures</h2>'] + [_figure(figs, fig, note) for note, fig in plots]
    if c is not None:
        body += _sections(inputs, c, figs, runs)
    body += ['<h2 id="runs">Runs</h2>' if len(runs) > 1 else '<h2 id="runs">Run</h2>']
    body += [_runs_html(runs)] if runs else []
    body += [_inputs_html(inputs, paths, perfetto)]
    body += [_run_jsons_html(runs)]
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{page.policy()}">'
            f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>"
            + "".join(body)
            + f'<script type="application/json" id="tracelab-figures">{script_json(figs)}</script>'
            + page.scripts_html() + "</body></html>")


def _figure(figs: dict[str, dict], fig: dict, note: str = "") -> str:
    key = f"fig{len(figs)}"
    figs[key] = fig
    return (f'<p class="note">{_e(note)}</p>' if note else "") + f'<div class="plot" id="{key}"></div>'


TOTALS_COLUMNS = {"label": "input", "source": "source", "total_ns": "total (ms)", "compute_ns": "compute (ms)",
                  "comm_ns": "communication (ms)", "ratio": "/ first"}
TREES_SHOWN = 4  # inputs that get a scope tree of their own


def _per_input_table(df: pd.DataFrame, columns: dict[str, str], ms: list[str]) -> str:
    """A row per input, or above MANY_RANKS inputs the distribution per run and measure
    (`ms` columns, in ns, shown in ms)."""
    if len(df) <= figures.MANY_RANKS:
        return table(df, columns)
    scaled = df.assign(**{c: df[c] / 1e6 for c in ms})
    dist = figures.distribution(scaled, {c: columns[c] for c in columns if c not in ("label", "source", "group")})
    return (f'<p class="note">{len(df)} inputs: per run and measure, the spread over its ranks and the ranks '
            "beyond 3 median absolute deviations of the median</p>" + table(dist, figures.DISTRIBUTION_COLUMNS))


def notes_html(inputs: list[Input]) -> str:
    """What reading the traces had to assume, before the findings that rest on it: each note once,
    with the inputs it is about; past notes.NOTES_SHOWN, folded."""
    said: dict[str, list[str]] = {}
    for i in inputs:
        for note in i.meta.notes:
            said.setdefault(note.text, []).append(i.label)
    if not said:
        return ""
    items = [f"{_e(', '.join(labels) if len(labels) <= 4 else f'{len(labels):,} inputs')}: {_e(note)}"
             for note, labels in said.items()]
    return f'<section id="notes"><b>Notes on reading the traces</b>{notes.folded(items)}</section>'


def findings_html(found: list[Finding], inputs: list[Input] = ()) -> str:
    """The findings on top: each sentence links to the section that proves it; where there are
    none, why (findings.none_text: what the inputs cannot answer)."""
    if not found:
        untimed = {i.source for i in inputs if not i.timed}
        why = none_text(untimed, timed=any(i.timed for i in inputs) or not inputs)
        return f'<section id="findings"><h2>Findings</h2><p class="note">None: {_e(why)}.</p></section>'
    items = "".join(f'<li><a href="#{_e(f.section)}">{_e(f.text)}</a></li>' for f in found)
    data = f'<script type="application/json" id="tracelab-findings">{script_json(as_json(found))}</script>'
    return f'<section id="findings"><h2>Findings</h2><ol>{items}</ol>{data}</section>'


def _sections(inputs: list[Input], c: Comparison, figs: dict[str, dict], runs: list[tuple[str, dict]]) -> list[str]:
    events = figures.labelled_events(inputs)
    drawn, note = side_by_side.drawn(inputs)
    what = c.measured
    out = [f'<h2 id="op-classes">{what} per input, by op class</h2>',
           _figure(figs, figures.op_class_bars(side_by_side.only(events, drawn)), note),
           f'<p class="note">The totals are {summed_over(what)}, which overlap: a union over them '
           '(the timeline, the findings) is smaller.</p>',
           _per_input_table(c.totals, TOTALS_COLUMNS, ["total_ns", "compute_ns", "comm_ns"])]
    out += [f"<p>{_e(_straggler(r, what))}</p>" for _, r in c.stragglers.iterrows()]
    if (steps_fig := side_by_side.step_time_boxes(inputs)) is not None:
        out += ['<h2 id="step-times">Step time</h2>', _figure(figs, steps_fig)]
    rows = rows_are(events)
    columns = {**figures.top_kernel_columns([i.label for i in inputs]), "kernel": rows[:-1]}
    out += [f'<h2 id="top-kernels">Top {rows}</h2>', _top_figure(figs, events, drawn, what, rows, note),
            table(figures.top_kernels(events, TOP_KERNELS_TABLE), columns, sortable=True)]
    out += _timeline_sections(inputs, c, figs, drawn, note) + _tree_sections(inputs)
    for topic in TOPICS:  # each topic's own section (reports/topics.py), in their order
        if render_section := topic.section_renderer():
            out += render_section(inputs, lambda fig, note: _figure(figs, fig, note), table, c, runs)
    if len(c.skew):
        out += ['<h2 id="skew">Collective skew across ranks</h2>', table(c.skew, figures.SKEW_COLUMNS)]
    if len({i.group for i in inputs}) > 1 or len({i.source for i in inputs}) > 1:
        out += ['<h2 id="comparison">Comparison (aligned on kernel, against the first input)</h2>',
                table(c.table.head(COMPARE_ROWS), figures.compare_columns(c), sortable=True)]
    return out


def _top_figure(figs: dict[str, dict], events: pd.DataFrame, drawn: list[str], what: str, rows: str,
                note: str) -> str:
    """The top kernels of several inputs as a heatmap (input x kernel); of one input as bars,
    since one column of a heatmap is one colour."""
    if len(drawn) == 1:
        return _figure(figs, side_by_side.kernel_bars(events), f"{what} of the top {rows}, the largest on top")
    heat_note = (f"{what}, input x {rows[:-1]}; opens on each input against the row's median (red: more, "
                 "blue: less); the buttons switch to the colour per row or one log scale; "
                 "times of different inputs are never added together" + (f"; {note}" if note else ""))
    return _figure(figs, side_by_side.kernel_heatmap(events, drawn), heat_note)


def _timeline_sections(inputs: list[Input], c: Comparison, figs: dict[str, dict], drawn: list[str],
                       note_drawn: str) -> list[str]:
    """Timeline and overlap, with a note naming the inputs left out for want of timestamps."""
    untimed = [i for i in inputs if not i.timed]
    note = (f'<p class="note">The timeline, busy/idle and overlap need start times, which '
            f'{", ".join(sorted({i.source for i in untimed}))} input(s) do not have (a proton profile holds each '
            f'kernel once per scope, summed): left out here: {_e(", ".join(i.label for i in untimed))}. '
            "Capture with --backend torch or nsys for them.</p>") if untimed else ""
    out = ['<h2 id="timeline">Timeline</h2>', note] if note or len(c.timeline) else []
    if len(c.timeline):
        out += [_figure(figs, fig, label) for label, fig in figures.timelines(inputs)]
        tl = c.timeline.merge(c.totals[["label", "group"]], on="label", how="left")
        shown = c.timeline[c.timeline["label"].isin(drawn)]
        out += ['<h2 id="overlap">Busy, idle and communication overlap</h2>',
                _figure(figs, figures.overlap_bars(shown), note_drawn),
                _per_input_table(tl, figures.TIMELINE_COLUMNS,
                                 ["busy_ns", "span_ns", "comm_ns", "overlap_ns", "exposed_ns"])]
    return out


def _has_scopes(scope: pd.Series) -> bool:
    """Whether any row has a scope: a non-empty name, missing ones taken as ""."""
    if isinstance(scope.dtype, pd.StringDtype):  # str or missing: compared without a str per row made
        return bool((scope.to_numpy(dtype=object, na_value="") != "").any())
    return bool(scope.fillna("").astype(str).str.len().any())


def _tree_sections(inputs: list[Input]) -> list[str]:
    """Scope trees of the first inputs that have scopes, and the diff tree of two inputs."""
    scoped = [i for i in inputs if _has_scopes(i.sums["scope"])]
    if not scoped:
        return []
    out = ['<h2 id="scope-tree">Scope tree</h2>', '<p class="note">Inclusive time of every scope and of the kernels under it, '
           "share of the input's total and calls (like proton-viewer); folded: click a name to open it.</p>"]
    for i in scoped[:TREES_SHOWN]:
        out.append(f"<details><summary><b>{_e(i.label)}</b> ({_e(i.source)})</summary>"
                   f"{scopetree.tree_html(scopetree.scope_tree(i.sums))}</details>")
    if len(scoped) > TREES_SHOWN:
        out.append(f'<p class="note">{len(scoped) - TREES_SHOWN} more inputs with scopes are not shown.</p>')
    if len(inputs) == 2 and len(scoped) == 2:
        first, second = inputs
        out += [f"<h2>Scope tree diff: {_e(second.label)} against {_e(first.label)}</h2>",
                '<p class="note">Aligned on the scope path and kernel; red: slower in the second, green: faster.</p>',
                "<details><summary>the diff tree</summary>"
                + scopetree.tree_html(scopetree.tree_diff(first.sums, second.sums), diff=True) + "</details>"]
    return out


def _straggler(row: pd.Series, measured: str) -> str:
    from ..align.straggler_text import straggler_line

    return straggler_line(row, measured)
