"""The gate's section in the HTML report: a report of two runs holds, per metric, the verdict
`tracelab gate` gives the same pair (read from the gate's own JSON); a report of one run has no
such section; a run the gate cannot read gets one line, and the rest of the report stays."""
from __future__ import annotations

import html
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import check_rendered, run_cli_output

from tracelab.cli.html_report import write_report
from tracelab.core.options import Options
from tracelab.ingest.session import Session
from tracelab.reports.gate import gate_html
from tracelab.reports.html import html as report_html
from tracelab.reports.ranks import Input
from tracelab.core.schema import coerce

DATA = Path(__file__).parent / "data"
EQUAL, LATE = DATA / "ddp-2gpu-equal-torch", DATA / "ddp-2gpu-late-torch"


@pytest.fixture(scope="module")
def session() -> Session:
    return Session.open([str(EQUAL), str(LATE)], Options.from_environment())


@pytest.fixture(scope="module")
def page(session, tmp_path_factory) -> Path:
    return write_report(session, tmp_path_factory.mktemp("report") / "two.html")


def gate_rows(text: str) -> tuple[str, dict[str, tuple[str, bool]]]:
    """The gate section's heading and metric -> (verdict, failed) from its table's rows."""
    (section,) = re.findall(r'<section class="gate">(.*?)</section>', text, re.S)
    heading = html.unescape(re.search(r"<h3[^>]*>(.*?)</h3>", section).group(1))
    rows = {}
    for status, cells in re.findall(r'<tr class="(\w+)">(.*?)</tr>', section, re.S):
        values = [html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", cells)]
        rows[values[0]] = (values[4], status == "fail")
    return heading, rows


@pytest.mark.slow
def test_two_runs_hold_the_gates_verdict(page, capsys):
    status, out, _ = run_cli_output(capsys, "gate", str(EQUAL), str(LATE), "--format", "json")
    judged = json.loads(out)
    heading, rows = gate_rows(page.read_text())
    assert rows == {m["metric"]: (m["verdict"], m["regression"]) for m in judged["metrics"]}
    regressions = sum(m["regression"] for m in judged["metrics"])
    assert not judged["passed"] and status != 0 and regressions > 0  # the pair shows a failing gate
    assert heading == f"Gate: ddp-2gpu-late-torch against ddp-2gpu-equal-torch: FAIL ({regressions} regressions)"
    # the figures read from the run folders' run.json, as the gate reads them
    assert any(m["metric"].startswith("result:") for m in judged["metrics"])


def _inputs(runs: tuple[str, ...]) -> list[Input]:
    """Two ranks per run, a kernel each."""
    df = coerce({"rank": [0, 1], "source": "torch", "kind": "kernel", "name": "gemm_k", "kernel": "gemm_k",
                 "op_class": "gemm", "device": 0, "stream": 7, "start_ns": [0, 10], "dur_ns": [90, 95]})
    return [Input(f"{run}/rank{r}", run, r, "torch", df[df["rank"] == r], None) for run in runs for r in (0, 1)]


GLOO = DATA / "gloo-2cpu-equal", DATA / "gloo-2cpu-late"


@pytest.mark.parametrize("paths, gated", [
    ([GLOO[0]], False),  # one run: no section reads the gate's digest, so its workers make none
    ([GLOO[0] / "rank0.pt.trace.json.gz"], False),
    (list(GLOO), True),
    ([GLOO[0] / "rank0.pt.trace.json.gz", GLOO[1] / "rank1.pt.trace.json.gz"], True),  # each loose file may be a run
])
def test_the_report_makes_the_gates_digest_only_of_two_runs_or_more(paths, gated):
    from tracelab.reports.ranks import RANK_DIGESTS

    opened = Session.open([str(p) for p in paths])  # every digest the runs can use: the report's way
    ranks = [p for r in opened.runs for p in r.profiles]
    expected = [n for n in RANK_DIGESTS if gated or n != "gate"]
    assert ranks and all(sorted(p.summary) == sorted(expected) for p in ranks)


def test_one_run_has_no_gate_section():
    assert gate_html.sections(_inputs(("a",)), None, None, None, []) == []
    two = gate_html.sections(_inputs(("a", "b")), None, None, None, [])
    assert two[0] == '<h2 id="gate">Gate</h2>' and "Gate: b against a: pass" in two[2]


@pytest.mark.slow
def test_a_run_the_gate_cannot_read_gets_one_line(session):
    """A candidate whose ranks lack the gate's digest (its worker did not make it): the section
    says so in a line, and the page is written with every other section."""
    first = session.inputs[0].group
    inputs = [i if i.group == first else replace(i, summary={k: v for k, v in i.summary.items() if k != "gate"},
                                                 events=i.events.iloc[:0], memo={})
              for i in session.inputs]
    found = gate_html.sections(inputs, None, None, None, session.run_infos)
    assert len(found) == 3 and "not judged" in found[2] and "not made where it was parsed" in found[2]
    text = report_html.render(inputs, [str(EQUAL), str(LATE)], runs=session.run_infos)
    assert found[2] in text and '<h2 id="top-kernels">' in text


@pytest.mark.slow
def test_two_run_report_in_chromium(chromium, page):
    check_rendered(chromium, page)
