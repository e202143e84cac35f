"""The gate's between-run noise from a baseline store's history (reports/gate/noise.py,
ingest/baselines.py): the kept versions' spread recomputed from their runs' step medians with
numpy and scipy; a store with history widens a noisy job's noise (a false alarm becomes a
pass) while a real 2x change still fails; the store keeps the last K versions; an unreadable
kept version is left out with a note, a broken HISTORY is one line, exit 2; and a trace's peak
allocated that climbs over its steps is judged unreliable, never failed on."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import fsspec
import numpy as np
import pandas as pd
import pytest

from tracelab.reports.gate.noise import shift
from tracelab.reports.gate.samples import RunSamples, climbed_bytes
from tracelab.reports.gate.verdict import UNRELIABLE, Thresholds, gate

from helpers import LazyModule, run_cli_output, strict_json

stats = LazyModule("scipy.stats")  # imported by the first test that uses it (helpers.LazyModule says why)

DATA = Path(__file__).parent / "data"
NONE_RUN = DATA / "train-1gpu-steps-none"  # a run folder under none: its run.json alone, quick to gate
RNG = np.random.default_rng(4141)


def _steps(level: float, n: int = 12, sd: float = 0.02) -> np.ndarray:
    return level * np.exp(RNG.normal(0, sd, n))


def _run(name: str, steps: dict[str, np.ndarray], units: dict[str, str], climbs: dict | None = None) -> RunSamples:
    return RunSamples(name, pd.DataFrame(steps), {}, pd.DataFrame(columns=["metric", "by", "name", "value"]), units,
                      climbs=climbs or {})


def _side(level: float, tag: str) -> list[RunSamples]:
    return [_run(tag, {"step_time": _steps(level)}, {"step_time": "ns"})]


# ---- the noise from history, recomputed ----------------------------------------------------------------

def test_the_kept_versions_spread_is_students_t_on_their_step_medians():
    versions = [[_steps(100 * f)] for f in (1.0, 1.3, 0.8, 1.15)]  # earlier versions, one run each
    a, b = [_steps(100)], [_steps(140)]
    s = shift(a, b, run_noise=0.1, level=0.95, history=versions)
    levels = [np.median(np.log(v[0])) for v in versions] + [np.median(np.log(a[0]))]  # the baseline the latest
    var = np.var(levels, ddof=1)
    d = np.median(np.log(b[0])) - np.median(np.log(a[0]))
    t = stats.t(len(levels) - 1)
    assert s.history == pytest.approx(math.expm1(math.sqrt(var)))
    assert s.source == "history" and s.history > s.floor
    assert s.p_value == pytest.approx(2 * t.sf(abs(d) / math.sqrt(2 * var)))
    assert s.detectable == pytest.approx(math.expm1(t.ppf(0.975) * math.sqrt(2 * var)))


def test_versions_that_agree_within_the_floor_leave_the_floors_test_as_it_was():
    versions = [[_steps(100 * f)] for f in (1.0, 1.03, 0.98, 1.01)]
    a, b = [_steps(100)], [_steps(125)]
    with_history, alone = shift(a, b, 0.1, 0.95, versions), shift(a, b, 0.1, 0.95)
    assert with_history.history < with_history.floor and with_history.source == "floor"
    assert (with_history.p_value, with_history.detectable) == (alone.p_value, alone.detectable)


def test_a_short_history_measures_nothing_and_the_note_says_how_to_measure():
    two = gate(_side(100, "a"), _side(100, "b"), history=[_side(120, "h")])
    (m,) = two.metrics
    assert m.run_history is None and m.noise_source == f"floor {m.run_floor:.0%} (steps + 10%)"
    (note,) = [n for n in two.notes if n.code == "gate_noise_floor"]
    assert "unmeasured" in note.text and "--repeat 3" in note.text and "kept 2 baselines" in note.text
    alone = gate(_side(100, "a"), _side(100, "b"))
    assert "--accept keeps the last 5" in next(n.text for n in alone.notes if n.code == "gate_noise_floor")


def test_history_turns_a_noisy_jobs_false_alarm_into_a_pass_and_a_real_2x_change_still_fails():
    noisy = [_side(100 * f, f"h{i}") for i, f in enumerate((1.6, 0.7, 1.3, 0.9))]  # a job whose runs move 1.6x
    quiet = [_side(100 * f, f"h{i}") for i, f in enumerate((1.02, 0.97, 1.01, 0.99))]
    base, same_job, doubled = _side(100, "a"), _side(165, "b"), _side(200, "c")
    assert not gate(base, same_job).passed  # the floor alone: +65% is beyond one run's 10%
    widened = gate(base, same_job, history=noisy)
    (m,) = widened.metrics
    assert widened.passed and m.noise_source == "5 kept baselines" and m.run_history > 0.2
    assert any(n.code == "gate_noise_history" and "5 baselines the store kept" in n.text for n in widened.notes)
    (real,) = gate(base, doubled, history=quiet).metrics
    assert real.regression and real.verdict == "slower" and real.noise_source.startswith("floor")  # quiet: the floor bounds it


# ---- the store keeps K versions; broken history --------------------------------------------------------

def _version(tmp_path: Path, tag: str, steps_ns: list[float]) -> Path:
    run = tmp_path / tag
    shutil.copytree(NONE_RUN, run)
    doc = json.loads((run / "run.json").read_text())
    doc["results"]["0"]["rows"][0]["unprofiled_step_ns_samples"] = steps_ns
    (run / "run.json").write_text(json.dumps(doc))
    return run


def _accept(capsys, store: str, run: Path, *extra: str) -> str:
    status, out, err = run_cli_output(capsys, "gate", "--accept", "main", str(run), "--baseline-store", store, *extra)
    assert status == 0, err
    return out.split("(version ")[1].split(")")[0]


def _step(capsys, store: str, candidate: Path) -> tuple[int, dict, dict]:
    status, out, err = run_cli_output(capsys, "gate", "baseline:main", str(candidate), "--baseline-store", store,
                                      "--format", "json")
    assert status in (0, 1), err
    doc = strict_json(out)
    return status, next(m for m in doc["metrics"] if m["metric"] == "step_time"), doc


LEVELS_MS = (30.0, 48.0, 21.0, 39.0, 30.0)  # the job's accepted runs' step medians, oldest first


def test_the_store_keeps_the_last_k_and_the_gate_measures_their_spread(capsys, tmp_path):
    store = str(tmp_path / "store")
    runs = [_version(tmp_path, f"v{i}", [x * 1e6 * f for f in (1.0, 1.01, 0.99, 1.0)]) for i, x in enumerate(LEVELS_MS)]
    versions = [_accept(capsys, store, run, "--keep", "4") for run in runs]
    fs, root = fsspec.core.url_to_fs(store)
    assert fs.cat_file(f"{root}/main/HISTORY").decode().split() == versions[1:]
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{root}/main") if fs.isdir(p)) == sorted(versions[1:])
    status, step, doc = _step(capsys, store, _version(tmp_path, "pr", [50e6, 50.5e6, 49.5e6, 50e6]))
    levels = np.log(np.array(LEVELS_MS[1:]) * 1e6)  # each version's median step: its run's
    assert step["run_history"] == pytest.approx(math.expm1(np.std(levels, ddof=1)))
    assert status == 0 and step["noise_source"] == "4 kept baselines" and step["verdict"] == "within noise"
    _accept(capsys, str(tmp_path / "fresh"), runs[-1])  # one version: no history
    _, alone, _ = _step(capsys, str(tmp_path / "fresh"), runs[-1])
    assert alone["run_history"] is None and alone["noise_source"] == f"floor {alone['run_floor']:.0%} (steps + 10%)"


def test_an_unreadable_kept_version_is_left_out_with_a_note(capsys, tmp_path):
    store = str(tmp_path / "store")
    runs = [_version(tmp_path, f"v{i}", [x * 1e6] * 4) for i, x in enumerate(LEVELS_MS)]
    versions = [_accept(capsys, store, run) for run in runs]
    shutil.rmtree(tmp_path / "store" / "main" / versions[1])  # gone from the store
    (tmp_path / "store" / "main" / versions[2] / "v2" / "run.json").write_text("{not json")  # broken
    status, step, doc = _step(capsys, store, runs[-1])
    (note,) = [n for n in doc["notes"] if n["code"] == "gate_history_unreadable"]
    assert set(note["values"]["versions"]) == {versions[1], versions[2]}
    kept = np.log(np.array([LEVELS_MS[0], LEVELS_MS[3], LEVELS_MS[4]]) * 1e6)
    assert status == 0 and step["noise_source"] == "3 kept baselines"
    assert step["run_history"] == pytest.approx(math.expm1(np.std(kept, ddof=1)))


@pytest.mark.parametrize("history, said", [("../etc\n", "names no version"), ("\n", None)])
def test_a_broken_history_file_is_one_line_or_nothing_to_measure(capsys, tmp_path, history, said):
    store = str(tmp_path / "store")
    run = _version(tmp_path, "v0", [30e6] * 4)
    _accept(capsys, store, run)
    (tmp_path / "store" / "main" / "HISTORY").write_text(history)
    status, out, err = run_cli_output(capsys, "gate", "baseline:main", str(run), "--baseline-store", store)
    if said:
        assert status == 2 and said in err and len(err.strip().splitlines()) == 1
    else:
        assert status == 0 and "unmeasured" in out


def test_keep_must_keep_the_version_stored(capsys, tmp_path):
    status, _, err = run_cli_output(capsys, "gate", "--accept", "main", str(NONE_RUN), "--baseline-store",
                                    str(tmp_path / "s"), "--keep", "0")
    assert status == 2 and "--keep" in err


# ---- a peak allocated that climbs: unreliable ----------------------------------------------------------

def _memory_steps(starts_mib: list[float], above_mib: float = 16.0, rank: int = 0) -> pd.DataFrame:
    mib = 2 ** 20
    return pd.DataFrame({"rank": rank, "step": range(len(starts_mib)),
                         "allocated_start_bytes": [s * mib for s in starts_mib],
                         "peak_allocated_bytes": [(s + above_mib) * mib for s in starts_mib]})


@pytest.mark.parametrize("starts_mib", [[0.5] * 10, [0.5, 0.5, 5.9, 5.9, 11.3, 11.3], [4.0, 3.0, 9.0], [1.0, 1.2]])
def test_a_climb_is_a_start_that_rises_and_never_falls_back(starts_mib):
    start = np.array(starts_mib)
    peak_mib = np.median(start + 16.0)
    rises = (start >= start[0]).all() and start[-1] - start[0] >= 0.05 * peak_mib
    expected = (start[-1] - start[0]) * 2 ** 20 if rises else None
    assert climbed_bytes(_memory_steps(starts_mib)) == expected
    both = pd.concat([_memory_steps(starts_mib), _memory_steps([0.0] * len(starts_mib), rank=1)])
    assert climbed_bytes(both) == expected  # the rank that climbs says it


def test_a_climbing_peak_is_unreliable_not_failed_and_the_step_above_start_still_judges():
    units = {"peak_allocated": "bytes", "peak_above_start": "bytes"}
    base = [_run("a", {"peak_allocated": np.full(8, 20.0e6), "peak_above_start": np.full(8, 16.0e6)}, units,
                 climbs={"peak_allocated": 5.4e6})]
    more = [_run("b", {"peak_allocated": np.full(8, 40.0e6), "peak_above_start": np.full(8, 16.0e6)}, units)]
    hungrier = [_run("c", {"peak_allocated": np.full(8, 40.0e6), "peak_above_start": np.full(8, 32.0e6)}, units)]
    g = gate(base, more, Thresholds())
    peak = next(m for m in g.metrics if m.metric == "peak_allocated")
    assert g.passed and peak.verdict == UNRELIABLE and not peak.worse and peak.relative == pytest.approx(1.0)
    (note,) = [n for n in g.notes if n.code == "gate_peak_unreliable"]
    assert "5.15 MiB" in note.text and "peak_above_start judges" in note.text
    failed = gate(base, hungrier, Thresholds())
    assert [m.metric for m in failed.regressions] == ["peak_above_start"]
