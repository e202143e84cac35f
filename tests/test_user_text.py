"""User-visible text names only what a user can find: no private references ("reference
004", "the course") in plot legends or --help, and comments say why, not when (no dated
incidents in the package's code)."""
from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from tracelab.reports.html import workload_plots
from tracelab.run.runner import WORKLOADS

ROOT = Path(__file__).resolve().parents[1]
PRIVATE = re.compile(r"reference \d{3}|references? \d{3}|\bthe course\b|course's", re.IGNORECASE)
DATED = re.compile(r"\b202\d-\d\d-\d\d\b|\bseen \d+ (run|time)s? in \d+")


def test_the_overlap_plot_names_its_published_source():
    raw = json.loads((ROOT / "tests" / "data" / "overlap-2gpu-torch" / "run.json").read_text())
    names = [trace.get("name", "") for _, fig in workload_plots.workload_figures(raw) for trace in fig["data"]]
    assert names and not any(PRIVATE.search(n) for n in names)
    assert any("symm-mem-recipes" in n for n in names)


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_workload_help_has_no_private_reference(name):
    module = __import__(WORKLOADS[name].program, fromlist=["parse"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        module.parse(["--help"])
    assert out.getvalue() and not PRIVATE.search(out.getvalue())


def test_no_private_reference_or_dated_incident_in_the_code():
    files = [p for d in ("tracelab", "parsers", "reports", "workloads") for p in (ROOT / d).rglob("*.py")]
    found = [f"{p.relative_to(ROOT)}:{i}" for p in files for i, line in enumerate(p.read_text().splitlines(), 1)
             if PRIVATE.search(line) or DATED.search(line)]
    assert found == []
