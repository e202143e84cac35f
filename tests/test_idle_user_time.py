"""idle says whether host-bound steps are host-bound for the user (without the profiler) or only
under it, by the rule the CUDA-graph finding applies (unprofiled.profiler_made_it), where the run
measured its step without the profiler; null where it did not."""
from __future__ import annotations

import json
from statistics import median

import pandas as pd
import pytest

from tracelab.reports.idle.idle_html import user_bound_words
from tracelab.reports.timeline.causes import HOST_CAUSES

from helpers import DATA, run_cli_output, strict_json


def _idle(capsys, *names: str) -> dict:
    status, out, _ = run_cli_output(capsys, "idle", *(str(DATA / n) for n in names), "--format", "json")
    assert status == 0
    return json.loads(out)


def _host_share_without(step: dict, unprofiled_ns: float) -> tuple[float, float]:
    """(host gaps' share of the profiled step, at most their share of the step without the profiler)."""
    host_ns = sum(step[c] for c in HOST_CAUSES)
    return host_ns / step["span_ns"], max(0.0, unprofiled_ns - (step["span_ns"] - host_ns)) / unprofiled_ns


def test_a_step_the_host_paces_without_the_profiler_too_is_host_bound_for_the_user(capsys) -> None:
    """train-1gpu-steps-torch beside the same job under backend none: its step without the profiler
    is the none run's median step (its run.json), and the host's gaps fill most of it too."""
    none = json.loads((DATA / "train-1gpu-steps-none" / "run.json").read_text())
    want_ns = 1e6 * median(none["results"]["0"]["rows"][0]["step_ms"])
    doc = _idle(capsys, "train-1gpu-steps-torch", "train-1gpu-steps-none")
    host = [s for s in doc["steps"] if s["bound"] == "host"]
    assert host and all(abs(s["unprofiled_step_ns"] - want_ns) < 1 for s in doc["steps"])
    for s in host:
        profiled, user = _host_share_without(s, want_ns)
        assert user >= 0.5 * profiled and s["host_bound_without_profiler"] is True
    codes = [n["code"] for n in doc["notes"]]
    assert "host_bound_hint" in codes and "host_bound_profiled" not in codes


def test_a_step_the_device_paces_without_the_profiler_is_host_bound_under_it_only(capsys) -> None:
    """tf32-1gpu-medium-torch timed its steps with the profiler off (its run.json): the host's gaps
    are most of the gap between the two, so the step the user runs is the device's."""
    run = json.loads((DATA / "tf32-1gpu-medium-torch" / "run.json").read_text())
    want_ns = float(run["results"]["0"]["rows"][0]["unprofiled_step_ns"])
    doc = _idle(capsys, "tf32-1gpu-medium-torch")
    host = [s for s in doc["steps"] if s["bound"] == "host"]
    assert host
    for s in host:
        profiled, user = _host_share_without(s, want_ns)
        assert user < 0.5 * profiled and s["host_bound_without_profiler"] is False
        assert s["unprofiled_step_ns"] == want_ns
    [note] = [n for n in doc["notes"] if n["code"] == "host_bound_profiled"]
    assert note["values"]["host_steps"] == note["values"]["steps"] == len(host)
    assert not any(n["code"] == "host_bound_hint" for n in doc["notes"])  # no CUDA-graph advice for it
    steps = pd.DataFrame(doc["steps"])
    assert set(user_bound_words(steps)[steps["bound"] == "host"]) == {"host-bound under the profiler only"}


def test_a_run_without_its_step_measured_says_nothing_of_the_user(capsys) -> None:
    run = json.loads((DATA / "idle-1gpu-small-torch" / "run.json").read_text())
    assert not any(r.get("unprofiled_step_ns") for r in run["results"]["0"]["rows"])
    doc = _idle(capsys, "idle-1gpu-small-torch")
    assert doc["steps"] and all(s["unprofiled_step_ns"] is None and s["host_bound_without_profiler"] is None
                                for s in doc["steps"])
    assert any(n["code"] == "host_bound_hint" for n in doc["notes"])
    steps = pd.DataFrame(doc["steps"])
    assert "host-bound under the profiler only" not in set(user_bound_words(steps))


def test_the_idle_finding_says_host_bound_under_the_profiler_by_the_same_rule() -> None:
    """The idle finding's bound clause follows the CUDA-graph finding's: its replayed saving without
    the profiler is under half its share under it, so its steps are host-bound under the profiler."""
    from tracelab.ingest.session import Session
    from tracelab.reports.findings.findings_more import idle_findings

    [f] = Session.open([str(DATA / "tf32-1gpu-medium-torch")]).findings(sources=[idle_findings])
    v = f.values
    assert v["unprofiled_saving_ns"] / v["unprofiled_step_ns"] < 0.5 * v["saving_share"]
    assert "host-bound under the profiler in " in f.text and "host-bound in " not in f.text
    [g] = Session.open([str(DATA / "decode-1gpu-steps-torch"), str(DATA / "decode-1gpu-steps-none")]).findings(
        sources=[idle_findings])
    w = g.values
    assert w["unprofiled_saving_ns"] / w["unprofiled_step_ns"] >= 0.5 * w["saving_share"]
    assert "host-bound in " in g.text and "under the profiler in" not in g.text


def _steps(capsys, *names: str) -> dict:
    status, out, _ = run_cli_output(capsys, "steps", *(str(DATA / n) for n in names), "--format", "json")
    assert status == 0
    return strict_json(out)


def test_steps_json_says_the_step_without_the_profiler_by_idles_rule(capsys) -> None:
    """`tracelab steps` carries idle's two per-step columns (idle.for_the_user): the run's own step
    timed with the profiler off (its run.json) and, per host-bound step, whether the host paces it
    without the profiler too, by the rule worked out here on the row's own causes and span."""
    run = json.loads((DATA / "tf32-1gpu-medium-torch" / "run.json").read_text())
    want_ns = float(run["results"]["0"]["rows"][0]["unprofiled_step_ns"])
    rows = _steps(capsys, "tf32-1gpu-medium-torch")["steps"]
    assert rows and all(r["unprofiled_step_ns"] == want_ns for r in rows)
    for r in rows:
        profiled, user = _host_share_without(r, want_ns)
        assert r["bound"] == "host" and user < 0.5 * profiled and r["host_bound_without_profiler"] is False


@pytest.mark.slow  # about 2 s of CPU: the columns' lines are the test's above
def test_steps_json_says_the_same_jobs_step_under_backend_none_as_idle_does(capsys) -> None:
    """Beside the same job under backend none: its median step, and the verdict idle's JSON gives."""
    none = json.loads((DATA / "train-1gpu-steps-none" / "run.json").read_text())
    none_ns = 1e6 * median(none["results"]["0"]["rows"][0]["step_ms"])
    rows = _steps(capsys, "train-1gpu-steps-torch", "train-1gpu-steps-none")["steps"]
    idle = {(s["step"], s["rank"]): s for s in _idle(capsys, "train-1gpu-steps-torch", "train-1gpu-steps-none")["steps"]}
    assert rows and all(abs(r["unprofiled_step_ns"] - none_ns) < 1 for r in rows)
    assert [r["host_bound_without_profiler"] for r in rows] == [idle[r["step"], r["rank"]]["host_bound_without_profiler"]
                                                                for r in rows]
    assert any(r["host_bound_without_profiler"] is True for r in rows)


@pytest.mark.slow  # about 1.5 s of CPU
def test_steps_json_holds_nulls_where_the_run_did_not_time_its_step(capsys) -> None:
    """idle-1gpu-small-torch timed no step without the profiler: both columns null on every row
    (strict JSON: no NaN), and the table adds no line about it."""
    run = json.loads((DATA / "idle-1gpu-small-torch" / "run.json").read_text())
    assert not any(r.get("unprofiled_step_ns") for r in run["results"]["0"]["rows"])
    rows = _steps(capsys, "idle-1gpu-small-torch")["steps"]
    assert rows and all(r["unprofiled_step_ns"] is None and r["host_bound_without_profiler"] is None for r in rows)
    status, out, _ = run_cli_output(capsys, "steps", str(DATA / "idle-1gpu-small-torch"))
    assert status == 0 and "without the profiler (measured)" not in out


@pytest.mark.parametrize("verdicts, said", [
    ([False, False, None], "140.437 ms; 2 of the 2 host-bound step rows host-bound under the profiler only"),
    ([True, False, None], "140.437 ms; 1 of the 2 host-bound step rows host-bound under the profiler only"),
    ([None, None, None], "140.437 ms"),  # no host-bound row: the step alone
])
def test_the_steps_table_line_counts_the_rows_the_profiler_made_host_bound(verdicts, said) -> None:
    from tracelab.reports.steps.steps_text import unprofiled_line

    steps = pd.DataFrame({"unprofiled_step_ns": [140_436_768.0] * 3, "host_bound_without_profiler": verdicts})
    line = unprofiled_line(steps)
    assert line.startswith(f"step without the profiler (measured): {said}")
    assert line.endswith("(measured): 140.437 ms") == (said == "140.437 ms")
    assert unprofiled_line(steps.assign(unprofiled_step_ns=None)) == ""


def _graphs_figures(whole_trace: bool) -> dict:
    return {"whole_trace": whole_trace, "host_bound": 3, "steps": 4, "short_kernels": 900, "launched": 1000,
            "kernels_per_step": 250.0}


@pytest.mark.parametrize("under, whole, said", [
    (False, False, "rank 0's steps are host-bound (3 of 4) and 900 of the 1,000 kernels"),
    (True, False, "rank 0's steps are host-bound under the profiler (3 of 4) and 900 of the 1,000 kernels"),
    (False, True, "rank 0 is host-bound over the whole trace, which has no steps, and 900 of the 1,000"),
    (True, True, "rank 0 is host-bound under the profiler over the whole trace, which has no steps, and 900"),
])
def test_the_cuda_graph_finding_writes_its_bound_from_the_verdict(under, whole, said) -> None:
    from tracelab.reports.fixes.host import GRAPHS_FIX, graphs_sentence

    text = graphs_sentence("rank 0", _graphs_figures(whole), "; tail", under)
    assert text.startswith(said) and text.endswith(f"{GRAPHS_FIX}; tail")


@pytest.mark.parametrize("under, step, said", [
    (False, [0, 1, 2], "(by its critical path: host-bound in 2 of 3, gpu-bound in 1 of 3 steps)"),
    (True, [0, 1, 2], "(by its critical path: host-bound under the profiler in 2 of 3, gpu-bound in 1 of 3 steps)"),
    (True, [None], "(by its critical path: host-bound under the profiler over the whole trace, which has no steps)"),
])
def test_the_idle_finding_writes_its_bounds_from_the_verdict(under, step, said) -> None:
    from tracelab.reports.findings.findings_more import idle_sentence

    bounds = ["host", "host", "gpu"][:len(step)]
    steps = pd.DataFrame({"step": pd.array(step, dtype="Int64"), "bound": bounds, "bound_from": "path"})
    assert idle_sentence("rank 0's GPU idles ", steps, under) == f"rank 0's GPU idles {said}"


def test_the_verdict_reaches_the_writer_only_from_the_host_gaps_replay() -> None:
    """with_saving asks a finding's writer for its words under the verdict where the no-host-gaps
    replay says the profiler made the step host-bound (its saving's share without the profiler under
    half its share under it); otherwise, or for another scenario, the text stays as written."""
    from types import SimpleNamespace

    from tracelab.reports.findings.finding import Finding
    from tracelab.reports.whatif.findings import with_saving

    f = Finding("written for False", 1, "idle", {}, "idle", {"run": ""},
                text_for=lambda under: "written for True" if under else "written for False")
    user = {"unprofiled_step_ns": 8e6, "unprofiled_source": "measured"}
    for name, predicted_ns, said in (("no-host-gaps", 7.9e6, "written for True"),  # 1% of 8 ms against 40%
                                     ("no-host-gaps", 5e6, "written for False"),  # 38% against 40%
                                     ("no-host-stalls", 7.9e6, "written for False")):
        row = SimpleNamespace(name=name, args="", saving_ns=4e6, step_ns=10e6, steps=4, saving_frac=0.4,
                              predicted_unprofiled_ns=predicted_ns)
        got = with_saving(f, row, unprofiled=user)
        assert got.text.startswith(f"{said}; what if ") and got.text_for is None
