"""Host stalls (reports/timeline/stalls.py) found, replayed away (whatif no-host-stalls), named with
their own fix (fixes/stall.py) and counted as their own idle cause; overlap-comm leaving a
tensor-parallel layer's collectives in place (whatif/depend.py). Real captures with a stall in
tests/data (stall-*-torch unmarked, whatif-stall-2gpu-torch in a range), their stalls recomputed
straight from the trace JSON; hand-made steps whose answers are computed by hand."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import tracelab
from tracelab.core.errors import UsageError
from tracelab.reports.fixes.stall import FIXES, fix_of
from tracelab.reports.idle.idle import CAUSES, rank_idle
from tracelab.reports.timeline.stalls import BETWEEN_STEPS, MIN_STALL_NS, host_stalls
from tracelab.reports.whatif import depend
from tracelab.reports.whatif.analyse import whatif
from tracelab.reports.whatif.join import join
from tracelab.reports.whatif.nodes import COLL, rank_graph
from tracelab.reports.whatif.replay import measured, replay
from tracelab.reports.whatif.scenarios import parse

from helpers import host_rows, kernel_rows, slow_after

DATA = Path(__file__).parent / "data"
SYNC = "cudaStreamSynchronize"


def _json(path: Path) -> list[dict]:
    return json.loads(gzip.open(path).read())["traceEvents"]


def _untraced_gaps_us(path: Path) -> list[float]:
    """Straight from a CPU trace's JSON: the gaps of at least 1 ms in the union of its CPU
    operators and gloo ranges, from its first step range's start on (us)."""
    events = _json(path)
    ops = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and (
        e.get("cat") == "cpu_op" or (e.get("cat") == "user_annotation" and e["name"].startswith("gloo:"))))
    first_step = min(e["ts"] for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("step "))
    out, reached = [], ops[0][1]
    for start, end in ops[1:]:
        if start - reached >= MIN_STALL_NS / 1e3 and reached >= first_step:
            out.append(start - reached)
        reached = max(reached, end)
    return out


def _graphs(folder: Path):
    profiles = tracelab.load_many(folder)
    return ({p.rank: rank_graph(p.events, p.host, p.rank) for p in profiles},
            {p.rank: p.meta.trace_start_epoch_ns for p in profiles}, profiles)


# ---- found: real captures against their JSON ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("folder, rank", [  # the rule once by default (the stalled rank); the others under -m slow
    pytest.param("stall-2cpu-torch", 0, marks=pytest.mark.slow), ("stall-2cpu-torch", 1),
    pytest.param("stall-1cpu-torch", 0, marks=pytest.mark.slow)])
def test_a_cpu_traces_stalls_are_its_untraced_gaps(folder, rank):
    path = DATA / folder / f"rank{rank}.pt.trace.json.gz"
    p = tracelab.load(path)
    stalls = host_stalls(p.events, p.host)
    assert stalls["stall_ns"].to_numpy() / 1e3 == pytest.approx(_untraced_gaps_us(path), abs=0.01)


@pytest.mark.slow
def test_the_stalled_rank_stalls_its_sleep_every_step_after_its_forward():
    p = tracelab.load(DATA / "stall-2cpu-torch" / "rank1.pt.trace.json.gz")
    record = json.loads((DATA / "stall-2cpu-torch" / "rank1.results.json").read_text())
    rank, ms = record["host_stall_ms"].split(":")
    assert int(rank) == 1 and record["host_stall_unmarked"] is True
    stalls = host_stalls(p.events, p.host)
    sleeps = stalls[stalls["stall_ns"] >= float(ms) * 1e6]  # the sleep, at least its length
    assert sorted(sleeps["step"].tolist()) == list(range(6))
    assert set(sleeps["after"]) == {"aten::cross_entropy_loss"}  # the loss ends the forward; then the sleep
    assert not any(e.get("name") == "host_stall" for e in _json(DATA / "stall-2cpu-torch" / "rank1.pt.trace.json.gz"))


@pytest.mark.slow  # two 0.9 MB GPU traces, ~2 s
def test_a_gpu_stall_after_a_sync_is_found_by_its_untraced_time_not_its_range():
    folder = DATA / "whatif-stall-2gpu-torch"
    for rank in (0, 1):
        path = folder / f"rank{rank}.pt.trace.json.gz"
        events = _json(path)
        ranges = sorted((e for e in events if e.get("name") == "host_stall" and e.get("ph") == "X"), key=lambda e: e["ts"])
        traced = np.sort([e["ts"] for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "cuda_runtime")])
        p = tracelab.load(path)
        stalls = host_stalls(p.events, p.host)
        assert len(stalls) == len(ranges)  # rank 0 stalls nowhere; rank 1 once per stall range
        parsed = p.host[p.host["name"] == "host_stall"]["start_ns"].to_numpy()  # the same ranges on the parser's clock
        shift_us = parsed.min() / 1e3 - ranges[0]["ts"] if len(ranges) else 0
        for r, s in zip(ranges, stalls.itertuples()):
            start_us, end_us = s.start_ns / 1e3 - shift_us, s.end_ns / 1e3 - shift_us
            assert s.stall_ns / 1e3 >= 0.98 * r["dur"] and s.after == "cudaDeviceSynchronize"
            # past the range's end it runs on to the next traced call: nothing traced begins inside it
            inside = traced[(traced > start_us + 1) & (traced < end_us - 1)]
            assert not len(inside), (r["ts"], inside[:3])


# ---- found: hand-made steps -----------------------------------------------------------------------


def _step(host_extra: list[tuple], between: bool = False):
    """Kernel a (launched at 0, runs 20-30), a sync 10-35 waiting for it, kernel b launched at 3 ms.
    With `between`, a runs in step 0 (0-100 us) and b in step 1 (from 2.9 ms)."""
    events = kernel_rows([("a", 7, 20, 10, 0, 5), ("b", 7, 3_000_020, 10, 3_000_000, 5)])
    steps = [("step", "step 0", 0, 100_000), ("step", "step 1", 2_900_000, 200_000)] if between else \
        [("step", "step 0", 0, 4_000_000)]
    if between:
        events["step"] = [0, 1]
    return events, host_rows([("sync", SYNC, 10, 25), *host_extra, *steps])


@pytest.mark.parametrize("extra, between, want", [
    # the host's untraced 35 ns - 2 ms after the sync; the operator at 2.0-2.1 ms splits the gap, its
    # rest (0.9 ms) is under MIN_STALL_NS
    ([("cpu_op", "aten::add", 2_000_000, 100_000)], False, [(35, 2_000_000, SYNC)]),
    # an .item(): its operator holds the sync, so the stall begins where it returns
    ([("cpu_op", "aten::item", 8, 30), ("cpu_op", "aten::add", 2_000_000, 100_000)], False,
     [(38, 2_000_000, f"aten::item ({SYNC})")]),
    # a data loader's range over the gap: the loader's time (fixes/loader.py), no stall
    ([("range", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 40, 2_990_000)], False, []),
    # the gap holds the step boundary: between steps
    ([], True, [(35, 3_000_000, BETWEEN_STEPS)]),
])
def test_stalls_of_hand_made_steps(extra, between, want):
    events, host = _step(extra, between)
    stalls = host_stalls(events, host)
    assert list(zip(stalls["start_ns"], stalls["end_ns"], stalls["after"])) == want


def test_a_stall_between_steps_delays_the_next_step_and_none_outside_the_steps_counts():
    events, host = _step([("sync", "cudaDeviceSynchronize", 2_500_000, 10)], between=True)
    stalls = host_stalls(events, host)  # it ends at the sync before step 1's range (2.9 ms): step 1's still
    assert list(zip(stalls["step"], stalls["end_ns"], stalls["after"])) == [(1, 2_500_000, BETWEEN_STEPS)]
    # the same gaps before the first step's range and after the last one's: the profiler's, not a step's
    early = host_rows([("sync", SYNC, 10, 25), ("step", "step 0", 3_000_000, 100_000)])
    late = host_rows([("sync", SYNC, 10, 25), ("step", "step 0", 0, 20)])
    assert not len(host_stalls(events.assign(step=0), early)) and not len(host_stalls(events.assign(step=0), late))


def test_a_gap_between_launches_with_no_sync_before_it_is_no_stall():
    events = kernel_rows([("a", 7, 20, 10, 0, 5), ("b", 7, 3_000_020, 10, 3_000_000, 5)])
    assert not len(host_stalls(events, host_rows([("step", "step 0", 0, 4_000_000)])))


# ---- replayed away --------------------------------------------------------------------------------


def test_no_host_stalls_launches_the_next_work_that_much_earlier():
    events, host = _step([("cpu_op", "aten::item", 8, 30), ("cpu_op", "aten::add", 2_000_000, 100_000)])
    w = whatif({0: rank_graph(events, host, 0)}, {0: None}, ["no-host-stalls"])
    # b's launch waited 2,999,965 ns after the sync returned (35); the stall took 1,999,962 of them
    # (38 to 2 ms): launch at 1,000,038, b 20 ns later for 10 ns; the window runs from a's launch (0)
    assert w.steps["step_ns"].tolist() == [3_000_030]
    assert w.scenarios.set_index("name").loc["no-host-stalls", "predicted_ns"] == 1_000_068


@pytest.mark.slow
def test_removing_one_ranks_stalls_shortens_the_others_wait_at_the_collective():
    graphs, epochs, profiles = _graphs(DATA / "stall-2cpu-torch")
    g = join(graphs, epochs)
    base = measured(g)
    p = base.copy()
    parse("no-host-stalls@1").apply(g, p)
    before, after = replay(g, base), replay(g, p)
    one = next(p for p in profiles if p.rank == 1)
    stalls = host_stalls(one.events, one.host)
    per_step_ns = stalls["stall_ns"].sum() / 6
    r0 = np.flatnonzero((g.rank == 0) & (g.kind == COLL))  # one all-reduce per step
    # rank 0's time in each collective (its wait for rank 1, then the transfer) shortens by rank 1's stall
    waited = (before.end_ns - before.start_ns)[r0] - (after.end_ns - after.start_ns)[r0]
    assert len(r0) == 6 and 0.5 * per_step_ns <= float(np.mean(waited)) <= 1.1 * per_step_ns, (waited, per_step_ns)
    w = whatif(graphs, epochs, ["no-host-stalls@1", "no-host-stalls@0"])
    saving = {f"{r.name}{r.args}": r.saving_ns for r in w.scenarios.itertuples() if r.name != "together"}
    assert 0.7 * per_step_ns <= saving["no-host-stalls@1"] <= 1.1 * per_step_ns
    assert saving["no-host-stalls@0"] < 0.25 * saving["no-host-stalls@1"]


@pytest.mark.parametrize("spec", ["no-host-stalls@x", "no-host-stalls:1", "no-host-stalls@"])
def test_bad_stall_scenarios_are_refused(spec):
    with pytest.raises(UsageError):
        parse(spec)


def test_a_trace_without_stalls_says_the_scenario_changes_nothing():
    graphs, epochs, _ = _graphs(DATA / "ddp-2gpu-late-torch")
    assert parse("no-host-stalls@1").label == "no-host-stalls@1"
    w = whatif(graphs, epochs, ["no-host-stalls"])
    assert any(n.code == "scenario_unmatched" and n.values["scenario"] == "no-host-stalls"
               and n.text.startswith("scenario no-host-stalls: nothing in these inputs matches it (host stalls")
               for n in w.notes)


# ---- named with their own fix ---------------------------------------------------------------------


@pytest.mark.parametrize("after, fix", [(BETWEEN_STEPS, "between"), (f"aten::item ({SYNC})", "read"),
                                        ("aten::_local_scalar_dense (hipStreamSynchronize)", "read"),
                                        ("cudaMemcpy", "read"), (SYNC, "sync"), ("cudaDeviceSynchronize", "sync"),
                                        ("aten::cross_entropy_loss", "host")])
def test_a_stalls_fix_is_named_by_what_precedes_it(after, fix):
    assert fix_of(after) == FIXES[fix]


def _findings(folder: Path):
    return tracelab.Session.open([str(folder)]).findings()


@pytest.mark.slow  # the 2-rank CPU capture's findings, ~2.5 s
def test_the_stalled_rank_is_told_its_stalls_fix_with_the_replays_saving():
    found = [f for f in _findings(DATA / "stall-2cpu-torch") if f.code == "host_stall"]
    assert len(found) == 1
    f = found[0]
    p = tracelab.load(DATA / "stall-2cpu-torch" / "rank1.pt.trace.json.gz")
    stall_ns = int(host_stalls(p.events, p.host)["stall_ns"].sum())
    assert f.values["rank"] == 1 and f.values["stall_ns"] == stall_ns
    assert f.values["after"] == "aten::cross_entropy_loss" and f.values["scenario"] == "no-host-stalls@1"
    assert FIXES["host"] in f.text and "CUDA graph" not in f.text


@pytest.mark.slow  # the 2-GPU stall capture's findings, ~4 s
def test_a_gpu_stall_gets_the_syncs_fix_and_the_graph_saving_keeps_it():
    found = _findings(DATA / "whatif-stall-2gpu-torch")
    stall = next(f for f in found if f.code == "host_stall")
    assert stall.values["rank"] == 1 and FIXES["sync"] in stall.text and stall.values["saving_ns"] > 0
    (graph,) = [f for f in found if f.code == "host_bound"]
    # a graph replays the kernels, not the Python between replays: its saving leaves the stalls (the
    # host_stall ranges of the raw JSON) in the step, and it names the stall's own fix beside its own
    with gzip.open(DATA / "whatif-stall-2gpu-torch" / "rank1.pt.trace.json.gz", "rt") as f:
        ranges_ns = sum(e["dur"] for e in json.load(f)["traceEvents"] if e.get("name") == "host_stall") * 1e3
    per_step_ns = ranges_ns / graph.values["steps"]
    assert per_step_ns > 1e6  # 10 ms every other step
    assert graph.values["scenario"] == "no-host-gaps" and "whatif" in graph.evidence
    assert graph.values["saving_ns"] <= graph.values["step_ns"] - per_step_ns
    assert FIXES["sync"] in graph.text and "stay under a graph" in graph.text


def test_no_stall_finding_without_stalls_and_the_graph_advice_keeps_its_replay():
    found = _findings(DATA / "train-1gpu-steps-torch")
    assert not [f for f in found if f.code == "host_stall"]
    assert [f for f in found if f.code == "host_bound" and f.evidence["whatif"]["scenario"] == "no-host-gaps"]


# ---- their own idle cause -------------------------------------------------------------------------


def test_idle_counts_a_stall_as_its_own_cause_and_the_causes_still_add_up():
    events, host = _step([("cpu_op", "aten::add", 2_000_000, 100_000)])
    steps = rank_idle(events, host).steps
    row = steps.iloc[0]
    # the gap 30 - 3,000,020: the sync (30-35) is sync idle; the stall 35 - 2 ms its own; the rest host
    assert row["idle_stall_ns"] == 2_000_000 - 35 and row["idle_sync_ns"] == 5
    assert row["idle_host_ns"] == 3_000_000 - 30 - 5 - (2_000_000 - 35)
    assert sum(row[c] for c in CAUSES) == row["idle_ns"] and row["bound"] == "host"


# ---- overlap-comm and the data it cannot see ------------------------------------------------------

AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def _layers(n: int, rank: int):
    """n layers of compute (100 ns) then an all-reduce (50 ns) on one stream, the next layer's
    compute right behind it; each launched early (launch at i, 1 ns)."""
    rows, t = [], 10
    for i in range(n):
        rows += [(f"mm{i}", 7, t, 100, 2 * i, 1), (AR, 7, t + 100, 50, 2 * i + 1, 1)]
        t += 150
    return kernel_rows(rows + [("head", 7, t, 100, 2 * n, 1)], rank=rank)


def _ddp(rank: int):
    """Backward compute, one gradient all-reduce, the optimizer behind it, all on one stream."""
    return kernel_rows([("bwd", 7, 10, 300, 0, 1), (AR, 7, 310, 200, 1, 1), ("adam", 7, 510, 100, 2, 1)], rank=rank)


# neither saves: a tensor-parallel layer's all-reduce is read by the next layer (said in a note), and
# DDP's one all-reduce is the step's last, read by the optimizer (tests/test_whatif_overlap.py: buckets)
@pytest.mark.parametrize("make, noted", [(lambda r: _layers(4, r), True), (_ddp, False)])
def test_overlap_comm_hides_neither_a_tensor_parallel_layers_nor_the_steps_last_all_reduce(make, noted):
    host = host_rows([("step", "step 0", 0, 10_000)])
    graphs = {r: rank_graph(make(r), host, r) for r in (0, 1)}
    w = whatif(graphs, {0: 0, 1: 0}, ["overlap-comm"])
    assert w.scenarios.iloc[0]["saving_ns"] == 0
    assert any(n.code == "overlap_dependent" and "tensor parallelism" in n.text for n in w.notes) == noted


@slow_after(1)
@pytest.mark.parametrize("name, dependent", [("decode-2gpu-torch", True), ("tp-2gpu-late-torch", True),
                                             ("ddp-2gpu-late-torch", False), ("ddp-2gpu-alternating-torch", False)])
def test_tensor_parallel_all_reduces_are_dependent_and_ddps_are_not(name, dependent):
    graphs, epochs, _ = _graphs(DATA / name)
    g = join(graphs, epochs)
    coll = g.kind == COLL
    assert coll.any() and bool(depend.dependent(g)[coll].all() if dependent else not depend.dependent(g)[coll].any())


def test_a_tensor_parallel_decode_gains_nothing_from_hiding_its_dependent_all_reduces():
    graphs, epochs, _ = _graphs(DATA / "decode-2gpu-torch")
    w = whatif(graphs, epochs, ["no-host-gaps", "overlap-comm"])
    got = {r.name: r.predicted_ns for r in w.scenarios.itertuples()}
    assert got["together"] == got["no-host-gaps"] and got["overlap-comm"] == w.scenarios["step_ns"].iloc[0]


# ---- the workload's unmarked stall ----------------------------------------------------------------


@pytest.mark.parametrize("unmarked", [False, True])
def test_an_unmarked_stall_sleeps_as_long_in_no_region(monkeypatch, unmarked):
    import argparse
    import contextlib
    import time

    import torch

    from tracelab.workloads import late as L
    from tracelab.workloads.options import late as late_options
    p = argparse.ArgumentParser()
    late_options.add_arguments(p)
    args = p.parse_args(["--host-stall-ms", "1:30"] + (["--host-stall-unmarked"] if unmarked else []))
    seen: list[str] = []
    monkeypatch.setattr(L.backends, "region", lambda name: seen.append(name) or contextlib.nullcontext())
    extra = L.extra(args, 1, torch.device("cpu"))
    t0 = time.perf_counter()
    extra(0), extra(1)
    assert time.perf_counter() - t0 >= 2 * 0.030
    assert seen == ([] if unmarked else ["host_stall", "host_stall"])
