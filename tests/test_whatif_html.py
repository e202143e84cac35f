"""The report's what-if section (reports/whatif/whatif_html.py): its step table against the steps
measured from the raw GPU rows, the path's parts adding up to the step, the scenario's prediction
between the GPU's busy time and the measured step, a proton input beside it told why it has
none; and the page in headless Chromium (plots drawn, no console
message, no request)."""
from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import check_rendered
from typer.testing import CliRunner

import tracelab
from tracelab.cli import app
from tracelab.reports.whatif.path import CATEGORIES

DATA = Path(__file__).parent / "data"
TORCH, PROTON = DATA / "train-1gpu-steps-torch", DATA / "train-1gpu-steps-proton"


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("whatif-report") / "report.html"
    result = CliRunner().invoke(app, ["report", str(TORCH), str(PROTON), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _section(text: str) -> str:
    start = text.index('<h2 id="whatif">')
    return text[start:text.index("<h2", start + 10)]


def _heads(section: str) -> list[list[str]]:
    """Each table's headers, as text."""
    return [[html.unescape(re.sub("<[^>]+>", "", h)) for h in re.findall(r"<th[^>]*>(.*?)</th>", head, re.S)]
            for head in re.findall(r"<thead>(.*?)</thead>", section, re.S)]


def _tables(section: str) -> list[list[list[str]]]:
    """Each table's rows, each row's cells: data-v where the cell has one, else its text."""
    out = []
    for t in re.findall(r"<tbody>(.*?)</tbody>", section, re.S):
        rows = re.findall(r"<tr>(.*?)</tr>", t, re.S)
        out.append([[v or html.unescape(re.sub("<[^>]+>", "", txt)) for v, txt in
                     re.findall(r'<td(?: class="t")?(?: data-v="([^"]*)")?>(.*?)</td>', r, re.S)] for r in rows])
    return out


def _raw_step_ends_ns() -> dict[int, int]:
    [p] = tracelab.load_many(TORCH)
    gpu = p.events[(p.events["kind"] != "cpu_op") & p.events["step"].notna()]
    end = gpu["start_ns"].astype("int64") + gpu["dur_ns"].astype("int64")
    return end.groupby(gpu["step"].astype("int64")).max().to_dict()


def _raw_busy_ns(step: int) -> int:
    [p] = tracelab.load_many(TORCH)
    gpu = p.events[(p.events["kind"] != "cpu_op") & (p.events["step"] == step)]
    s = np.sort(gpu["start_ns"].to_numpy(np.int64))
    e = (gpu["start_ns"] + gpu["dur_ns"]).to_numpy(np.int64)[np.argsort(gpu["start_ns"].to_numpy(np.int64))]
    busy, hi = 0, -1
    for a, b in zip(s, e):  # the union of the kernels' spans
        if b > hi:
            busy += b - max(a, hi)
            hi = b
    return busy


@pytest.mark.slow
def test_whatif_section_numbers(report):
    section = _section(report.read_text())
    scenarios, steps = _tables(section)
    ends = _raw_step_ends_ns()
    assert [int(r[0]) for r in steps] == sorted(ends)
    for row in steps:
        k = int(row[0])
        if k > min(ends):  # a step's window: from the previous step's last GPU end to its own
            assert float(row[1]) == ends[k] - ends[k - 1]
        parts = [float(v) for v in row[3:3 + len(CATEGORIES)]]
        assert abs(sum(parts) - float(row[2])) <= 1  # the path fills the step (ns, rounding)
    [nhg] = [r for r in scenarios if r[0] == "no-host-gaps"]
    median = sorted(steps, key=lambda r: float(r[1]))[(len(steps) - 1) // 2]
    heads = _heads(section)[0]
    pred, gain = float(nhg[heads.index("median step, predicted (ms)")]), float(nhg[heads.index("median step, gain (ms)")])
    if "step without the profiler (ms)" in heads:  # the user's time leads: the run's own step, less its prediction
        user = [float(nhg[heads.index(h)]) for h in ("step without the profiler (ms)",
                                                      "predicted without the profiler (ms)", "saving without the profiler (ms)")]
        assert heads.index("step without the profiler (ms)") < heads.index("profiled: measured, median (ms)")
        assert abs(user[0] - user[1] - user[2]) < 1
    assert _raw_busy_ns(int(median[0])) <= pred < float(median[1])  # at least the GPU's busy time
    assert abs(gain - (float(median[1]) - pred)) < 1
    assert f"the median step ({median[0]})" in nhg[-1]  # evidence, the last column
    assert "proton: no critical path or what-if: proton records no timeline" in section


@pytest.mark.slow
def test_whatif_section_in_chromium(chromium, report):  # noqa: F811
    got = check_rendered(chromium, report)
    assert 'id="whatif"' in got["dom"]


@pytest.mark.parametrize("replays", [pytest.param(True, marks=pytest.mark.slow), False])  # the replaying run: ~8 s
def test_a_report_prepares_its_runs_whatif_once(replays, tmp_path, monkeypatch):
    """The findings' savings and the section replay one run: its join and unchanged replay made
    once, also where they fail (a graph left with a cycle: both say so, neither makes it again)."""
    from tracelab.reports.whatif import analyse, findings, join
    from tracelab.reports.whatif.cycles import ReplayError

    calls = []

    def counted(graphs, epochs):
        calls.append(sorted(graphs))
        return analyse.prepare(graphs, epochs)

    def left_a_cycle(g):
        raise ReplayError(None, "more than 1000 cycles in the dependency graph")

    monkeypatch.setattr(findings, "prepare", counted)
    monkeypatch.setattr(findings, "_PREPARED", [])
    monkeypatch.setattr(findings, "_LAST", [])
    if not replays:
        monkeypatch.setattr(join, "break_cycles", left_a_cycle)
    out = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", str(DATA / "whatif-step-1gpu-torch"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert calls == [[0]]
    section = _section(out.read_text())
    assert ("no what-if: more than 1000 cycles" in section) != replays
