"""The report's memory section (reports/memory/memory_html.py) opened in headless Chromium: the
timeline plot renders with no console message and no request, each rank's allocated line and
its peak marker (hover: what was live there) are drawn, and the imbalance is stated."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import check_rendered
from typer.testing import CliRunner

from tracelab.cli import app

DATA = Path(__file__).parent / "data"


def _memory_figure(text: str) -> dict:
    """The page's memory timeline (the figures' JSON in its script)."""
    figs = json.loads(re.search(r'<script type="application/json" id="tracelab-figures">(.*?)</script>', text).group(1))
    return next(f for f in figs.values() if f["layout"]["title"]["text"].startswith("memory over time"))


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("memory-report") / "report.html"
    result = CliRunner().invoke(app, ["report", str(DATA / "train-2cpu-memory-torch"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow
def test_memory_section(report):
    text = report.read_text()
    assert '<h2 id="memory">Where did the memory go?</h2>' in text
    assert "rank 1 peaks at 26.77 MiB of memory" in text
    fig = _memory_figure(text)
    peaks = {t["name"]: t for t in fig["data"] if t["name"].endswith(" peak")}
    assert len(peaks) == 2 and sum(t["name"].endswith(" allocated") for t in fig["data"]) == 2
    rank1 = next(t for name, t in peaks.items() if "rank1" in name)
    assert abs(rank1["y"][0] - 26.77) < 0.01 and "extra_memory" in rank1["text"][0]  # what was live at the peak
    assert len(fig["layout"]["shapes"]) == 3  # the three steps shaded


@pytest.mark.slow
def test_memory_section_in_chromium(chromium, report):  # noqa: F811
    check_rendered(chromium, report)
