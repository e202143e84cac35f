"""overlap-comm (reports/whatif/scenarios.py, depend.last_of_steps) hides collectives' transfers
behind compute, never the wait for a rank that has not arrived: each rank's step keeps the wait on
its last collective. Hand-made steps whose answers are worked out by hand (GPU: one stream; CPU:
a host thread and gloo's worker), and real 2-rank gloo DDP captures against the runs that made
the change for real (their run.json) and the transfers read straight from the trace JSON."""
from __future__ import annotations

import functools
import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

import tracelab
from tracelab.core import classify, schema
from tracelab.core.schema import RankData
from tracelab.reports.unprofiled import measured_step
from tracelab.reports.whatif import depend
from tracelab.reports.whatif.analyse import whatif
from tracelab.reports.whatif.join import join
from tracelab.reports.whatif.kinds import COLL
from tracelab.reports.whatif.nodes import rank_graph, shared_graph

from helpers import host_rows, kernel_rows

DATA = Path(__file__).parent / "data"
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
US = 1_000


# ---- one GPU stream: the backward in buckets, each bucket's all-reduce behind it, the optimizer last ----


def _ddp_stream(rank: int, buckets: int, late_ns: int, adam_ns: int):
    """Per bucket, its backward (300 ns; rank 1's last one `late_ns` longer) and its all-reduce
    (200 ns of transfer, on rank 0 also the wait for rank 1), then the optimizer (`adam_ns`),
    back to back on stream 7, each launched early (launch at its index, 1 ns)."""
    rows, t = [], 10
    for b in range(buckets):
        bwd = 300 + (late_ns if rank == 1 and b == buckets - 1 else 0)
        wait = late_ns if rank == 0 and b == buckets - 1 else 0
        rows += [(f"bwd{b}", 7, t, bwd, 2 * b, 1), (AR, 7, t + bwd, 200 + wait, 2 * b + 1, 1)]
        t += bwd + 200 + wait
    return kernel_rows(rows + [("adam", 7, t, adam_ns, 2 * buckets, 1)], rank=rank)


@pytest.mark.parametrize("buckets, late_ns, adam0_ns, saving_ns", [
    # the step's only all-reduce is its last: the optimizer reads it, nothing hides it
    (1, 0, 100, 0),
    # the first bucket's 200 ns run beside the second bucket's backward: 1110 -> 910 ns
    (2, 0, 100, 200),
    # rank 1's last backward is 1000 ns late, rank 0 waits for it in the last all-reduce and then
    # runs a 500 ns optimizer (to 2510 ns). Hiding the first bucket saves its 200 ns on both ranks:
    # rank 1 arrives at 1610, the all-reduce ends at 1810 on both, rank 0's optimizer at 2310.
    # Hiding the last one's wait too would end rank 0 at 1110 and rank 1 at 1710: 800 ns "saved".
    (2, 1000, 500, 200),
])
def test_overlap_comm_hides_earlier_buckets_never_the_wait_at_the_last(buckets, late_ns, adam0_ns, saving_ns):
    host = host_rows([("step", "step 0", 0, 10_000)])
    graphs = {r: rank_graph(_ddp_stream(r, buckets, late_ns, adam0_ns if r == 0 else 100), host, r) for r in (0, 1)}
    w = whatif(graphs, {0: 0, 1: 0}, ["overlap-comm"])
    row = w.scenarios.iloc[0]
    assert row["step_ns"] == 10 + buckets * 500 + late_ns + adam0_ns  # from the first launch (at 0) to the last end
    assert row["saving_ns"] == saving_ns


def test_back_to_back_all_reduces_hide_behind_nothing():
    """Three 200 ns all-reduces back to back, no compute: their transfers still run one after another."""
    host = host_rows([("step", "step 0", 0, 10_000)])
    rows = [(AR, 7, 10 + 200 * k, 200, k, 1) for k in range(3)]
    graphs = {r: rank_graph(kernel_rows(rows, rank=r), host, r) for r in (0, 1)}
    row = whatif(graphs, {0: 0, 1: 0}, ["overlap-comm"]).scenarios.iloc[0]
    assert row["step_ns"] == 610 and row["saving_ns"] == 0


def test_the_kept_collective_is_each_ranks_last_of_its_step():
    host = host_rows([("step", "step 0", 0, 10_000)])
    graphs = {r: rank_graph(_ddp_stream(r, 3, 0, 100), host, r) for r in (0, 1)}
    g = join(graphs, {0: 0, 1: 0})
    coll = np.flatnonzero(g.kind == COLL)
    last = depend.last_of_steps(g, g.kind == COLL)
    latest = {r: coll[g.rank[coll] == r][np.argmax(g.end_ns[coll[g.rank[coll] == r]])] for r in (0, 1)}
    assert set(np.flatnonzero(last).tolist()) == set(latest.values())
    assert not depend.last_of_steps(g, np.zeros(len(g), bool)).any()


# ---- CPU only: a host thread that waits on gloo's worker ------------------------------------------


def _cpu_rows(rows: list[tuple], rank: int):
    """Classified CPU operator rows of one rank: (name, thread, start, dur), all in step 0."""
    name, tid, start, dur = zip(*rows)
    return schema.validate(classify.classified(schema.coerce({
        "rank": rank, "source": "torch", "kind": "cpu_op", "name": list(name), "device": -1, "stream": list(tid),
        "start_ns": list(start), "dur_ns": list(dur), "step": 0}, n_rows=len(rows), spec=schema.PARSED)))


def _naive_cpu(rank: int, stall_ns: int):
    """Forward 1 ms; two gradients each all-reduced (a 10 us call, the gloo range 5 us after its
    start on worker thread 2, 200 us of transfer) and waited for (aten::div_ 5 us after the range
    ends), a 1 ms backward between; a 500 us optimizer. Rank 1 sleeps `stall_ns` as its first
    wait returns, before its div_: rank 0 waits that long in the second all-reduce."""
    t, rows = 1000 * US, [("aten::linear", 1, 0, 1000 * US)]
    for k in range(2):
        wait = stall_ns if rank == 0 and k == 1 else 0
        rows += [("c10d::allreduce_", 1, t, 10 * US), ("gloo:all_reduce", 2, t + 5 * US, 200 * US + wait)]
        t += 205 * US + wait + (stall_ns if rank == 1 and k == 0 else 0)
        rows += [("aten::div_", 1, t + 5 * US, 10 * US)]
        t += 15 * US
        rows += [("aten::mm", 1, t, 1000 * US)] if k == 0 else [("aten::add_", 1, t, 500 * US)]
        t += 1000 * US if k == 0 else 500 * US
    return _cpu_rows(rows, rank)


def test_a_hidden_wait_keeps_the_stall_after_it_and_the_last_wait_keeps_the_late_rank():
    stall_ns = 5_000 * US
    host = host_rows([("step", "step 0", 0, 20_000 * US)])
    graphs = {r: rank_graph(_naive_cpu(r, stall_ns), host, r) for r in (0, 1)}
    stalls = graphs[1].stalls  # the sleep and the 5 us before div_: untraced, after the first wait
    assert len(stalls) == 1 and stalls["after"].iloc[0] == "gloo:all_reduce"
    assert stalls["stall_ns"].iloc[0] == stall_ns + 5 * US
    w = whatif(graphs, {0: 0, 1: 0}, ["overlap-comm"])
    row = w.scenarios.iloc[0]
    # measured (rank 1): 1000 forward + 205 to the first range's end + 5000 sleep + 5 + 10 div_ + 1000 mm
    # + 205 to the second range's end + 5 + 10 div_ + 500 optimizer = 7940 us. Hidden: the first wait,
    # the 195 us from the call's end to the range's; rank 1's sleep stays (with the 5 us before div_:
    # untraced too), and rank 0 still waits for rank 1 at the second all-reduce.
    assert row["step_ns"] == 7_940 * US and row["saving_ns"] == 195 * US


# ---- real captures: 2 gloo DDP ranks on 16 quiet cores ----------------------------------------------


@functools.lru_cache(maxsize=2)
def _answer(folder: str, specs: tuple[str, ...]):
    ps = tracelab.load_many(DATA / folder)
    graphs = {p.rank: shared_graph(RankData(p.events, p.meta, p.host, p.memory)) for p in ps}
    m = measured_step(json.loads((DATA / folder / "run.json").read_text()), [])
    w = whatif(graphs, {p.rank: p.meta.trace_start_epoch_ns for p in ps}, list(specs), unprofiled_ns=m.ns,
               unprofiled_regions=m.regions)
    return m.ns, {(r.name if r.name != "together" else "together:" + r.args): r.predicted_unprofiled_ns
                  for r in w.scenarios.itertuples()}


def _slowest_step_ns(folder: str) -> float:
    """The slowest rank's step without the profiler, straight from run.json."""
    results = json.loads((DATA / folder / "run.json").read_text())["results"]
    return max(rec["rows"][0]["unprofiled_step_ns"] for rec in results.values())


def _transfer_per_step_ns(folder: str) -> float:
    """Per step, the gloo all-reduces' transfer straight from the trace JSON: the i-th range of each
    rank matched, its transfer its end less its last rank's start, the least over the ranks (us -> ns)."""
    ranges = []
    for rank in (0, 1):
        events = json.loads(gzip.open(DATA / folder / f"rank{rank}.pt.trace.json.gz").read())["traceEvents"]
        ranges.append(sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                             if e.get("ph") == "X" and e.get("name") == "gloo:all_reduce"))
        steps = sum(1 for e in events if e.get("ph") == "X" and re.fullmatch(r"step \d+", str(e.get("name", ""))))
    assert len(ranges[0]) == len(ranges[1]) > 0
    transfer_us = sum(min(a[1], b[1]) - max(a[0], b[0]) for a, b in zip(*ranges))
    return 1e3 * transfer_us / steps


@pytest.mark.slow
def test_overlap_comm_keeps_the_wait_for_a_stalled_rank():
    """rank 1 sleeps 30 ms before its backward every step; rank 0 waits in their one all-reduce."""
    measured_ns, got = _answer("stall-ddp-16cpu-torch", ("no-host-stalls", "overlap-comm"))
    transfer_ns = _transfer_per_step_ns("stall-ddp-16cpu-torch")
    assert 0 < transfer_ns < 0.05 * measured_ns
    assert got["overlap-comm"] >= measured_ns - transfer_ns
    assert got["overlap-comm"] >= _slowest_step_ns("stall-ddp-16cpu-after-none")  # the stall removed for real
    assert got["together:no-host-stalls+overlap-comm"] >= got["no-host-stalls"] - transfer_ns
    _, defaults = _answer("stall-ddp-16cpu-torch", ("no-host-gaps", "no-host-stalls", "balance", "overlap-comm"))
    _, less = _answer("stall-ddp-16cpu-torch", ("no-host-gaps", "no-host-stalls", "balance"))
    assert defaults["together:no-host-gaps+no-host-stalls+balance+overlap-comm"] >= \
        less["together:no-host-gaps+no-host-stalls+balance"] - transfer_ns


@pytest.mark.slow
def test_naive_to_bucketed_ddp_stays_predicted():
    """17 per-parameter all-reduces after the backward, each waited for, against bucketed DDP run for real."""
    measured_ns, got = _answer("ddp-naive-16cpu-torch", ("overlap-comm",))
    after_ns = _slowest_step_ns("ddp-naive-16cpu-after-none")
    assert after_ns < measured_ns
    assert got["overlap-comm"] == pytest.approx(after_ns, rel=0.25)
