"""tracelab gate: A/A pairs on real captures pass; A/B pairs with a real change fail with its
cause (a late rank's extra matrix products, a rank holding 16 MiB more), the figures checked
against walks of the raw Kineto JSON; the verdict's rules on samples made by hand; JUnit XML in
pytest's junitxml shape, Markdown's table, strict JSON; thresholds from options and TOML; bad
input as one line, exit 2."""
from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from tracelab.cli.commands.gate import side_samples
from tracelab.core.options import Options
from tracelab.reports.gate.gate_text import RENDERERS
from tracelab.reports.gate.samples import RunSamples
from tracelab.reports.gate.thresholds import thresholds
from tracelab.reports.gate.verdict import TOO_FEW, WITHIN, Thresholds, gate

from helpers import run_cli, run_cli_output, strict_json, slow_after

DATA = Path(__file__).parent / "data"
EQUAL, LATE = DATA / "ddp-2gpu-equal-torch", DATA / "ddp-2gpu-late-torch"
MEM_EQUAL, MEM_MORE = DATA / "train-2cpu-memory-equal-torch", DATA / "train-2cpu-memory-torch"
STEP = re.compile(r"(?:ProfilerStep#|step )(\d+)")  # the default step ranges


@pytest.fixture(scope="module")
def runs() -> dict[Path, list[RunSamples]]:
    """Each capture's samples, parsed once for the module (the command's own opening)."""
    return {folder: side_samples([str(folder)], Options.from_environment()) for folder in (EQUAL, LATE, MEM_EQUAL, MEM_MORE)}


def _doc(runs, a: Path, b: Path, limits: Thresholds = Thresholds(), fmt: str = "json"):
    """The gate of a against b as the command renders it (JSON: the parsed document)."""
    text = RENDERERS[fmt](gate(runs[a], runs[b], limits))
    return strict_json(text) if fmt == "json" else text


def _metric(doc: dict, name: str) -> dict:
    (m,) = [m for m in doc["metrics"] if m["metric"] == name]
    return m


@lru_cache(maxsize=None)
def _raw_kernels(path: Path) -> tuple[Counter, Counter]:
    """Per step: kernels launched inside ProfilerStep#N (launch call's time on its pid), and the
    ns of those launched inside an `extra_work` range: a plain walk of the Kineto JSON."""
    events = json.loads(gzip.open(path).read())["traceEvents"]
    ranges = {name: [(e["pid"], e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
                     if e.get("cat") == "user_annotation" and re.fullmatch(name, e["name"])]
              for name in (STEP.pattern, "extra_work")}
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    count, extra_ns = Counter(), Counter()
    for e in events:
        call = launches.get(e.get("args", {}).get("correlation")) if e.get("cat") == "kernel" else None
        if call is None:
            continue
        inside = lambda name: [n for pid, a, b, n in ranges[name] if pid == call["pid"] and a <= call["ts"] < b]
        step = inside(STEP.pattern)
        if step:
            s = int(STEP.fullmatch(step[-1]).group(1))
            count[s] += 1
            extra_ns[s] += round(e["dur"] * 1000) if inside("extra_work") else 0
    return count, extra_ns


@slow_after(1)
@pytest.mark.parametrize("folder", [EQUAL, MEM_EQUAL])
def test_the_same_run_on_both_sides_passes_with_no_change(runs, folder):
    doc = _doc(runs, folder, folder)
    assert doc["passed"] and doc["metrics"] and all(m["verdict"] in (WITHIN, TOO_FEW) for m in doc["metrics"])
    assert all(m["relative"] in (0.0, None) for m in doc["metrics"])


def test_a_late_rank_fails_the_gate_named_with_its_extra_work(runs):
    doc = _doc(runs, EQUAL, LATE)
    assert not doc["passed"]
    gemm = _metric(doc, "gpu_time:gemm")
    assert gemm["regression"] and gemm["verdict"] == "slower" and gemm["relative"] > 10
    why = {(c["by"], c["name"]): c for c in gemm["why"]}
    ranks = [c for c in gemm["why"] if c["by"] == "rank"]
    assert ranks[0]["name"] == "1" and ranks[0]["share"] > 0.95  # the late rank is the change
    extra = why[("scope", "extra_work")]
    _, raw_extra = _raw_kernels(LATE / "rank1.pt.trace.json.gz")
    assert extra["baseline"] == 0 and extra["candidate"] == pytest.approx(sum(raw_extra.values()) / 8, rel=1e-6)
    assert extra["share"] > 0.95


@pytest.mark.slow
def test_launches_per_step_are_the_raw_kernels_of_both_ranks(runs):
    doc = _doc(runs, EQUAL, LATE)
    for side, folder in (("baseline", EQUAL), ("candidate", LATE)):
        per_step = Counter()
        for rank in (0, 1):
            per_step.update(_raw_kernels(folder / f"rank{rank}.pt.trace.json.gz")[0])
        assert _metric(doc, "launches")[side] == np.median(list(per_step.values()))


@pytest.mark.slow
def test_a_rank_holding_more_memory_fails_named_with_what_was_live(runs):
    doc = _doc(runs, MEM_EQUAL, MEM_MORE)
    peak = _metric(doc, "peak_allocated")
    raw = [max(e["args"]["Total Allocated"] for e in json.loads(gzip.open(f / "rank1.pt.trace.json.gz").read())
                ["traceEvents"] if e.get("name") == "[memory]") for f in (MEM_EQUAL, MEM_MORE)]
    assert not doc["passed"] and peak["regression"] and peak["verdict"] == "grew"
    assert peak["candidate"] - peak["baseline"] == raw[1] - raw[0] == 16 << 20
    why = {(c["by"], c["name"]): c for c in peak["why"]}
    assert why[("scope", "extra_memory")]["candidate"] == 16 << 20 and why[("rank", "1")]["share"] == 1.0
    assert not _metric(doc, "launches")["regression"]  # one more op per step: beyond the noise, not 5%


def _raw_above_start(path: Path) -> list[int]:
    """Per ProfilerStep#N: the most Total Allocated after any [memory] event inside it, less the
    total before its first one (that event's total less its bytes): a plain walk of the Kineto JSON."""
    events = json.loads(gzip.open(path).read())["traceEvents"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") == "user_annotation" and STEP.fullmatch(e["name"]))
    memory = sorted((e["ts"], e["args"]["Total Allocated"], e["args"]["Bytes"]) for e in events if e.get("name") == "[memory]")
    out = []
    for start, end in steps:
        inside = [(total, size) for ts, total, size in memory if start <= ts <= end]
        before = inside[0][0] - inside[0][1]
        out.append(max([before] + [total for total, _ in inside]) - before)
    return out


@pytest.mark.slow
def test_the_peak_above_the_steps_start_is_what_the_step_itself_allocates(runs):
    """The trace's own allocated total climbs over the steps (frees it does not see count as held);
    the peak above each step's start does not: the 16 MiB held through each step on rank 1, exactly."""
    doc = _doc(runs, MEM_EQUAL, MEM_MORE)
    above = _metric(doc, "peak_above_start")
    raw = {f: [max(x) for x in zip(*(_raw_above_start(f / f"rank{r}.pt.trace.json.gz") for r in (0, 1)))]
           for f in (MEM_EQUAL, MEM_MORE)}
    assert (above["baseline"], above["candidate"]) == (np.median(raw[MEM_EQUAL]), np.median(raw[MEM_MORE]))
    assert above["candidate"] - above["baseline"] == 16 << 20 and above["regression"]
    why = {(c["by"], c["name"]): c for c in above["why"]}
    assert why[("scope", "extra_memory")]["candidate"] == 16 << 20 and why[("rank", "1")]["share"] == 1.0
    assert "before_trace" not in {c["by"] for c in above["why"]}  # held at the step's start, never above it


def test_the_allocators_own_counters_give_the_peaks_and_the_peak_above_each_steps_start():
    """A GPU run's train rows hold torch.cuda's counters per step: the peaks are the highest rank's,
    the peak above the start each rank's peak less its own start, the highest of those."""
    from tracelab.reports.gate.samples import run_samples

    mib = 1 << 20
    rows = {"0": {"step_start_allocated_bytes": [100 * mib] * 3, "step_peak_allocated_bytes": [150 * mib] * 3,
                  "step_peak_reserved_bytes": [200 * mib] * 3},
            "1": {"step_start_allocated_bytes": [10 * mib, 10 * mib, 10 * mib],
                  "step_peak_allocated_bytes": [80 * mib, 90 * mib, 70 * mib], "step_peak_reserved_bytes": [None] * 3}}
    info = {"workload": "train", "results": {r: {"rows": [row]} for r, row in rows.items()}}
    steps = run_samples("gpu", [], info).steps
    assert list(steps["peak_allocated"]) == [150 * mib] * 3
    assert list(steps["peak_reserved"]) == [200 * mib] * 3  # rank 1 recorded none
    assert list(steps["peak_above_start"]) == [70 * mib, 80 * mib, 60 * mib]  # rank 1's: 70, 80, 60 MiB above 10


def test_thresholds_from_options_and_a_config_file(runs, tmp_path):
    doc = _doc(runs, EQUAL, LATE, thresholds(None, ["gpu_time:*=off", "idle:other=1000%"], None))
    assert doc["passed"] and _metric(doc, "gpu_time:gemm")["threshold"] is None
    config = tmp_path / "gate.toml"
    config.write_text('[gate]\nmax-regression = "2%"\n[gate.metrics]\n"gpu_time:*" = "off"\n"idle:*" = "off"\n')
    doc = _doc(runs, EQUAL, LATE, thresholds(None, [], config))
    assert doc["passed"] and _metric(doc, "launches")["threshold"] == 0.02
    doc = _doc(runs, EQUAL, LATE, thresholds("off", ["gpu_time:gemm=50%"], config))
    assert [m["metric"] for m in doc["metrics"] if m["regression"]] == ["gpu_time:gemm"]
    assert _metric(doc, "launches")["threshold"] is None


@pytest.mark.slow
def test_the_command_exits_1_on_a_regression_and_0_with_it_allowed(capsys, tmp_path):
    status, out, _ = run_cli_output(capsys, "gate", str(EQUAL), str(LATE))
    assert status == 1 and "gate: FAIL" in out and "scope extra_work" in out
    config = tmp_path / "gate.toml"
    config.write_text('[gate.metrics]\n"gpu_time:*" = "off"\n"idle:*" = "off"\n')
    status, out, _ = run_cli_output(capsys, "gate", "-b", str(EQUAL), "-c", str(LATE), "--config", str(config))
    assert status == 0 and "gate: pass" in out


@pytest.mark.parametrize("args, said", [
    (["--metric", "step_time=fast"], "'fast' is not a threshold"),
    (["--metric", "step_time"], "is not NAME=THRESHOLD"),
    (["--max-regression", "-5%"], "is not a threshold"),
    (["--format", "xml"], "--format"),
])
def test_bad_options_are_one_line_and_exit_2(capsys, args, said):
    status, err = run_cli(capsys, "gate", str(EQUAL), str(EQUAL), *args)
    assert status == 2 and len(err) == 1 and said in err[0] and "Traceback" not in err[0]


@pytest.mark.parametrize("text", ["[gate\n", "[gate]\nmax_regression = 5\n", "[gate]\nmetrics = 3\n"])
def test_a_broken_config_is_one_line_naming_the_file(capsys, tmp_path, text):
    config = tmp_path / "gate.toml"
    config.write_text(text)
    status, err = run_cli(capsys, "gate", str(EQUAL), str(EQUAL), "--config", str(config))
    assert status == 2 and len(err) == 1 and str(config) in err[0]


@pytest.mark.parametrize("args", [[str(EQUAL)], [str(EQUAL)] * 3, [str(EQUAL), "--baseline", str(EQUAL)],
                                  ["--baseline", str(EQUAL)], [str(EQUAL), "/nonexistent/run"]])
def test_sides_that_cannot_be_told_are_refused(capsys, args):
    status, err = run_cli(capsys, "gate", *args)
    assert status == 2 and len(err) == 1


def test_junit_has_pytests_shape_a_case_per_metric_a_failure_per_regression(runs):
    doc = _doc(runs, EQUAL, LATE)
    root = ET.fromstring(_doc(runs, EQUAL, LATE, fmt="junit").encode())
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert [c.get("name") for c in cases] == [m["metric"] for m in doc["metrics"]]
    assert failed == [m["metric"] for m in doc["metrics"] if m["regression"]] and failed
    assert suite.get("tests") == str(len(cases)) and suite.get("failures") == str(len(failed))
    assert suite.get("errors") == "0" and suite.get("skipped") == "0"
    assert all(set(c.attrib) == {"classname", "name", "time"} for c in cases)
    gemm = next(c for c in cases if c.get("name") == "gpu_time:gemm").find("failure")
    assert "scope extra_work" in gemm.text and gemm.get("message").startswith("gpu_time:gemm slower")


def test_markdown_is_a_table_of_every_metric_and_the_why_of_each_regression(runs):
    lines = _doc(runs, MEM_EQUAL, MEM_MORE, fmt="markdown").splitlines()
    header = lines.index("| metric | baseline | candidate | change | verdict | detectable | max | samples | gate |")
    assert re.fullmatch(r"\|(---\|)+", lines[header + 1])
    rows = [line for line in lines[header + 2:] if line.startswith("| ")]
    assert len(rows) == len(_doc(runs, MEM_EQUAL, MEM_MORE)["metrics"]) and all(r.count(" | ") == 8 for r in rows)
    failed = [m["metric"] for m in _doc(runs, MEM_EQUAL, MEM_MORE)["metrics"] if m["regression"]]
    assert failed == ["peak_allocated", "peak_above_start"]
    assert lines[0] == "### tracelab gate: FAIL (2 regressions)"
    assert "- scope extra_memory: 0 B -> 16.00 MiB per step (+100.0% of the change)" in lines


@pytest.mark.slow
def test_a_folder_of_run_folders_is_its_runs_as_repeats(capsys, tmp_path):
    (tmp_path / "base").mkdir()
    for n in (1, 2):
        (tmp_path / "base" / f"run{n}").symlink_to(EQUAL)
    status, out, _ = run_cli_output(capsys, "gate", str(tmp_path / "base"), str(EQUAL), "--format", "json")
    doc = strict_json(out)
    assert status == 0 and len(doc["baseline"]) == 2 and _metric(doc, "step_time")["n_baseline"] == 16


def test_thresholds_exact_name_beats_patterns_and_the_last_pattern_wins():
    t = Thresholds(0.05, (("gpu_time:*", 0.1), ("gpu_time:gemm", None), ("gpu_time:*", 0.2)))
    assert (t.of("gpu_time:gemm"), t.of("gpu_time:memory"), t.of("step_time")) == (None, 0.2, 0.05)


def _loaded_copy(tmp_path: Path, name: str, loads: dict | None) -> Path:
    """EQUAL's run folder (its files linked) with run.json's load_per_cpu set to `loads` (None: removed)."""
    folder = tmp_path / name
    folder.mkdir()
    for f in EQUAL.iterdir():
        if f.name != "run.json":
            (folder / f.name).symlink_to(f)
    info = json.loads((EQUAL / "run.json").read_text())
    info.pop("load_per_cpu", None)
    if loads is not None:
        info["load_per_cpu"] = loads
    (folder / "run.json").write_text(json.dumps(info))
    return folder


# Each case is a whole `tracelab gate` (~1 s): one said and one unsaid case in the fast run.
@pytest.mark.parametrize("base_loads, cand_loads, said", [
    ({"start": 0.1, "end": 0.2}, {"start": 1.5, "end": 0.9}, (0.2, 1.5)),  # each side's busier moment
    pytest.param({"start": 0.9, "end": 0.3}, {"start": 0.05, "end": 0.1}, (0.9, 0.1), marks=pytest.mark.slow),
    ({"start": 0.2, "end": 0.3}, {"start": 0.4, "end": 0.3}, None),  # a quiet machine both times
    pytest.param({"start": 0.8, "end": 0.9}, {"start": 1.2, "end": 1.1}, None, marks=pytest.mark.slow),  # busy alike
    pytest.param({"start": 0.1}, None, None, marks=pytest.mark.slow),  # one side made without the figure
])
def test_sides_run_at_different_loads_are_said_with_their_loads(capsys, tmp_path, base_loads, cand_loads, said):
    a, b = _loaded_copy(tmp_path, "a", base_loads), _loaded_copy(tmp_path, "b", cand_loads)
    status, out, _ = run_cli_output(capsys, "gate", str(a), str(b), "--format", "json")
    notes = [n for n in strict_json(out)["notes"] if n["code"] == "gate_load_differs"]
    if said is None:
        assert status == 0 and notes == []
    else:
        (note,) = notes
        assert (note["values"]["baseline_load_per_cpu"], note["values"]["candidate_load_per_cpu"]) == said
        assert f"{said[0]:.2f} per CPU during the baseline" in note["text"]


def test_a_step_timed_without_the_profiler_is_not_judged_against_a_traced_one(capsys):
    """A run folder that timed its steps with the profiler off against its own trace alone (which
    has only the traced span): both sides are judged on the traced span, so the same steps pass
    unchanged, not "faster" or "slower" by the profiler's cost; the note says the sources differ."""
    folder = DATA / "train-tiny-cpu-torch"
    trace = folder / "rank0.pt.trace.json.gz"
    status, out, _ = run_cli_output(capsys, "gate", str(folder), str(trace), "--format", "json")
    doc = strict_json(out)
    step = _metric(doc, "step_time")
    spans_ns = [e["dur"] * 1000 for e in json.loads(gzip.open(trace).read())["traceEvents"]
                if e.get("cat") == "user_annotation" and STEP.fullmatch(e.get("name", ""))]
    unprofiled_ns = json.loads((folder / "run.json").read_text())["results"]["0"]["rows"][0]["unprofiled_step_ns"]
    assert status == 0 and doc["passed"] and doc["step_source"] == {"baseline": "traced", "candidate": "traced"}
    assert step["baseline"] == step["candidate"] == pytest.approx(float(np.median(spans_ns)), rel=0.01)
    assert abs(step["baseline"] / unprofiled_ns - 1) > 0.2  # what the baseline's own step would have read
    assert any(n["code"] == "step_time_timed_differently" for n in doc["notes"])
