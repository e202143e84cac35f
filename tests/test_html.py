"""The HTML report opened in a real headless Chromium: no console messages, every plot
rendered, no network request from the page, trace strings escaped (no script from a
trace runs), atomic writes and --force; and the 8-rank 1M-event size and open time.

The screenshot is kept under $TRACELAB_TEST_ARTIFACTS (default: test-artifacts/ in the
checkout); the test prints its path.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ARTIFACTS, ROOT, check_rendered, open_page, shared_trace

from tracelab.core.errors import OutputError, UsageError
from tracelab.cli.html_report import write_report
from tracelab.ingest.inputs import write
from tracelab.reports.html import html
from tracelab.reports.ranks import Input
from tracelab.core.schema import coerce

XSS = "<img src=x onerror=alert(1)>"
XSS_MARK = "<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">"
XSS_SCOPE = "</script><script>document.body.setAttribute('data-pwned','2')</script><!--"


@pytest.mark.slow
def test_detectors_catch_a_script_and_a_request(chromium, tmp_path):
    """Control: the checks below would see an injected handler run and a page request
    (slow, as every browser test it controls)."""
    page = tmp_path / "naive.html"
    page.write_text(f"<html><body>{XSS_MARK}<img src='http://127.0.0.1:9/x.png'>"
                    "<script>console.log('hello')</script></body></html>")
    got = open_page(chromium, page)
    assert 'data-pwned="1"' in got["dom"]
    assert "http://127.0.0.1:9/x.png" in got["requests"]
    assert any("hello" in line for line in got["console"])


def _run_folder(tmp_path: Path) -> Path:
    run = tmp_path / "decode-torch-20261121-221530"
    run.mkdir()
    for rank in (0, 1):
        (run / f"rank{rank}.pt.trace.json.gz").symlink_to(shared_trace(f"hta/trace_filter/sampled_rank-{rank}.json.gz"))
    (run / "run.json").write_text(json.dumps({"command": "tracelab run decode --ranks 2", "note": XSS,
                                              "config": {"model": "tiny", "tokens": 8}}))
    return run


@pytest.mark.slow
def test_run_report_in_chromium(chromium, tmp_path):
    from typer.testing import CliRunner

    from tracelab.cli import app

    out = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", str(_run_folder(tmp_path)), "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.count("<script>") == 2 and "cdn.plot.ly/plotly" not in text  # plotly.js once, inline
    assert "tracelab run decode --ranks 2" in text and XSS not in text and html._e(XSS) in text
    # two sampled ranks of HTA's 128-rank job hold 2 steps: too few to name a straggler
    for section in ("Timeline", "Busy, idle and communication overlap", "Collective skew",
                    "Steps: who waits on whom", "no clear straggler: no rank is significantly late"):
        assert section in text
    check_rendered(chromium, out)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report-hta-2-ranks.png"
    shot.unlink(missing_ok=True)
    open_page(chromium, out, screenshot=shot)
    assert shot.stat().st_size > 10_000
    print(f"\nscreenshot of the report: {shot}")


@pytest.mark.slow
def test_runs_comparison_report_in_chromium(chromium, tmp_path):
    out = tmp_path / "runs.html"
    proc = subprocess.run([sys.executable, "-m", "tracelab", "report", str(shared_trace("nsys-ai/mfu_2gpu_before.sqlite")),
                           str(shared_trace("nsys-ai/mfu_2gpu_after.sqlite")), "-o", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "Comparison (aligned on kernel" in text and "mfu_2gpu_after/rank1" in text
    check_rendered(chromium, out)


# ---- untrusted strings -----------------------------------------------------------------


def _evil_inputs() -> list[Input]:
    """Two runs whose kernels and scopes are named by an attacker; timed, so every section shows."""
    names = [XSS, XSS_MARK, "ncclDevKernel_AllReduce", "</b><i>" + XSS_SCOPE]
    out = []
    for run, shift in (("before<script>", 0), (XSS, 7)):
        df = coerce({"rank": [0, 0, 0, 0, 1, 1, 1, 1], "source": "torch", "kind": "kernel",
                     "name": names * 2, "kernel": names * 2,
                     "op_class": ["gemm", "other", "communication", "elementwise"] * 2, "scope": XSS_SCOPE,
                     "device": 0, "stream": 7, "start_ns": [0, 100, 200, 300, 5, 110, 230, 300],
                     "dur_ns": [90 + shift, 80, 50, 20, 95, 70, 40, 25]})
        for rank in (0, 1):
            out.append(Input(f"{run}/rank{rank}", run, rank, "torch", df[df["rank"] == rank], None))
    return out


@pytest.mark.slow
def test_trace_strings_are_escaped_and_no_script_runs(chromium, tmp_path):
    page = tmp_path / "evil.html"
    write(page, html.render(_evil_inputs(), [str(tmp_path / XSS)], {"note": XSS_SCOPE}, title=XSS))
    text = page.read_text()
    for payload in (XSS, XSS_MARK, XSS_SCOPE, "before<script>"):
        assert payload not in text
    data = text.split('id="tracelab-figures">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and json.loads(data)  # escaped as \u003c, still valid JSON
    got = check_rendered(chromium, page)
    assert 'data-pwned="' not in got["dom"]  # the attribute; the escaped payload text names it
    assert not re.search(r"<img[^>]*src=\"?x", got["dom"])
    assert "&lt;img src=x onerror=alert(1)&gt;" in got["dom"]


def test_script_json_escapes():
    value = {"k": "</script><!--<b>&\u2028\u2029"}
    text = html.script_json(value)
    assert not set("<>&\u2028\u2029") & set(text)
    assert json.loads(text) == value


# ---- writing -------------------------------------------------------------------------------


def test_existing_output_needs_force(tmp_path, capsys):
    from helpers import run_cli_output

    out = tmp_path / "report.html"
    out.write_text("old")
    with pytest.raises(UsageError, match="--force"):
        write(out, "new")
    assert out.read_text() == "old"
    write(out, "new", force=True)
    assert out.read_text() == "new"
    status, _, err = run_cli_output(capsys, "report", str(shared_trace("proton/cuda.json")), "-o", str(out))
    assert status == 2 and err.count("\n") == 1 and "--force" in err
    assert out.read_text() == "new"


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    out = tmp_path / "report.html"
    out.write_text("old")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OutputError, match=f"{out}: cannot write: disk full"):  # names the report, not the temporary
        write(out, "new", force=True)
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_bad_output_path(tmp_path, where):
    target = tmp_path / "nope" / "r.html" if where == "missing folder" else tmp_path
    with pytest.raises(UsageError):
        write(target, "x", force=True)


# ---- size and open time: 8 ranks, 1M events ------------------------------------------------


@pytest.mark.slow
@pytest.mark.alone  # its bound is the browser's wall time: CI runs it with nothing beside it
def test_8_ranks_1m_events_small_and_fast(chromium, tmp_path):
    spec = importlib.util.spec_from_file_location("report_bench", ROOT / "benchmarks" / "report_html.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    inputs = bench.synthetic_inputs(ranks=8, events=1_000_000)
    assert sum(len(i.events) for i in inputs) == 1_000_000
    out = write(tmp_path / "big.html", html.render(inputs, ["synthetic"]))
    assert out.stat().st_size < 10e6
    _replayed(out.read_text(), inputs)
    _, render_ms, plots = bench.open_in_chromium(out, chromium)
    # the plots' own render time in headless Chromium on a 2-core machine: 1.1 s on 2026-11-23's, 4.7-6.2 s
    # on 2026-12-07's (the same file, old and new trees alike); the limit catches a render that grows with
    # the events, an order of magnitude, not the machine's speed of the day. Five plots: the what-if's
    # critical path beside the four others, since every rank issues its collectives in one order
    assert plots == 5 and 0 < render_ms < 10_000
    print(f"\n8 ranks x 125k events: {out.stat().st_size / 1e6:.2f} MB, plots rendered at {render_ms} ms")


def _replayed(page: str, inputs: list[Input]) -> None:
    """The page's what-if replays the job (its ranks issue their collectives in one order): the
    no-host-gaps row predicts a step shorter than the measured one by its saving, and no shorter
    than the busiest stream's work (a stream's ops run one after another in any replay)."""
    section = page[page.index('<h2 id="whatif">'):page.index("<h2", page.index('<h2 id="whatif">') + 10)]
    assert "no what-if" not in section
    heads = [re.sub("<[^>]+>", "", h) for h in re.findall(r"<th[^>]*>(.*?)</th>", section.split("</thead>")[0], re.S)]
    row = re.search(r'<tr><td class="t">no-host-gaps</td>.*?</tr>', section, re.S).group(0)
    ns = dict(zip(heads, (v for v, _ in re.findall(r'<td(?: class="t")?(?: data-v="([^"]*)")?>(.*?)</td>', row, re.S))))
    measured_ns, predicted_ns = float(ns["profiled: measured, mean (ms)"]), float(ns["profiled: predicted, mean (ms)"])
    busiest_ns = max(i.events.groupby("stream")["dur_ns"].sum().max() for i in inputs)
    assert busiest_ns <= predicted_ns < measured_ns
    assert abs(float(ns["profiled: saving (ms)"]) - (measured_ns - predicted_ns)) <= 1


@pytest.mark.parametrize("trace, heading, rows", [
    ("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", "CPU operator time per input", "CPU operators"),
    ("hta/trace_filter/sampled_rank-0.json.gz", "GPU time per input", "kernels"),
])
def test_headings_say_what_was_timed(trace, heading, rows, tmp_path):
    out = write_report([shared_trace(trace)], tmp_path / "r.html")
    text = out.read_text()
    assert f'<h2 id="op-classes">{heading}, by op class</h2>' in text and f'<h2 id="top-kernels">Top {rows}</h2>' in text
    other = "GPU time per input" if heading.startswith("CPU") else "CPU operator time"
    assert other not in text and text.count('<h2 id="top-kernels">Top ') == 1
    assert f"Top {rows}: {heading.split(' per ')[0]} (ms; colour: op class)" in text  # one input's bars' title
    assert f'<th class="t">{rows[:-1]}</th>' in text  # the top table's first column
    summed = "threads" if heading.startswith("CPU") else "streams"
    assert f"The totals are summed over {summed}, which overlap" in text  # beside a finding's union of them
