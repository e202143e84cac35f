"""docs/extending.md is executable: its example topic, taken from the doc's own code blocks, is
written as a topic folder, registered as its TOPICS line says, and run through the CLI."""
from __future__ import annotations

import gzip
import json
import re
import sys

import pytest

from helpers import DATA, ROOT, run_cli_output

import tracelab.reports as reports
from tracelab.reports import ranks as report_session, topics
from tracelab.ingest.session import TRACES, Session

DOC = ROOT / "docs" / "extending.md"
RUNS = [str(DATA / "decode-2gpu-torch"), str(DATA / "train-2gpu-torch"), str(DATA / "decode-1gpu-steps-none")]


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """The doc's topic as reports/tiny/ (in a folder of its own) and its TOPICS line registered."""
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "__init__.py").write_text('"""Tiny kernels: the example topic of docs/extending.md."""\n')
    for name in ("tiny", "command"):
        (module_text,) = [b for b in _blocks() if b.startswith(f"# reports/tiny/{name}.py\n")]
        (tmp_path / "tiny" / f"{name}.py").write_text(module_text)
    (line,) = [b.strip() for b in _blocks() if b.startswith('Topic("tiny"')]
    monkeypatch.setattr(reports, "__path__", [*reports.__path__, str(tmp_path)])
    topic = eval(line.rstrip(","), {"Topic": topics.Topic})  # the doc's line, as written
    monkeypatch.setattr(topics, "TOPICS", (*topics.TOPICS, topic))
    digests = topic.digest_fns()
    for name, fn in digests.items():  # what reports/ranks.py derives from TOPICS when imported
        monkeypatch.setitem(report_session.RANK_DIGESTS, name, fn)
    monkeypatch.setattr(report_session, "FINDINGS", (*report_session.FINDINGS, *digests))
    yield topic.command_spec()
    for name in [m for m in sys.modules if m.startswith("tracelab.reports.tiny")]:
        del sys.modules[name]


def _kernels_us(path) -> list[float]:
    """Each kernel's duration in us, straight from the Kineto JSON."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return [e["dur"] for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]


def test_the_docs_topic_on_two_runs_and_a_run_under_none(tiny, capsys):
    status, out, err = run_cli_output(capsys, "tiny", *RUNS, "--format", "json")
    assert status == 0, err
    grouped = [r.name for r in Session.open(RUNS).runs if r.kind == TRACES]
    got = json.loads(out)["runs"]
    assert [r["input"] for r in got] == grouped == RUNS[:2]
    for run in got:
        for row in run["ranks"]:
            durs_us = _kernels_us(f"{run['input']}/rank{row['rank']}.pt.trace.json.gz")
            assert row["kernels"] == len(durs_us) > 0
            assert row["tiny"] == sum(d * 1000 < 10_000 for d in durs_us)
            tiny_ns = sum(d * 1000 for d in durs_us if d * 1000 < 10_000)
            assert row["tiny_ns"] == pytest.approx(tiny_ns, abs=len(durs_us))  # each rounded to 1 ns


@pytest.mark.slow  # every topic's findings digests of four ranks: ~3 s on 2 cores
def test_its_table_ends_on_its_findings_or_why_there_are_none(tiny, capsys):
    status, out, err = run_cli_output(capsys, "tiny", *RUNS, "--under-us", "20")
    assert status == 0, err
    tail = out.rstrip("\n").split("\n")
    start = max(n for n, line in enumerate(tail) if line.startswith("findings"))
    assert tail[start] == "findings:" or re.fullmatch(r"findings: none \(.+\)", tail[start])
    assert all(re.match(r"  \d+\. .+ kernels ran under 10 us", line) for line in tail[start + 1:])
    assert "Traceback" not in err


@pytest.mark.parametrize(("args", "said"), [
    (("--under-us", "0", *RUNS), "tracelab: error: --under-us: must be 1 or more, not 0"),
    ((RUNS[2],), "no trace files"),  # a run under none alone: nothing it reads
])
def test_its_broken_inputs_are_one_line(tiny, capsys, args, said):
    status, out, err = run_cli_output(capsys, "tiny", *args)
    assert status == 2 and out == ""
    assert len(err.splitlines()) == 1 and said in err


def test_the_topic_is_listed_without_a_line_in_the_cli(tiny, capsys):
    status, out, _ = run_cli_output(capsys, "--help")
    listed = re.findall(r"│ (\w+) ", out)
    topics_first = ["breakdown", "roofline", "compare", "steps", "idle", "whatif", "memory", "tiny"]
    assert status == 0 and listed[:8] == topics_first
