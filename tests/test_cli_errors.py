"""Bad input gives one line on stderr naming the file and the reason, exit 2, no traceback,
and the input is never modified."""
from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import shared_trace

GOOD_KINETO = "hta/trace_filter/sampled_rank-0.json.gz"


def _tracelab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracelab", *args], capture_output=True, text=True,
                          timeout=120)


def _empty(tmp: Path) -> Path:
    (p := tmp / "empty.json").write_bytes(b"")
    return p


def _truncated_json(tmp: Path) -> Path:
    raw = gzip.decompress(shared_trace(GOOD_KINETO).read_bytes())
    (p := tmp / "truncated.json").write_bytes(raw[: len(raw) // 2])
    return p


def _truncated_gzip(tmp: Path) -> Path:
    raw = shared_trace(GOOD_KINETO).read_bytes()
    (p := tmp / "truncated.json.gz").write_bytes(raw[: len(raw) // 2])
    return p


def _random_bytes(tmp: Path) -> Path:
    # a first byte that no format starts with: random bytes that happen to open with "{" or "[" read as JSON
    (p := tmp / "random.json").write_bytes(b"\x00" + os.urandom(4095))
    return p


def _not_a_trace(tmp: Path) -> Path:
    (p := tmp / "config.json").write_text('{"model": "llama", "layers": 32}')
    return p


def _sqlite_without_cupti(tmp: Path) -> Path:
    p = tmp / "other.sqlite"
    with sqlite3.connect(p) as db:
        db.execute("CREATE TABLE people (name TEXT)")
    return p


def _empty_folder(tmp: Path) -> Path:
    (p := tmp / "nothing_here").mkdir()
    (p / "notes.txt").write_text("no traces")
    return p


CASES = {
    "empty file": (_empty, "empty"),
    "truncated JSON": (_truncated_json, ""),
    "truncated gzip": (_truncated_gzip, "gzip"),
    "random bytes": (_random_bytes, "not a trace"),
    "JSON that is not a trace": (_not_a_trace, ""),
    "SQLite without CUPTI tables": (_sqlite_without_cupti, "CUPTI"),
    "folder with no traces": (_empty_folder, "no trace files"),
}


def _digest(path: Path) -> str:
    if path.is_dir():
        return "dir"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _assert_one_clear_line(result: subprocess.CompletedProcess, path: Path, reason: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert path.name in lines[0]
    assert reason.lower() in lines[0].lower()


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_gives_one_line_and_exit_2(case, tmp_path):
    make, reason = CASES[case]
    path = make(tmp_path)
    before = _digest(path)
    result = _tracelab("breakdown", str(path))
    _assert_one_clear_line(result, path, reason)
    assert _digest(path) == before


@pytest.mark.slow
def test_two_files_claiming_one_rank(tmp_path, capsys):
    from helpers import run_cli_output

    src = shared_trace(GOOD_KINETO)  # distributedInfo says rank 0
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    shutil.copy(src, a)
    shutil.copy(src, b)
    status, _, err = run_cli_output(capsys, "breakdown", str(tmp_path))  # one run folder, rank 0 twice
    assert status == 2
    assert "rank 0" in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
    status, out, err = run_cli_output(capsys, "breakdown", str(a), str(b))  # two inputs: two runs, each labelled
    assert status == 0 and f"{a}: rank 0" in " ".join(out.split()) and f"{b}: rank 0" in " ".join(out.split()), err


@pytest.mark.parametrize("args, fragment", [
    (["--by", "flavour"], "--by"),
    (["--format", "xml"], "--format"),
    (["--top", "-1"], "--top"),
])
@pytest.mark.slow
def test_bad_options(args, fragment):
    result = _tracelab("breakdown", str(shared_trace(GOOD_KINETO)), *args)
    assert result.returncode == 2
    assert fragment in result.stderr and "Traceback" not in result.stderr
