"""Issue 29's corpus, outputs: no output may be an input or a folder holding one, even with
--force; every output is whole or absent under SIGINT, SIGTERM and a full disk; the report's
HTML and merged trace appear both or neither; stale temporary files of ours are swept.
Each case keeps the promise (tests/promise.py)."""
from __future__ import annotations

import errno
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

import malformed as m
from promise import assert_refused, one_process, spread, tree
from helpers import slow_after

TORCH2 = m.DATA / "decode-2gpu-torch"
KINETO = m.KINETO  # decode-1gpu-torch/rank0.pt.trace.json.gz
DEAD_PID = 4194304  # above Linux's largest pid_max: no process has it


def _run(tmp: Path) -> Path:
    return Path(shutil.copytree(TORCH2, tmp / "run"))


def _trace(tmp: Path, name: str = "t.json.gz") -> Path:
    return Path(shutil.copy(KINETO, tmp / name))


def _dataset(tmp: Path) -> Path:
    (part := tmp / "ds" / "rank=0").mkdir(parents=True)
    (part / "part-0.parquet").write_bytes(b"PAR1 old")
    return tmp / "ds"


# case -> (maker of the command line from tmp, fragment of the one line)
OVER_INPUTS = {
    "export parquet: -o the run folder --force": (lambda t: ["export", "parquet", str(_run(t)), "-o", str(t / "run"),
                                                             "--force"], "is the input"),
    "export parquet: -o the run folder, trailing slash": (lambda t: ["export", "parquet", str(_run(t)) + "/", "-o",
                                                                     str(t / "run") + "/", "--force"], "is the input"),
    "export parquet: -o a folder inside the run": (lambda t: ["export", "parquet", str(_run(t)), "-o",
                                                              str(t / "run" / "ds"), "--force"], "inside the input"),
    "export parquet: -o the folder holding the run": (lambda t: ["export", "parquet", str(_run(t)), "-o", str(t),
                                                                 "--force"], "holds the input"),
    "export parquet: -o the trace file itself": (lambda t: ["export", "parquet", str(_trace(t)), "-o",
                                                            str(t / "t.json.gz"), "--force"], "is the input"),
    "export parquet: -o a folder that is no dataset": (lambda t: ["export", "parquet", str(_trace(t)), "-o",
                                                                  str(Path(shutil.copytree(TORCH2, t / "other"))),
                                                                  "--force"], "not a tracelab dataset"),
    "export parquet: -o a file --force": (lambda t: ["export", "parquet", str(_trace(t)), "-o",
                                                     str(_trace(t, "notes.txt")), "--force"], "not a tracelab dataset"),
    "export parquet: -o a link to the run": (lambda t: [(_run(t), os.symlink(t / "run", t / "ln"))[0] and "export",
                                                        "parquet", str(t / "run"), "-o", str(t / "ln"), "--force"],
                                             "is the input"),
    "report: -o the trace --force": (lambda t: ["report", str(_trace(t)), "-o", str(t / "t.json.gz"), "--force"],
                                     "is the input"),
    "report: -o a rank's trace in the run --force": (lambda t: ["report", str(_run(t)), "-o",
                                                                str(t / "run" / "rank0.pt.trace.json.gz"), "--force"],
                                                     "is the input"),
    "report: -o the run folder --force": (lambda t: ["report", str(_run(t)), "-o", str(t / "run"), "--force"],
                                          "is the input"),
    "report: -o a trace name inside the run": (lambda t: ["report", str(_run(t)), "-o",
                                                          str(t / "run" / "rank9.json"), "--force"], "inside the input"),
    "report: -o a hard link to the trace": (lambda t: [(_trace(t), os.link(t / "t.json.gz", t / "r.html"))[0] and
                                                       "report", str(t / "t.json.gz"), "-o", str(t / "r.html"),
                                                       "--force"], "is the input"),
    "report: -o a symlink to the trace": (lambda t: [(_trace(t), os.symlink(t / "t.json.gz", t / "r.html"))[0] and
                                                     "report", str(t / "t.json.gz"), "-o", str(t / "r.html"), "--force"],
                                          "is the input"),
    "report --perfetto: the merged trace would be the input": (
        lambda t: ["report", str(_trace(t, "r.perfetto.json.gz")), "-o", str(t / "r.html"), "--perfetto", "--force"],
        "is the input"),
    "report --perfetto: the merged trace exists (no --force)": (
        lambda t: [(t / "r.perfetto.json.gz").write_text("old") and "report", str(_trace(t)), "-o", str(t / "r.html"),
                   "--perfetto"], "exists"),
    "export perfetto: -o the trace --force": (lambda t: ["export", "perfetto", str(_trace(t)), "-o",
                                                         str(t / "t.json.gz"), "--force"], "is the input"),
    "export perfetto: -o a .json inside the run": (lambda t: ["export", "perfetto", str(_run(t)), "-o",
                                                              str(t / "run" / "merged.json")], "inside the input"),
    "export perfetto: -o a .json.gz inside the run": (lambda t: ["export", "perfetto", str(_run(t)), "-o",
                                                                 str(t / "run" / "all.json.gz")], "inside the input"),
    "export perfetto: -o the run folder --force": (lambda t: ["export", "perfetto", str(_run(t)), "-o",
                                                              str(t / "run"), "--force"], "is the input"),
    "export perfetto: -o the run via ..": (lambda t: ["export", "perfetto", str(_run(t)), "-o",
                                                      str(t / "run" / ".." / "run" / "rank1.pt.trace.json.gz"),
                                                      "--force"], "is the input"),
}


@pytest.mark.parametrize("case", spread(list(OVER_INPUTS), 3))
def test_output_never_over_an_input(case, tmp_path, capsys, monkeypatch):
    one_process(monkeypatch)
    make, fragment = OVER_INPUTS[case]
    args = make(tmp_path)
    assert_refused(capsys, tmp_path, args, fragment)


def test_export_parquet_force_replaces_its_own_dataset(tmp_path, capsys, monkeypatch):
    pytest.importorskip("pyarrow")
    one_process(monkeypatch)
    ds = _dataset(tmp_path)
    status, _, err = m.run_cli_output(capsys, "export", "parquet", str(_trace(tmp_path)), "-o", str(ds), "--force")
    assert status == 0, err
    part = ds / "rank=0" / "part-0.parquet"
    assert part.read_bytes()[:4] == b"PAR1" and part.stat().st_size > 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "t.json.gz"]  # no staging folder left


# ---- faults while writing: a signal, a full disk ----------------------------------------------

def _kill_during(monkeypatch, target: str, signum: int, after=None):
    """`target` ("module:function") sends `signum` to this process when called, after `after()`."""
    module, name = target.split(":")
    import importlib

    owner = importlib.import_module(module)
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):
        if after is not None:
            after(*args, **kwargs)
        os.kill(os.getpid(), signum)
        time.sleep(1)  # the handler raises before this ends
        return original(*args, **kwargs)
    monkeypatch.setattr(owner, name, wrapped)


def _put_some(put, *_, **__):
    put(b'{"traceEvents": [')  # half a file already in the temporary file


def _full_disk(*_, **__):
    raise OSError(errno.ENOSPC, "No space left on device")


SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}
FAULT_POINTS = {
    "export perfetto while streaming": ("tracelab.reports.perfetto.perfetto:write_json", _put_some,
                                        lambda t: ["export", "perfetto", str(_trace(t)), "-o", str(t / "m.json.gz")]),
    "export perfetto while loading": ("tracelab.ingest.loading:_parse_classified", None,
                                      lambda t: ["export", "perfetto", str(_trace(t)), "-o", str(t / "m.json")]),
    "report while rendering": ("tracelab.reports.html.html:render", None,
                               lambda t: ["report", str(_trace(t)), "-o", str(t / "r.html")]),
    "report --perfetto while streaming the trace": ("tracelab.reports.perfetto.perfetto:write_json", _put_some,
                                                    lambda t: ["report", str(_trace(t)), "-o", str(t / "r.html"),
                                                               "--perfetto"]),
    "export parquet while writing a part": ("tracelab.ingest.dataset:_swap", None,
                                            lambda t: ["export", "parquet", str(_trace(t)), "-o", str(t / "ds")]),
    "export parquet --force over a dataset": ("tracelab.ingest.dataset:_swap", None,
                                              lambda t: ["export", "parquet", str(_trace(t)), "-o", str(_dataset(t)),
                                                         "--force"]),
    "breakdown while loading": ("tracelab.ingest.loading:_parse_classified", None, lambda t: ["breakdown", str(_trace(t))]),
}


@slow_after(1)
@pytest.mark.parametrize("signame", list(SIGNALS))
@pytest.mark.parametrize("point", spread(list(FAULT_POINTS), 3))
def test_a_signal_leaves_nothing_half_written(point, signame, tmp_path, capsys, monkeypatch):
    if "parquet" in point:
        pytest.importorskip("pyarrow")
    one_process(monkeypatch)
    target, after, make = FAULT_POINTS[point]
    args = make(tmp_path)
    _kill_during(monkeypatch, target, SIGNALS[signame], after)
    original = signal.getsignal(SIGNALS[signame])
    if original is signal.SIG_IGN:  # a job a shell started with & ignores SIGINT, and tracelab leaves it so
        signal.signal(SIGNALS[signame], signal.default_int_handler)
    try:
        assert_refused(capsys, tmp_path, args, f"stopped by {signame}", status=128 + SIGNALS[signame])
    finally:
        signal.signal(SIGNALS[signame], original)


@pytest.mark.parametrize("point", [p for p in FAULT_POINTS if "perfetto while streaming" in p or "report" in p])
def test_a_full_disk_leaves_nothing_half_written(point, tmp_path, capsys, monkeypatch):
    one_process(monkeypatch)
    target, _, make = FAULT_POINTS[point]
    args = make(tmp_path)
    module, name = target.split(":")
    import importlib

    monkeypatch.setattr(importlib.import_module(module), name, _full_disk)
    assert_refused(capsys, tmp_path, args, "No space left")


def test_report_and_merged_trace_appear_together(tmp_path, capsys, monkeypatch):
    """SIGTERM between the two renames is held until both are done: both files, whole."""
    from tracelab.ingest import outputs

    one_process(monkeypatch)
    trace = _trace(tmp_path)
    original = os.replace
    calls = []

    def replace(src, dst):
        original(src, dst)
        calls.append(dst)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # after the first rename, before the second
    monkeypatch.setattr(outputs.os, "replace", replace)
    status, _, err = m.run_cli_output(capsys, "report", str(trace), "-o", str(tmp_path / "r.html"), "--perfetto")
    assert status == 128 + signal.SIGTERM, err
    assert len(calls) == 2 and (tmp_path / "r.html").stat().st_size > 1000
    import gzip

    assert gzip.decompress((tmp_path / "r.perfetto.json.gz").read_bytes()).startswith(b"{")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_stale_temporary_files_are_swept(tmp_path, capsys, monkeypatch):
    one_process(monkeypatch)
    trace = _trace(tmp_path)
    killed = f".tracelab-{os.geteuid()}-{DEAD_PID}-"  # a process that is gone
    stale = [tmp_path / f"{killed}abcd_123.tmp", tmp_path / f"{killed}0123abcd.tmp"]
    stale[0].write_text("half")
    stale[1].mkdir()  # export parquet's staging folder
    fresh = tmp_path / f"{killed}fresh123.tmp"
    fresh.write_text("being written by another tracelab")
    mine = [tmp_path / ".notes.tmp", tmp_path / ".m.json.abcd_123.tmp"]  # not names of ours
    for path in mine:
        path.write_text("the user's")
    for path in stale + mine:
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    status, _, err = m.run_cli_output(capsys, "export", "perfetto", str(trace), "-o", str(tmp_path / "m.json"))
    assert status == 0, err
    assert not any(p.exists() for p in stale) and fresh.exists() and all(p.exists() for p in mine)
