"""benchmarks/changes.py's table on a tiny synthetic folder: the steps it reads from run.json
(the slowest rank's median), the prediction it takes from whatif's JSON (the unprofiled one where
given, else the profiled one, said), its errors and their median and worst, and the rows that say
why they have none (a failed run, no scenario, whatif refusing, no step claimed)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import benchmark

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def table():
    return benchmark("change_table")


def _run(folder: Path, unprofiled_ns: list[float | None], profiled_ns: list[float | None] | None = None) -> None:
    folder.mkdir(parents=True)
    profiled_ns = profiled_ns or [None] * len(unprofiled_ns)
    results = {str(r): {"rows": [{"unprofiled_step_ns": u, "profiled_step_ns": p}]}
               for r, (u, p) in enumerate(zip(unprofiled_ns, profiled_ns))}
    (folder / "run.json").write_text(json.dumps({"results": results}))


def _entry(name: str, scenario: str | None, factor: float | None = None, after: str = "ok", repeats: int = 1) -> dict:
    runs = [{"side": "before", "run_dir": "before", "status": "ok"},
            {"side": "after", "run_dir": "after", "status": after, "error": "rank 0 ran out of memory"}]
    for k in range(2, repeats + 1):
        runs += [{"side": side, "run_dir": f"{side}-{k}", "status": "ok"} for side in ("before", "after")]
    return {"name": name, "what": name, "ranks": 1, "scenario": scenario, "note": "",
            "factor": None if factor is None else {"factor": factor}, "runs": runs}


# whatif's answer per scenario: (step_ns, predicted_ns, predicted_unprofiled_ns or absent)
WHATIF = {"remove:extra_work": (30e6, 20e6, 16e6), "no-host-gaps": (40e6, 10e6, None),
          "scale:sdpa=0.5": (50e6, None, None)}


def _whatif(before: Path, scenario: str) -> dict:
    if scenario not in WHATIF:
        return {"error": f"tracelab whatif: error: --scenario: {scenario!r} is not one of ..."}
    step, predicted, unprofiled = WHATIF[scenario]
    row = {"name": scenario.split(":")[0], "args": "", "steps": 0 if predicted is None else 5, "step_ns": step,
           "predicted_ns": predicted, **({} if unprofiled is None else {"predicted_unprofiled_ns": unprofiled})}
    together = {**row, "name": "together", "predicted_ns": 1.0}  # never the row read
    return {"scenarios": [together, row], "steps": [], "notes": []}


@pytest.fixture
def folder(tmp_path):
    changes = [_entry("scope", "remove:extra_work", repeats=3), _entry("graph", "no-host-gaps"),
               _entry("attention", "scale:sdpa={factor}", factor=0.5), _entry("compile", None),
               _entry("stall", "no-host-stalls"), _entry("oom", "balance", after="failed"),
               {"name": "tf32", "skipped": "a GPU-only change"}]
    changes[3]["note"] = "no scenario models kernel fusion"
    steps = {"scope": ([18e6, 20e6], [25e6, 30e6], [15e6, 14e6]), "graph": ([30e6], [40e6], [9e6]),
             "attention": ([40e6], [50e6], [20e6]), "compile": ([10e6], [12e6], [8e6]),
             "stall": ([40e6], [45e6], [20e6]), "oom": ([10e6], [12e6], None)}
    for name, (unprofiled, profiled, after) in steps.items():
        _run(tmp_path / name / "before", unprofiled, profiled)
        if after is not None:
            _run(tmp_path / name / "after", after)
    for k, (before_ns, after_ns) in ((2, (22e6, 16e6)), (3, (19e6, 18e6))):  # scope's repeats, unprofiled
        _run(tmp_path / "scope" / f"before-{k}", [before_ns])
        _run(tmp_path / "scope" / f"after-{k}", [after_ns])
    (tmp_path / "changes.json").write_text(json.dumps({"changes": changes}))
    return tmp_path


def test_rows_read_the_slowest_rank_and_the_unprofiled_prediction(table, folder):
    rows = {r["change"]: r for r in table.predict_rows(json.loads((folder / "changes.json").read_text()), folder, _whatif)}
    scope = rows["scope"]
    # each side's median over its runs (the slowest rank's of each); profiled: the trace's run
    assert (scope["before_runs_ms"], scope["after_runs_ms"]) == ([20.0, 22.0, 19.0], [15.0, 16.0, 18.0])
    assert (scope["before_ms"], scope["before_profiled_ms"], scope["after_ms"]) == (20.0, 30.0, 16.0)
    assert scope["predicted_ms"] == 16.0 and scope["predicted_from"] == "predicted_unprofiled_ns"
    assert scope["error_pct"] == 0.0
    assert scope["ratio_ms"] == pytest.approx(20 * 20 / 30)  # the replay's fraction on the unprofiled step
    graph = rows["graph"]
    assert graph["predicted_ms"] == 10.0 and graph["predicted_from"] == "predicted_ns (profiled)"
    assert graph["error_pct"] == pytest.approx(100 * (10 - 9) / 9)


def test_rows_without_a_prediction_say_why(table, folder):
    rows = {r["change"]: r for r in table.predict_rows(json.loads((folder / "changes.json").read_text()), folder, _whatif)}
    assert rows["attention"]["scenario"] == "scale:sdpa=0.5"  # the factor filled in
    assert "claims no step" in rows["attention"]["why"] and rows["attention"]["error_pct"] is None
    assert rows["compile"]["why"] == "no scenario models kernel fusion" and rows["compile"]["after_ms"] == 8.0
    assert "is not one of" in rows["stall"]["why"]  # whatif refused the scenario: its line, no number
    assert rows["oom"]["why"] == "after: rank 0 ran out of memory" and "before_ms" not in rows["oom"]
    assert rows["tf32"]["why"] == "skipped: a GPU-only change"


def test_summary_is_the_median_and_worst_absolute_error(table, folder):
    rows = table.predict_rows(json.loads((folder / "changes.json").read_text()), folder, _whatif)
    errors = np.abs([0.0, 100 * (10 - 9) / 9])
    got = table.summary(rows)["error_pct"]
    assert got == {"predicted": 2, "median_abs": pytest.approx(np.median(errors)), "worst_abs": pytest.approx(errors.max())}
    assert table.summary([])["error_pct"] == {"predicted": 0, "median_abs": None, "worst_abs": None}


def test_table_keeps_a_regex_in_one_cell(table, folder):
    rows = [{"change": "bf16", "scenario": "scale:gemm|aten::mm=0.5", "before_ms": 10.0, "predicted_ms": 6.0,
             "after_ms": 5.0, "error_pct": 20.0}]
    text = table.render_table(rows, table.summary(rows))
    line = next(ln for ln in text.splitlines() if ln.startswith("| bf16"))
    assert line.count(" | ") == 7 and r"gemm\|aten::mm" in line


@pytest.fixture(scope="module")
def harness():
    spec = importlib.util.spec_from_file_location("changes_harness", ROOT / "benchmarks" / "changes.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


@pytest.mark.parametrize("device, gpus, skipped", [
    ("cpu", 0, {"graph": "a GPU-only change", "tf32": "a GPU-only change"}),
    ("gpu", 1, {"stall-ddp": "needs 2 GPUs, 1 visible", "balance": "needs 2 GPUs, 1 visible",
                "ddp-overlap": "needs 2 GPUs, 1 visible"}),
    ("gpu", 2, {})])
def test_changes_chosen_for_the_machine(harness, device, gpus, skipped):
    picked, left = harness.chosen(None, device, gpus)
    assert {s["name"]: s["skipped"] for s in left} == skipped
    assert {c.name for c in picked} == {c.name for c in harness.CHANGES} - set(skipped)
    with pytest.raises(SystemExit, match="unknown change"):
        harness.chosen("graph,nope", device, gpus)


def test_each_change_runs_the_same_base_with_its_own_options(harness):
    scope = next(c for c in harness.CHANGES if c.name == "scope")
    before, after = (harness._command(scope, side, "cpu", backend) for side, backend in (("before", "torch"),
                                                                                       ("after", "none")))
    assert before[:7] == ["tracelab", "run", "train", "--ranks", "1", "--backend", "torch"]
    assert after[:7] == ["tracelab", "run", "train", "--ranks", "1", "--backend", "none"]
    assert before[8:] == [*harness.BASE["cpu"], "--late", "rank0", "--late-work", harness.LATE_WORK["cpu"]]
    assert after[8:] == list(harness.BASE["cpu"])


def test_runs_alternate_after_the_trace(harness):
    assert harness.runs_of(1) == [("before", "before", "torch"), ("after", "after", "none")]
    assert harness.runs_of(3)[2:] == [("before", "before-2", "none"), ("after", "after-2", "none"),
                                      ("before", "before-3", "none"), ("after", "after-3", "none")]
