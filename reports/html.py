"""One self-contained, offline HTML report (plotly.js inlined once, no network requests).
`render(...) -> str` only: loading the traces, reading run.json and writing the file are
tracelab.inputs' (write_report).

Every string from a trace (kernel names, scopes, file names, run info) is untrusted:
it is HTML-escaped in markup, entity-escaped inside plotly labels (plotly decodes
entities and shows the text), and the figures' JSON has `<`, `>` and `&` written
as \\u escapes so nothing in it can close the <script> that holds it.
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
from typing import Any

import pandas as pd

from ..errors import UsageError
from . import figures, workload_plots
from .compare import Input, comparison, rows_are

TOP_KERNELS_TABLE = 200
COMPARE_ROWS = 50

_STYLE = """
body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
td,th{padding:3px 8px;border-bottom:1px solid #eee;text-align:right;vertical-align:top}
td.t,th.t{text-align:left;overflow-wrap:anywhere;min-width:120px;max-width:640px}
th{background:#f4f4f4;position:sticky;top:0}table.sortable th{cursor:pointer}
pre{margin:0;white-space:pre-wrap;font-size:12px}.note{color:#666}.plot{width:100%}
"""

# sorts a table.sortable by the clicked column: numbers by data-v, text otherwise
_SCRIPT = """
(function(){
var data=JSON.parse(document.getElementById('tracelab-figures').textContent);
var cfg={displaylogo:false,responsive:true};
var made=Object.keys(data).map(function(id){
  var f=data[id];return Plotly.newPlot(document.getElementById(id),f.data,f.layout,cfg);});
Promise.all(made).then(function(){document.body.setAttribute('data-plots',String(made.length));
  document.body.setAttribute('data-render-ms',String(Math.round(performance.now())));});
document.querySelectorAll('table.sortable').forEach(function(t){
  t.querySelectorAll('th').forEach(function(th,col){th.addEventListener('click',function(){
    var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows);
    var dir=th.getAttribute('data-dir')==='desc'?1:-1;th.setAttribute('data-dir',dir<0?'desc':'asc');
    rows.sort(function(a,b){var x=a.cells[col],y=b.cells[col];
      var u=x.getAttribute('data-v'),v=y.getAttribute('data-v');
      if(u!==null&&v!==null)return dir*(parseFloat(u)-parseFloat(v));
      return dir*x.textContent.localeCompare(y.textContent);});
    rows.forEach(function(r){body.appendChild(r);});});});});
})();
"""


def script_json(value: Any) -> str:
    """JSON safe inside <script>: no `<`, `>`, `&` (so no `</script>`, no `<!--`) and no
    U+2028/U+2029 line separators."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False, default=str)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                    ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def table(df: pd.DataFrame, columns: dict[str, str], sortable: bool = False) -> str:
    """An HTML table of df; columns maps a column to its header. Numbers carry data-v for
    sorting; a header ending in (ms)/(us) shows ns converted, one ending in % a share."""
    head = "".join(f'<th class="{"t" if _is_text(df[c]) else ""}">{_e(h)}</th>' for c, h in columns.items())
    cells = [[_cell(v, h, _is_text(df[c])) for v in df[c].tolist()] for c, h in columns.items()]
    rows = "".join("<tr>" + "".join(row) + "</tr>" for row in zip(*cells))
    cls = ' class="sortable"' if sortable else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _is_text(column: pd.Series) -> bool:
    return not pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column)


def _cell(value: Any, header: str, text: bool) -> str:
    if text or value is None:
        return f'<td class="t">{_e("" if value is None else value)}</td>'
    if pd.isna(value):
        return '<td data-v="-1e300">-</td>'
    scale, fmt = (1e6, "{:,.3f}") if header.endswith("(ms)") else (1e3, "{:,.2f}") if header.endswith("(us)") \
        else (0.01, "{:.1f}%") if header.endswith("%") else (1, "{:,.3g}" if isinstance(value, float) else "{:,}")
    return f'<td data-v="{float(value)!r}">{fmt.format(value / scale if scale != 1 else value)}</td>'


def _run_info_html(info: dict | None, inputs: list[Input], paths: list[str]) -> str:
    parts = []
    if info:
        rows = "".join(f'<tr><th class="t">{_e(k)}</th><td class="t">{_info_value(v)}</td></tr>'
                       for k, v in info.items())
        parts.append(f"<table>{rows}</table>")
    files = pd.DataFrame({"input": [i.label for i in inputs], "source": [i.source for i in inputs],
                          "rank": [i.rank for i in inputs], "rows": [len(i.events) for i in inputs]})
    parts.append(f'<p class="note">from {_e(", ".join(map(str, paths)))}</p>')
    parts.append(table(files, {"input": "input", "source": "source", "rank": "rank", "rows": "rows"}))
    return "".join(parts)


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


def render(inputs: list[Input], paths: list[str], info: dict | None = None, title: str = "tracelab report") -> str:
    """The whole report as one HTML string."""
    from plotly.offline import get_plotlyjs

    figs: dict[str, dict] = {}
    plots = workload_plots.workload_figures(info) if info else []
    if not inputs and not plots:
        raise UsageError("report", "no traces and no workload figures to report on")
    body = [f"<h1>{_e(title)}</h1>", "<h2>Run</h2>", _run_info_html(info, inputs, paths)]
    if plots:
        body += ["<h2>Workload figures</h2>"] + [_figure(figs, fig, note) for note, fig in plots]
    if inputs:
        body += _sections(inputs, comparison(inputs, by="kernel"), figs)
    scripts = [get_plotlyjs(), _SCRIPT]
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{_policy(scripts)}">'
            f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>"
            + "".join(body)
            + f'<script type="application/json" id="tracelab-figures">{script_json(figs)}</script>'
            + "".join(f"<script>{code}</script>" for code in scripts) + "</body></html>")


def _policy(scripts: list[str]) -> str:
    """Content-Security-Policy: no network at all, and only our own scripts run (by hash),
    so neither an injected <script> nor an inline handler (onerror=...) could."""
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'" for s in scripts)
    return (f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; "
            "img-src data: blob:; font-src data:; connect-src 'none'")


def _figure(figs: dict[str, dict], fig: dict, note: str = "") -> str:
    key = f"fig{len(figs)}"
    figs[key] = fig
    return (f'<p class="note">{_e(note)}</p>' if note else "") + f'<div class="plot" id="{key}"></div>'


def _sections(inputs: list[Input], c, figs: dict[str, dict]) -> list[str]:
    events = figures.labelled_events(inputs)
    what = c.measured
    out = [f"<h2>{what} per input, by op class</h2>", _figure(figs, figures.op_class_bars(events))]
    out += [table(c.totals, {"label": "input", "source": "source", "total_ns": "total (ms)",
                             "compute_ns": "compute (ms)", "comm_ns": "communication (ms)", "ratio": "/ first"})]
    out += [f"<p>{_e(_straggler(r, what))}</p>" for _, r in c.stragglers.iterrows()]
    rows = rows_are(events)
    columns = {**figures.TOP_KERNEL_COLUMNS, "kernel": rows[:-1]}
    out += [f"<h2>Top {rows}</h2>", _figure(figs, figures.kernel_heatmap(events), f"{what} (ms), input x {rows[:-1]}"),
            table(figures.top_kernels(events, TOP_KERNELS_TABLE), columns, sortable=True)]
    if len(c.timeline):
        out += ["<h2>Timeline</h2>"]
        out += [_figure(figs, fig, note) for note, fig in figures.timelines(inputs)]
        out += ["<h2>Busy, idle and communication overlap</h2>", _figure(figs, figures.overlap_bars(c.timeline)),
                table(c.timeline, figures.TIMELINE_COLUMNS)]
    if len(c.skew):
        out += ["<h2>Collective skew across ranks</h2>", table(c.skew, figures.SKEW_COLUMNS)]
    if len({i.group for i in inputs}) > 1 or len({i.source for i in inputs}) > 1:
        out += ["<h2>Comparison (aligned on kernel, against the first input)</h2>",
                table(c.table.head(COMPARE_ROWS), figures.compare_columns(c), sortable=True)]
    return out


def _straggler(row: pd.Series, measured: str) -> str:
    from .text import straggler_line

    return straggler_line(row, measured)
