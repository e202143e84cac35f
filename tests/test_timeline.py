"""Timeline analyses: busy/idle (union of intervals), communication overlap, collective skew
and binned activity, on hand-made intervals and against plain-Python sweeps over real traces."""
from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from helpers import shared_trace, slow_after

import tracelab
from tracelab.core.schema import coerce
from tracelab.reports.timeline import intervals as timeline

SAMPLED = "hta/trace_filter/sampled_rank-{rank}.json.gz"  # a public trace, found by helpers.shared_trace


def frame(rows: list[tuple]) -> pd.DataFrame:
    """rows of (rank, kind, op_class, start_ns or None, dur_ns)."""
    rank, kind, op_class, start, dur = zip(*rows)
    return coerce({"rank": rank, "source": "torch", "kind": kind, "name": op_class, "kernel": op_class,
                   "op_class": op_class, "device": 0, "stream": 7, "dur_ns": dur,
                   "start_ns": [pd.NA if s is None else s for s in start]})


def union_ns(intervals: list[tuple[int, int]]) -> int:
    """Plain sweep: total length of the union of [start, end) intervals."""
    total, cur_start, cur_end = 0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            total += 0 if cur_end is None else cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    return total + (0 if cur_end is None else cur_end - cur_start)


# (name, rows, busy_ns, span_ns)
BUSY_CASES = [
    ("disjoint", [(0, "kernel", "gemm", 0, 10), (0, "kernel", "gemm", 20, 10)], 20, 30),
    ("nested on two streams", [(0, "kernel", "gemm", 0, 100), (0, "kernel", "communication", 10, 20)], 100, 100),
    ("touching", [(0, "kernel", "gemm", 0, 10), (0, "kernel", "gemm", 10, 10)], 20, 20),
    ("partial overlap", [(0, "kernel", "gemm", 0, 10), (0, "memcpy", "memory", 5, 10)], 15, 15),
    ("unsorted input", [(0, "kernel", "gemm", 50, 10), (0, "kernel", "gemm", 0, 60)], 60, 60),
    ("cpu ops are not GPU time", [(0, "kernel", "gemm", 0, 10), (0, "cpu_op", "other", 100, 10)], 10, 10),
]


@pytest.mark.parametrize("name,rows,busy,span", BUSY_CASES, ids=[c[0] for c in BUSY_CASES])
def test_busy_and_idle(name, rows, busy, span):
    df = frame(rows)
    assert timeline.busy_ns(df).to_dict() == {0: busy}
    got = timeline.idle(df).iloc[0]
    assert (got["busy_ns"], got["span_ns"], got["idle_ns"]) == (busy, span, span - busy)
    assert got["idle_share"] == pytest.approx((span - busy) / span)


def test_untimed_ranks_are_absent():
    df = frame([(0, "kernel", "gemm", None, 10), (1, "kernel", "gemm", 0, 10)])
    assert timeline.busy_ns(df).to_dict() == {1: 10}
    assert timeline.idle(df.iloc[:1]).empty and timeline.overlap_ns(df.iloc[:1]).empty


# (name, rows, comm, compute, overlap)
OVERLAP_CASES = [
    ("exposed", [(0, "kernel", "communication", 0, 10), (0, "kernel", "gemm", 10, 10)], 10, 10, 0),
    ("hidden", [(0, "kernel", "communication", 2, 5), (0, "kernel", "gemm", 0, 10)], 5, 10, 5),
    ("half", [(0, "kernel", "communication", 5, 10), (0, "kernel", "gemm", 0, 10)], 10, 10, 5),
    ("memcpy is not compute", [(0, "kernel", "communication", 0, 10), (0, "memcpy", "memory", 0, 10)], 10, 0, 0),
]


@pytest.mark.parametrize("name,rows,comm,compute,overlap", OVERLAP_CASES, ids=[c[0] for c in OVERLAP_CASES])
def test_overlap(name, rows, comm, compute, overlap):
    got = timeline.overlap_ns(frame(rows)).iloc[0]
    assert (got["comm_ns"], got["compute_ns"], got["overlap_ns"], got["exposed_ns"]) == \
        (comm, compute, overlap, comm - overlap)


def test_activity_bins_are_exact():
    df = frame([(0, "kernel", "gemm", 0, 250), (0, "kernel", "gemm", 100, 50), (0, "kernel", "communication", 390, 10),
                (1, "kernel", "gemm", 50, 100)])
    bins = timeline.activity_bins(df, n_bins=4)  # edges 0, 100, 200, 300, 400
    gemm0 = bins[(bins["rank"] == 0) & (bins["op_class"] == "gemm")]["busy_ns"].tolist()
    assert gemm0 == [100, 100, 50, 0]
    assert bins[bins["rank"] == 1]["busy_ns"].tolist() == [50, 50, 0, 0]
    assert bins[bins["op_class"] == "communication"]["busy_ns"].tolist() == [0, 0, 0, 10]


def test_collective_skew_hand_made():
    rows = [(r, "kernel", "communication", start, 5) for r, start in [(0, 100), (1, 130), (2, 90), (0, 200), (1, 205)]]
    skew = timeline.collective_skew(frame(rows))
    assert skew[["instance", "ranks", "first_rank", "last_rank", "skew_ns"]].values.tolist() == \
        [[0, 3, 2, 1, 40], [1, 2, 0, 1, 5]]
    shifted = timeline.collective_skew(frame(rows), offsets_ns={0: 0, 1: -100, 2: 0})
    assert shifted["last_rank"].tolist() == [0, 0] and shifted["skew_ns"].tolist() == [70, 95]
    summary = timeline.skew_summary(skew).iloc[0]
    assert (summary["instances"], summary["max_skew_ns"], summary["last_rank"], summary["last_share"]) == (2, 40, 1, 1.0)


def test_clock_offsets_need_every_rank():
    assert timeline.clock_offsets([{"rank": 0, "trace_start_epoch_ns": 50}, {"rank": 1, "trace_start_epoch_ns": 20}]) \
        == {0: 30, 1: 0}
    assert timeline.clock_offsets([{"rank": 0, "trace_start_epoch_ns": 50}, {"rank": 1}]) is None


# ---- real traces against plain-Python sweeps ---------------------------------------------


def _kineto_gpu(path: Path) -> list[dict]:
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]


@slow_after(1)
@pytest.mark.parametrize("rank", [0, 1])
def test_hta_busy_and_overlap_against_sweep(rank):
    path = shared_trace(SAMPLED.format(rank=rank))
    gpu = _kineto_gpu(path)
    iv = [(round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000)) for e in gpu]
    comm = [i for i, e in zip(iv, gpu) if e["cat"] == "kernel" and "nccl" in e["name"].lower()]
    compute = [i for i, e in zip(iv, gpu) if e["cat"] == "kernel" and "nccl" not in e["name"].lower()]
    df = tracelab.load(path).events
    got = timeline.rank_timeline(df).iloc[0]
    assert got["busy_ns"] == union_ns(iv)
    assert got["span_ns"] == max(e for _, e in iv) - min(s for s, _ in iv)
    assert got["comm_ns"] == union_ns(comm) and got["compute_ns"] == union_ns(compute)
    assert got["overlap_ns"] == union_ns(comm) + union_ns(compute) - union_ns(comm + compute)
    assert 0 < got["overlap_ns"] < got["comm_ns"]


def test_hta_collective_skew_against_json():
    starts = []
    for rank in (0, 1):
        nccl = [e for e in _kineto_gpu(shared_trace(SAMPLED.format(rank=rank)))
                if e["cat"] == "kernel" and "nccl" in e["name"]]
        starts.append(sorted(round(e["ts"] * 1000) for e in nccl))
    expected = [abs(a - b) for a, b in zip(*starts)]
    last = [0 if a > b else 1 for a, b in zip(*starts)]
    profiles = tracelab.load_many([shared_trace(SAMPLED.format(rank=r)) for r in (0, 1)])
    offsets = timeline.clock_offsets([p.meta.to_dict() for p in profiles])
    skew = timeline.collective_skew(tracelab.events(profiles), offsets)
    assert skew["skew_ns"].tolist() == expected
    assert skew["last_rank"].tolist() == last


@pytest.mark.shared
def test_nsys_busy_against_sql():
    path = shared_trace("nsys-ai/mfu_2gpu_before.sqlite")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        by_pid: dict[int, list] = {}
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            if table in tables:
                for gpid, start, end in db.execute(f'SELECT globalPid, start, "end" FROM {table}'):
                    by_pid.setdefault((gpid >> 24) & 0xFFFFFF, []).append((start, end))
    expected = {rank: union_ns(by_pid[pid]) for rank, pid in enumerate(sorted(by_pid))}
    assert timeline.busy_ns(tracelab.events(tracelab.load_many(path))).to_dict() == expected
