"""What a user runs in a notebook or a shell prints no warning: loading, every breakdown,
the comparison, the timeline and the HTML page, over each profiler's capture and a CPU-only
trace, with every warning an error (pandas' FutureWarning on groupbys of categorical
columns among them)."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tracelab
from tracelab.cli import app
from tracelab.ingest.inputs import label_inputs
from tracelab.reports.breakdown import breakdown
from tracelab.reports.align import align as compare
from tracelab.reports.html import html
from tracelab.reports.compare import compare_text as text
from tracelab.reports.timeline import intervals as timeline
from helpers import slow_after

DATA = Path(__file__).resolve().parent / "data"
RUNS = [pytest.param("train-2gpu-torch", marks=pytest.mark.slow), "train-2gpu-proton",
        pytest.param("train-2gpu-nsys", marks=pytest.mark.slow), "train-cpu-torch"]


@pytest.mark.slow
@pytest.mark.parametrize("run", RUNS)
def test_the_analyses_warn_nothing(run: str) -> None:
    folder = DATA / run
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = tracelab.events(tracelab.load_many(folder))
        breakdown.summary(df)
        for by in ("kernel", "op_class", "scope"):
            breakdown.breakdown(df, by=by, top=5)
        timeline.rank_timeline(df)
        inputs = label_inputs([folder, folder], [tracelab.load_many(folder)] * 2)
        for by in compare.BY:
            c = compare.comparison(inputs, by)
            text.compare_tables(c, compare.BY[by], 5)
        html.render(inputs, [str(folder)], None, run)


# Every test runs under filterwarnings=error (pyproject), so the other groupings' commands are
# checked by their own tests as well; here they run under -m slow.
@slow_after(1)
@pytest.mark.parametrize("command", [["breakdown"], pytest.param(["breakdown", "--by", "op_class"], marks=pytest.mark.slow),
                                     pytest.param(["breakdown", "--by", "scope"], marks=pytest.mark.slow),
                                     ["compare", "--format", "json"]])
def test_the_commands_warn_nothing(command: list[str]) -> None:
    paths = [str(DATA / "train-2gpu-torch" / f"rank{r}.pt.trace.json.gz") for r in (0, 1)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = CliRunner().invoke(app, [*command, *paths])
    assert result.exit_code == 0, result.output
    assert "Warning" not in result.output
