"""A GPU op that starts before its launch call returns was held by that call (a blocking copy
from pageable memory stages the data first), not by a missing edge, however long after its
stream's previous op it starts. Before, such copies counted as unexplained starts: on pipit's
CloverLeaf export (nsys 2024.5, 254 pageable HtoD copies) the what-if declined the whole trace
for 8.374 ms of them, where no op there starts more than 12 us after both its launch call
returned and the GPU's earlier work ended. The truth is recomputed here from the SQLite file."""
from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from helpers import nsys_export, run_cli_output, strict_json

LATE_NS = 20_000  # a start this long after both its call's return and the GPU's earlier work is unexplained


def _ops(copy_call_ns: tuple[int, int]) -> list[dict]:
    """40 rounds of a kernel and a blocking HtoD copy from pageable memory on one stream; the
    copy's call spans copy_call_ns (offsets into the round); the copy starts 60 us after the
    kernel ends."""
    ops = []
    for i in range(40):
        t = 1_000_000 + i * 300_000
        ops.append({"kind": "kernel", "name": "par_ranged1d_kernel(int)", "start": t + 7_000, "end": t + 57_000,
                    "stream": 7, "call": (t, t + 5_000, "cudaLaunchKernel_v7000")})
        ops.append({"kind": "memcpy", "name": "", "start": t + 117_000, "end": t + 127_000, "stream": 7,
                    "copy_kind": 1, "src_kind": 0, "dst_kind": 2,
                    "call": (t + copy_call_ns[0], t + copy_call_ns[1], "cudaMemcpy_v3020")})
    return ops


def _late_starts_ns(path: Path) -> list[int]:
    """Per GPU op, in start order, how long after both its launch call returned and the GPU's
    earlier work ended it started (0 where either was later), straight from the tables."""
    sql = """SELECT g.start, g.end, r.end FROM (
                 SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL
                 SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY) g
             JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId) ORDER BY g.start"""
    with closing(sqlite3.connect(path)) as con:
        rows = con.execute(sql).fetchall()
    late, busy_end = [], None
    for start, end, call_end in rows:
        late.append(max(0, start - max(call_end, busy_end if busy_end is not None else call_end)))
        busy_end = end if busy_end is None else max(busy_end, end)
    return late


def _whole_trace(capsys, path: Path) -> dict:
    status, out, _ = run_cli_output(capsys, "whatif", "--format", "json", str(path))
    assert status == 0
    [step] = strict_json(out)["steps"]
    return step


def test_a_copy_that_starts_inside_its_call_is_held_by_the_call(tmp_path, capsys):
    path = nsys_export(tmp_path / "held.sqlite", "2024.5", _ops((20_000, 140_000)))
    late = _late_starts_ns(path)
    assert max(late) < LATE_NS  # every start is explained by its call or the GPU's earlier work
    step = _whole_trace(capsys, path)
    assert step["unexplained_ns"] == sum(d for d in late if d > LATE_NS) == 0
    assert step["claimed"] and step["path_known"]


def test_a_copy_that_starts_long_after_its_call_returned_stays_unexplained(tmp_path, capsys):
    """The contrast: the same copies, their calls returning before the kernel ends; each starts
    60 us after both: the file holds no edge for that, and the what-if declines."""
    path = nsys_export(tmp_path / "late.sqlite", "2024.5", _ops((20_000, 40_000)))
    late = _late_starts_ns(path)
    step = _whole_trace(capsys, path)
    expected_ns = sum(d for d in late if d > LATE_NS)
    assert expected_ns > 0 and step["unexplained_ns"] == pytest.approx(expected_ns, abs=1_000)
    assert not step["claimed"]
