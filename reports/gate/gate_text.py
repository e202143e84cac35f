"""The gate's renderers: a table for the terminal, strict JSON, JUnit XML (one testcase per
metric, a failure per regression: what CI services read as test reports), Markdown (a pull
request's summary) and an HTML page (a CI artefact). Each takes a Gate (verdict.py) and
returns text."""
from __future__ import annotations

import html
import math
from dataclasses import asdict
from xml.etree import ElementTree as ET

from ..fmt import binary_size, duration
from ..jsonout import dumps
from ..runtable import number_text
from .samples import BYTES, COUNT, TIME
from .verdict import Gate, MetricVerdict

SUITE = "tracelab gate"


def value_text(value: float | None, unit: str) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    if unit == TIME:
        return duration(value)
    if unit == BYTES:
        return binary_size(value)
    return number_text(value) if unit in (COUNT, "") else f"{value:g}"


def share_text(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def _status(m: MetricVerdict) -> str:
    return "FAIL" if m.regression else ("warn" if m.worse else "ok")


def _threshold(m: MetricVerdict) -> str:
    return "off" if m.threshold is None else f"{m.threshold:.0%}" if m.threshold * 100 == round(m.threshold * 100) \
        else f"{m.threshold:.1%}"


MAX_SHOWN_SHARE = 10.0  # a detectable change past 1000% reads ">1000%": the input tells nothing of that metric


def _row(m: MetricVerdict) -> list[str]:
    detect = "-" if m.detectable is None else f">{MAX_SHOWN_SHARE:.0%}" if m.detectable > MAX_SHOWN_SHARE \
        else f"{m.detectable:.1%}"
    return [m.metric, value_text(m.baseline, m.unit), value_text(m.candidate, m.unit), share_text(m.relative),
            m.verdict, detect, _threshold(m), f"{m.n_baseline}/{m.n_candidate} {m.basis}", _status(m)]


HEADER = ["metric", "baseline", "candidate", "change", "verdict", "detectable", "max", "samples", "gate"]


def cause_lines(m: MetricVerdict) -> list[str]:
    """One line per cause: 'rank rank1: 0.20 ms -> 4.21 ms per step (+95.1% of the change)'."""
    return [f"{c.by} {c.name}: {value_text(c.baseline, m.unit)} -> {value_text(c.candidate, m.unit)} per step "
            f"({share_text(c.share)} of the change)" for c in m.why]


def table(g: Gate) -> str:
    rows = [HEADER] + [_row(m) for m in g.metrics]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) if i in (0, 4) else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows]
    out = [f"baseline: {', '.join(g.baseline)} (step time: {g.step_source['baseline']})",
           f"candidate: {', '.join(g.candidate)} (step time: {g.step_source['candidate']})", "", *lines]
    for m in g.regressions:
        out += ["", f"regression: {m.metric} {m.verdict} by {share_text(m.relative)} "
                    f"({value_text(m.baseline, m.unit)} -> {value_text(m.candidate, m.unit)}), beyond {_threshold(m)} "
                    "and the noise; why:", *(f"  {line}" for line in cause_lines(m) or ["(nothing in the traces explains it)"])]
    out += ["", *(n.text for n in g.notes), verdict_line(g)]
    return "\n".join(out) + "\n"


def verdict_line(g: Gate) -> str:
    if g.passed:
        return f"gate: pass ({len(g.metrics)} metrics, none worse beyond its threshold and the noise)"
    names = ", ".join(m.metric for m in g.regressions)
    return f"gate: FAIL ({len(g.regressions)} of {len(g.metrics)} metrics regressed: {names})"


def json_text(g: Gate) -> str:
    return dumps({"passed": g.passed, "baseline": g.baseline, "candidate": g.candidate, "step_source": g.step_source,
                  "metrics": [asdict(m) for m in g.metrics], "notes": [n.as_json() for n in g.notes]})


def junit(g: Gate) -> str:
    """pytest's junitxml shape: <testsuites><testsuite name tests failures errors skipped>, a
    <testcase classname name time> per metric, a <failure message> in each that regressed."""
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name=SUITE, tests=str(len(g.metrics)), failures=str(len(g.regressions)),
                          errors="0", skipped="0", time="0")
    for m in g.metrics:
        case = ET.SubElement(suite, "testcase", classname="tracelab.gate", name=m.metric, time="0")
        summary = (f"{m.metric} {m.verdict} {share_text(m.relative)}: {value_text(m.baseline, m.unit)} -> "
                   f"{value_text(m.candidate, m.unit)} (max {_threshold(m)})")
        if m.regression:
            failure = ET.SubElement(case, "failure", message=summary, type="regression")
            failure.text = "\n".join(cause_lines(m))
        else:
            ET.SubElement(case, "system-out").text = summary
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(g: Gate) -> str:
    head = "### tracelab gate: " + ("pass" if g.passed else f"FAIL ({len(g.regressions)} regressions)")
    rows = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    rows += ["| " + " | ".join(_md(c) for c in _row(m)) + " |" for m in g.metrics]
    out = [head, "", f"Baseline: {_md(', '.join(g.baseline))}; candidate: {_md(', '.join(g.candidate))}.", "", *rows]
    for m in g.regressions:
        out += ["", f"**{_md(m.metric)}** {m.verdict} by {share_text(m.relative)}; why:", "",
                *(f"- {_md(line)}" for line in cause_lines(m) or ["nothing in the traces explains it"])]
    out += [f"\n_{_md(n.text)}_" for n in g.notes]
    return "\n".join(out) + "\n"


PAGE_STYLE = """body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h1.pass{color:#17692e}h1.fail{color:#a11}h2,h3{font-size:16px;margin-top:24px}
table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;border-bottom:1px solid #eee;text-align:right}
td:first-child,th:first-child,td:nth-child(5){text-align:left}th{background:#f4f4f4}
tr.fail td{background:#fde2e2;font-weight:600}tr.warn td{background:#fff8e6}p.note{color:#555;font-size:13px}"""


def html_fragment(g: Gate, title: str = "tracelab gate", heading: str = "h1") -> str:
    """The gate as one <section> (no script): the verdict under `title` in a `heading`, the table
    of every metric (a row's class: fail, warn or ok), then why each regression happened, then
    the notes. The gate's page holds it alone; the HTML report holds one per candidate run."""
    e = html.escape
    head = f"{title}: " + ("pass" if g.passed else f"FAIL ({len(g.regressions)} regressions)")
    rows = "".join(f'<tr class="{_status(m).lower()}">' + "".join(f"<td>{e(c)}</td>" for c in _row(m)) + "</tr>"
                   for m in g.metrics)
    why = "".join(f'<h3>{e(m.metric)} {e(m.verdict)} by {share_text(m.relative)}; why:</h3><ul class="why">'
                  + "".join(f"<li>{e(line)}</li>" for line in cause_lines(m) or ["nothing in the traces explains it"])
                  + "</ul>" for m in g.regressions)
    notes = "".join(f'<p class="note">{e(n.text)}</p>' for n in g.notes)
    return (f'<section class="gate"><{heading} class="{"pass" if g.passed else "fail"}">{e(head)}</{heading}>'
            f"<p>Baseline: {e(', '.join(g.baseline))}; candidate: {e(', '.join(g.candidate))}.</p>"
            f"<table><thead><tr>{''.join(f'<th>{h}</th>' for h in HEADER)}</tr></thead><tbody>{rows}</tbody></table>"
            f"{why}{notes}</section>")


def html_page(g: Gate) -> str:
    """One self-contained page (no script, nothing fetched): the gate's fragment alone."""
    head = "tracelab gate: " + ("pass" if g.passed else f"FAIL ({len(g.regressions)} regressions)")
    return ('<!DOCTYPE html><html><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" '
            "content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>{html.escape(head)}</title><style>{PAGE_STYLE}</style></head><body>"
            f'<div id="gate">{html_fragment(g)}</div></body></html>\n')


RENDERERS = {"table": table, "json": json_text, "junit": junit, "markdown": markdown, "html": html_page}
