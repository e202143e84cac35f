"""The gate's outputs read by real consumers: its JUnit XML has the elements and attributes
pytest's own --junitxml writes for a passing and a failing test (pytest run here as the
reference), and xml.etree reads every failure's cause; its Markdown rendered by markdown-it-py
(GitHub's table syntax) is one table row per metric and a list of causes per regression; its
HTML page, opened in headless Chromium, shows the verdict, a failing row per regression and
asks the network for nothing."""
from __future__ import annotations

import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from markdown_it import MarkdownIt

from tracelab.cli.commands.gate import side_samples
from tracelab.core.options import Options
from tracelab.reports.gate.gate_text import RENDERERS
from tracelab.reports.gate.verdict import Gate, gate

from helpers import ARTIFACTS, open_page

DATA = Path(__file__).parent / "data"
MEM_EQUAL, MEM_MORE = DATA / "train-2cpu-memory-equal-torch", DATA / "train-2cpu-memory-torch"


@lru_cache(maxsize=None)
def _gate(a: Path = MEM_EQUAL, b: Path = MEM_MORE) -> Gate:
    return gate(*(side_samples([str(p)], Options.from_environment()) for p in (a, b)))


@pytest.fixture(scope="module")
def pytest_junit(tmp_path_factory) -> ET.Element:
    """What pytest itself writes with --junitxml for one passing test that prints and one failing test."""
    folder = tmp_path_factory.mktemp("reference")
    (folder / "test_ref.py").write_text("def test_ok():\n    print('said')\n\ndef test_bad():\n    assert 1 == 2, 'why'\n")
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-o",
                    "addopts=", "-o", "junit_logging=system-out", f"--junitxml={folder / 'out.xml'}",
                    str(folder / "test_ref.py")],
                   capture_output=True, cwd=folder, check=False)
    return ET.parse(folder / "out.xml").getroot()


def _shape(root: ET.Element) -> dict[str, set[str]]:
    """Each element's tag -> the attributes it carries anywhere in the document."""
    out: dict[str, set[str]] = {}
    for e in root.iter():
        out.setdefault(e.tag, set()).update(e.attrib)
    return out


@pytest.mark.slow
def test_junit_carries_only_what_pytests_own_junit_xml_carries(pytest_junit):
    ours = ET.fromstring(RENDERERS["junit"](_gate()).encode())
    reference = _shape(pytest_junit)
    assert ours.tag == pytest_junit.tag == "testsuites"
    for tag, attributes in _shape(ours).items():
        assert tag in reference and attributes <= reference[tag] | {"type"}, (tag, attributes, reference.get(tag))
    for required in ("name", "tests", "failures", "errors", "skipped", "time"):
        assert required in ours.find("testsuite").attrib


def test_junit_failures_are_the_regressions_with_their_causes():
    g = _gate()
    suite = ET.fromstring(RENDERERS["junit"](g).encode()).find("testsuite")
    failures = {c.get("name"): c.find("failure") for c in suite.iter("testcase") if c.find("failure") is not None}
    assert list(failures) == [m.metric for m in g.regressions] == ["peak_allocated", "peak_above_start"]
    assert all("scope extra_memory: 0 B -> 16.00 MiB per step" in f.text for f in failures.values())


def test_markdown_renders_as_a_table_of_every_metric_and_the_causes_as_a_list():
    g = _gate()
    page = MarkdownIt("commonmark").enable("table").render(RENDERERS["markdown"](g))
    body = ET.fromstring(f"<div>{page}</div>")
    (table,) = body.iter("table")
    rows = list(table.find("tbody"))
    assert [r[0].text for r in rows] == [m.metric for m in g.metrics]
    assert all(len(r) == 9 for r in rows)  # an escaped | in a name splits no cell
    assert body.find("h3").text == "tracelab gate: FAIL (2 regressions)"
    causes = [li.text for li in body.iter("li")]
    assert "scope extra_memory: 0 B -> 16.00 MiB per step (+100.0% of the change)" in causes


@pytest.mark.slow
def test_the_html_page_in_headless_chromium(chromium, tmp_path):
    g = _gate()
    page = tmp_path / "gate.html"
    page.write_text(RENDERERS["html"](g))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    got = open_page(chromium, page)
    assert got["rc"] == 0 and got["console"] == [] and got["requests"] == []
    dom = ET.fromstring(got["dom"].split("<body>", 1)[1].rsplit("</body>", 1)[0].join(["<body>", "</body>"]))
    rows = list(dom.iter("tr"))[1:]
    assert [r.get("class") for r in rows] == [("fail" if m.regression else "warn" if m.worse else "ok")
                                              for m in g.metrics]
    assert dom.find(".//h1").text == f"tracelab gate: FAIL ({len(g.regressions)} regressions)" and g.regressions
    shot = open_page(chromium, page, screenshot=ARTIFACTS / "gate.png")
    assert shot["rc"] == 0 and (ARTIFACTS / "gate.png").stat().st_size > 0
