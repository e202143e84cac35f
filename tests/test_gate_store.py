"""The gate's named baselines (tracelab/ingest/baselines.py) in a folder, a file:// and a
memory:// store: an accepted run is what `baseline:NAME` reads (the same verdict as the run
itself, the stored bytes the run's), a newer acceptance wins and the older stays; the store
named by the environment; bad names, stores and runs as one line, exit 2. And repeats: a
folder of run folders is each of them, for the gate and every reader, as `tracelab run
--repeat N` makes them."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import fsspec
import numpy as np
import pytest

from tracelab.core.options import BASELINE_STORE_ENV
from tracelab.ingest.session import Session

from helpers import run_cli, run_cli_output, strict_json

DATA = Path(__file__).parent / "data"
NONE_RUN = DATA / "train-1gpu-steps-none"  # a run folder under none: its run.json alone, quick to gate
EQUAL, LATE = DATA / "ddp-2gpu-equal-torch", DATA / "ddp-2gpu-late-torch"


@pytest.fixture(params=["memory", "file", "folder"])
def store(request, tmp_path) -> str:
    return {"memory": f"memory://gate-{tmp_path.name}", "file": f"file://{tmp_path}/store",
            "folder": str(tmp_path / "store")}[request.param]


def _gate_json(capsys, *args: str) -> tuple[int, dict]:
    status, out, err = run_cli_output(capsys, "gate", *args, "--format", "json")
    assert status in (0, 1), err
    return status, strict_json(out)


def _accept(capsys, store: str, name: str, *runs: Path) -> str:
    status, out, err = run_cli_output(capsys, "gate", "--accept", name, *map(str, runs), "--baseline-store", store)
    assert status == 0 and f"as baseline:{name}" in out, err
    return out.split("(version ")[1].split(")")[0]


def _numbers(doc: dict) -> list[tuple]:
    return [(m["metric"], m["baseline"], m["candidate"], m["verdict"]) for m in doc["metrics"]]


@pytest.mark.slow
def test_an_accepted_run_is_what_the_named_baseline_reads(capsys, store):
    version = _accept(capsys, store, "main", NONE_RUN)
    status, stored = _gate_json(capsys, "baseline:main", str(NONE_RUN), "--baseline-store", store)
    _, direct = _gate_json(capsys, str(NONE_RUN), str(NONE_RUN))
    assert status == 0 and stored["passed"] and _numbers(stored) == _numbers(direct) and stored["metrics"]
    fs, root = fsspec.core.url_to_fs(store)
    assert fs.cat_file(f"{root}/main/CURRENT").decode() == version
    for f in (p for p in NONE_RUN.rglob("*") if p.is_file()):
        assert fs.cat_file(f"{root}/main/{version}/{NONE_RUN.name}/{f.relative_to(NONE_RUN).as_posix()}") \
            == f.read_bytes()


def test_a_newer_acceptance_wins_and_the_older_stays(capsys, store, tmp_path):
    other = tmp_path / "other-run"
    shutil.copytree(NONE_RUN, other)
    first = _accept(capsys, store, "main", NONE_RUN)
    second = _accept(capsys, store, "main", other)
    _, doc = _gate_json(capsys, "baseline:main", str(NONE_RUN), "--baseline-store", store)
    assert first != second and doc["baseline"][0].endswith("other-run")
    fs, root = fsspec.core.url_to_fs(store)
    assert fs.exists(f"{root}/main/{first}/{NONE_RUN.name}/run.json")


def test_a_link_in_a_run_folder_is_not_stored(capsys, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(NONE_RUN, run)
    (tmp_path / "secret.txt").write_text("not the run's")
    (run / "notes.txt").symlink_to(tmp_path / "secret.txt")
    version = _accept(capsys, str(tmp_path / "store"), "main", run)
    stored = tmp_path / "store" / "main" / version / "run"
    assert (stored / "run.json").is_file() and not (stored / "notes.txt").exists()


def test_the_store_named_by_the_environment(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(BASELINE_STORE_ENV, str(tmp_path / "env-store"))
    _accept(capsys, str(tmp_path / "env-store"), "nightly", NONE_RUN)
    status, doc = _gate_json(capsys, str(NONE_RUN), "baseline:nightly")  # on the candidate side too
    assert status == 0 and doc["candidate"][0].endswith(NONE_RUN.name)


@pytest.mark.parametrize("args, said", [
    (["baseline:main", str(NONE_RUN)], "needs a baseline store"),
    (["baseline:dev", str(NONE_RUN), "--baseline-store", "{store}"], "holds no baseline 'dev'"),
    (["baseline:../x", str(NONE_RUN), "--baseline-store", "{store}"], "a baseline's name is"),
    (["--accept", "main", str(EQUAL / "rank0.pt.trace.json.gz"), "--baseline-store", "{store}"], "is no run folder"),
    (["--accept", "main", "--baseline-store", "{store}"], "names no run to store"),
    (["--accept", "a/b", str(NONE_RUN), "--baseline-store", "{store}"], "a baseline's name is"),
])
def test_bad_names_stores_and_runs_are_one_line_and_exit_2(capsys, tmp_path, monkeypatch, args, said):
    monkeypatch.delenv(BASELINE_STORE_ENV, raising=False)
    (tmp_path / "store").mkdir()
    status, err = run_cli(capsys, "gate", *(a.replace("{store}", str(tmp_path / "store")) for a in args))
    assert status == 2 and len(err) == 1 and said in err[0] and "Traceback" not in err[0]


@pytest.mark.slow
def test_a_regression_against_the_stored_baseline_fails_with_its_cause(capsys, tmp_path):
    store = f"memory://gate-{tmp_path.name}"
    _accept(capsys, store, "main", EQUAL)
    status, out, _ = run_cli_output(capsys, "gate", "baseline:main", str(LATE), "--baseline-store", store)
    assert status == 1 and "gate: FAIL" in out and "scope extra_work" in out


def test_a_run_under_none_is_gated_on_its_unprofiled_steps(capsys, tmp_path):
    run = tmp_path / "none-run"
    shutil.copytree(NONE_RUN, run)
    doc = json.loads((run / "run.json").read_text())
    steps_ns = [30e6, 31e6, 29e6, 30.5e6]
    doc["results"]["0"]["rows"][0]["unprofiled_step_ns_samples"] = steps_ns  # as today's runs record them
    (run / "run.json").write_text(json.dumps(doc))
    status, out = _gate_json(capsys, str(run), str(run))
    step = next(m for m in out["metrics"] if m["metric"] == "step_time")
    assert status == 0 and step["baseline"] == pytest.approx(float(np.median(steps_ns))) and step["n_baseline"] == 4


# ---- repeats: a folder of run folders ----------------------------------------------------------------

def _repeats(tmp_path: Path, *runs: Path, loose: Path | None = None) -> Path:
    folder = tmp_path / "repeats"
    folder.mkdir()
    for k, run in enumerate(runs, 1):
        shutil.copytree(run, folder / f"repeat-{k}")
    if loose is not None:
        shutil.copy(loose, folder / loose.name)
    return folder


def test_a_folder_of_run_folders_is_each_of_them_and_a_trace_beside_them_one_more(tmp_path):
    folder = _repeats(tmp_path, NONE_RUN, NONE_RUN, loose=EQUAL / "rank0.pt.trace.json.gz")
    runs = Session.open([str(folder)], digests=()).runs
    assert [(Path(r.name).name, r.kind, len(r.profiles)) for r in runs] == \
        [("repeat-1", "none", 0), ("repeat-2", "none", 0), ("repeats", "traces", 1)]


def test_run_folders_are_found_below_folders_that_are_none(tmp_path):
    folder = _repeats(tmp_path, NONE_RUN, NONE_RUN)
    nested = tmp_path / "runs" / "candidate"
    nested.mkdir(parents=True)
    folder.rename(nested / "train-none-20261206-120000")  # --out runs/candidate holding --repeat's folder
    runs = Session.open([str(tmp_path / "runs")], digests=()).runs
    assert [Path(r.name).relative_to(nested).as_posix() for r in runs] == \
        ["train-none-20261206-120000/repeat-1", "train-none-20261206-120000/repeat-2"]


def test_repeats_are_stored_as_runs_and_judged_as_repeats(capsys, tmp_path, store):
    folder = _repeats(tmp_path, NONE_RUN, NONE_RUN)
    _accept(capsys, store, "main", folder)
    _, doc = _gate_json(capsys, "baseline:main", str(folder), "--baseline-store", store)
    assert [Path(b).name for b in doc["baseline"]] == ["repeat-1", "repeat-2"] and len(doc["candidate"]) == 2
    assert all(m["n_baseline"] == 2 and m["basis"] == "runs" for m in doc["metrics"])
    assert any(n["code"] == "gate_noise_repeats" and "(2 baseline, 2 candidate runs)" in n["text"] for n in doc["notes"])


def test_repeat_must_be_a_count(capsys, tmp_path):
    status, err = run_cli(capsys, "run", "train", "--repeat", "0", "--out", str(tmp_path))
    assert status == 2 and len(err) == 1 and "--repeat" in err[0] and not list(tmp_path.iterdir())


@pytest.mark.slow
def test_run_repeat_makes_run_folders_that_every_reader_takes_as_runs(capsys, tmp_path):
    status, out, err = run_cli_output(capsys, "run", "train", "--backend", "none", "--repeat", "2", "--out",
                                      str(tmp_path), "--", "--size", "tiny", "--steps", "4", "--warmup", "1",
                                      "--context-length", "32", "--batch-size", "2")
    assert status == 0, err
    (folder,) = tmp_path.iterdir()
    assert sorted(p.name for p in folder.iterdir()) == ["repeat-1", "repeat-2"] and "repeat 2 of 2" in err
    status, doc = _gate_json(capsys, str(folder), str(folder))
    step = next(m for m in doc["metrics"] if m["metric"] == "step_time")
    assert status == 0 and step["n_baseline"] == 8 and len(doc["baseline"]) == 2
    for command in ("breakdown", "steps", "compare", "report"):
        extra = ["-o", str(tmp_path / "r.html")] if command == "report" else []
        status, _, err = run_cli_output(capsys, command, str(folder), *extra)
        assert status in (0, 2) and "Traceback" not in err and (status == 0 or len(err.splitlines()) == 1)
