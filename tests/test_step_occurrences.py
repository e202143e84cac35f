"""A step is one occurrence of a step range (issue 28): `token 1..N` written once per decode
sample are distinct steps, the k-th occurrence of N numbered N + k * 10^d, the same under
Kineto and nsys. Checked on copies of real captures whose later token ranges are renamed
to repeat the first ones' numbers, against the original capture's rows."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from tracelab.parsers import chrome, nsys
from tracelab.parsers._steps import occurrences

from helpers import TOKEN_RENAME, renamed_token_copy

DATA = Path(__file__).resolve().parent / "data"
MOVED = {1: 1, 2: 2, 3: 3, 4: 11, 5: 12}  # largest number 3: a repeat moves by 10


def _nsys_copy(tmp_path: Path) -> Path:
    out = tmp_path / "rank0.sqlite"
    shutil.copy(DATA / "decode-1gpu-steps-nsys/rank0.sqlite", out)
    with sqlite3.connect(out) as con:
        for old, new in TOKEN_RENAME.items():
            con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE text = ?", (new, old))
    return out


def _steps_by_row(profile) -> list:
    ev = profile.events
    return [None if s is None or s is np.nan else int(s) for s in ev["step"].astype(object).where(ev["step"].notna(), None)]


@pytest.mark.parametrize("read, original, copy", [
    (chrome.read, DATA / "decode-1gpu-steps-torch/rank0.pt.trace.json.gz", renamed_token_copy),
    (lambda p: nsys.read(p)[0], DATA / "decode-1gpu-steps-nsys/rank0.sqlite", _nsys_copy),
])
def test_a_repeated_step_range_is_a_step_of_its_own(tmp_path, read, original, copy):
    before, after = read(original), read(copy(tmp_path))
    want = [None if s is None else MOVED[s] for s in _steps_by_row(before)]
    assert sorted(set(MOVED.values())) == sorted({s for s in want if s is not None})  # every token has rows
    assert _steps_by_row(after) == want
    assert any(n.code == "step_numbers_repeat" and n.values["scale"] == 10 and "N + k * 10" in n.text
               for n in after.meta.notes)
    assert not any(n.code == "step_numbers_repeat" for n in before.meta.notes)


def test_overlapping_ranges_of_one_number_are_one_occurrence_per_group():
    # group 7: `step 3` on two threads (overlapping), then `step 3` again, then 12 (2 digits: 100)
    # group 9: its own first `step 3`
    number = np.array([3, 3, 3, 12, 3])
    group = np.array([7, 7, 7, 7, 9])
    start = np.array([0, 5, 100, 200, 0])
    end = np.array([50, 40, 150, 250, 50])
    assert occurrences(number, group, start, end).tolist() == [3, 3, 103, 12, 3]


def test_back_to_back_ranges_of_one_number_are_two_occurrences():
    # the second starts exactly where the first ends: two steps, not one
    assert occurrences(np.array([1, 1]), np.array([0, 0]), np.array([0, 10]), np.array([10, 20])).tolist() == [1, 11]


@pytest.mark.slow
def test_a_decode_window_on_two_cpu_ranks_is_the_same_aligned_steps(tmp_path):
    pytest.importorskip("torch")
    from tracelab.ingest.loading import load
    from tracelab.run.runner import RunSpec, run

    result = run(RunSpec("decode", 2, "torch", tmp_path, ["--samples", "2", "--new-tokens", "4", "--warmup", "0"]))
    steps = {}
    for rank in (0, 1):
        ev = load(result.run_dir / f"rank{rank}.pt.trace.json.gz").events
        steps[rank] = sorted(int(s) for s in ev["step"].dropna().unique())
    # the profiler records tokens 1..3 of one sample (repeated numbers: the renamed captures above)
    assert steps[0] == steps[1] == [1, 2, 3]
