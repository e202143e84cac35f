"""tracelab whatif (reports/whatif): the graph against the raw rows, the unchanged replay
against every capture, the scenarios against hand-computed answers, the command's output."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import tracelab
from tracelab.cli import app
from tracelab.reports.whatif.analyse import whatif
from tracelab.reports.whatif.nodes import rank_graph
from tracelab.reports.whatif.analyse import MAX_ERROR
from tracelab.reports.whatif.join import join
from tracelab.reports.whatif.nodes import COLL, GPU, LAUNCH, SYNC
from tracelab.reports.whatif.replay import measured, replay
from tracelab.reports.whatif.scenarios import GRAPH_GAP_NS

from helpers import kernel_rows, host_rows, run_cli, run_cli_output, strict_json, slow_after

DATA = Path(__file__).parent / "data"
def _runs(folder: Path) -> list[Path]:
    """The captures in `folder`: its repeats' folders (each with its run.json) where it holds
    repeats, else itself (its ranks' traces, with or without a run.json)."""
    return sorted(d for d in folder.iterdir() if (d / "run.json").exists()) or [folder]


TIMED = sorted(str(r.relative_to(DATA)) for d in DATA.iterdir() if d.is_dir() and not d.name.endswith(("-proton", "-none"))
               and d.name not in ("public", "proton-legacy") for r in _runs(d))
FAST = ["train-1gpu-steps-torch", "idle-sync-1gpu-nsys", "ddp-2gpu-late-torch", "gloo-2cpu-late"]


def _graphs(folder: Path):
    profiles = tracelab.load_many(folder)
    return ({p.rank: rank_graph(p.events, p.host, p.rank) for p in profiles},
            {p.rank: p.meta.trace_start_epoch_ns for p in profiles}, profiles)


def _reproduces(name: str) -> None:
    graphs, epochs, _ = _graphs(DATA / name)
    g = join(graphs, epochs)
    r = replay(g, measured(g))  # solved from nothing known: every edge must hold
    assert np.array_equal(r.start_ns, g.start_ns) and np.array_equal(r.end_ns, g.end_ns), name
    w = whatif(graphs, epochs, ["no-host-gaps"])
    claimed = w.steps["claimed"]
    assert (w.steps.loc[claimed, "error_frac"] <= MAX_ERROR).all()
    for step in w.steps.loc[~claimed, "step"]:  # a step that is not reproduced says so (named, or among "N more")
        assert any(n.code in ("edge_missing", "replay_misses_steps") and step in n.values["steps"]
                   and re.match(rf"steps? ([^:(]*, )?({step}\b[^:]*|[^:(]* and \d+ more \(\d+ of \d+\)): "
                                "(an edge is missing|the unchanged replay misses)", n.text)
                   for n in w.notes)


@slow_after(1)
@pytest.mark.parametrize("name", FAST)
def test_the_unchanged_replay_reproduces_the_measured_steps(name: str) -> None:
    _reproduces(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in TIMED if n not in FAST])
def test_the_unchanged_replay_reproduces_every_capture(name: str) -> None:
    _reproduces(name)


def test_the_graph_holds_every_gpu_row_launch_and_sync_of_the_trace() -> None:
    graphs, _, profiles = _graphs(DATA / "idle-sync-1gpu-nsys")
    g, p = graphs[0], profiles[0]
    gpu = p.events[p.events["kind"] != "cpu_op"]
    assert (np.isin(g.kind, (GPU, COLL))).sum() == len(gpu)
    calls = set(zip(gpu["launch_start_ns"].dropna().astype(int), gpu["launch_dur_ns"].dropna().astype(int)))
    syncs = set(zip(p.host.loc[p.host["kind"] == "sync", "start_ns"], p.host.loc[p.host["kind"] == "sync", "dur_ns"]))
    assert (np.isin(g.kind, (LAUNCH, SYNC))).sum() == len(calls | syncs)
    assert (g.kind == SYNC).sum() == len(syncs)


# ---- scenarios on hand-made steps: answers computed by hand ---------------------------------------


def _answer(events: pd.DataFrame, host: pd.DataFrame, *specs: str) -> dict[str, float]:
    w = whatif({0: rank_graph(events, host, 0)}, {0: None}, list(specs))
    assert w.steps["step_ns"].tolist() == w.steps["replayed_ns"].tolist()
    return {r.args if r.name == "together" else (f"{r.name}:{r.args}" if r.args else r.name): r.predicted_ns
            for r in w.scenarios.itertuples()}


def test_no_host_gaps_runs_the_kernels_back_to_back_after_the_first_launch() -> None:
    # three launches 100 ns apart (5 ns each), each kernel 20 ns after its launch, 10 ns long
    events = kernel_rows([("a", 7, 20, 10, 0, 5), ("b", 7, 120, 10, 100, 5), ("c", 7, 220, 10, 200, 5)])
    host = host_rows([("step", "step 0", 0, 1000)])
    # first launch keeps its 5 ns; the others take none; kernels start 20 ns after launch, queue behind each other
    assert _answer(events, host, "no-host-gaps") == {"no-host-gaps": 50}


def test_no_host_gaps_queues_kernels_a_graph_gap_apart_not_the_eager_queues() -> None:
    # launched early (0, 5, 10; 5 ns each), each queued 1000 ns behind the previous (eager's gap)
    events = kernel_rows([("a", 7, 100, 10, 0, 5), ("b", 7, 1110, 10, 5, 5), ("c", 7, 2120, 10, 10, 5)])
    host = host_rows([("step", "step 0", 0, 3000)])
    # the launch floor (5th percentile of launch-to-start) is 100 ns: a 100-110; b and c each
    # GRAPH_GAP_NS behind the previous: 366-376, 632-642
    assert GRAPH_GAP_NS == 256 and _answer(events, host, "no-host-gaps") == {"no-host-gaps": 642}


def test_a_graph_launchs_own_kernel_gap_is_the_traces() -> None:
    # one call launches two kernels 40 ns apart (a graph), then one eager kernel
    events = kernel_rows([("g1", 7, 100, 10, 0, 5), ("g2", 7, 150, 10, 0, 5), ("e", 7, 400, 10, 300, 5)])
    g = rank_graph(events, host_rows([("step", "step 0", 0, 1000)]), 0)
    assert g.graph_gap_ns == 40
    assert np.isnan(rank_graph(events.iloc[2:], None, 0).graph_gap_ns)  # no call launched several


def test_scale_and_remove_on_a_gpu_bound_stream() -> None:
    events = kernel_rows([("a", 7, 10, 100, 0, 1), ("b", 7, 110, 100, 1, 1), ("c", 7, 210, 100, 2, 1)])
    host = host_rows([("step", "step 0", 0, 1000)])
    out = _answer(events, host, "scale:^b$=2", "remove:^c$")
    assert out == {"scale:^b$=2": 410, "remove:^c$": 210, "scale:^b$=2+remove:^c$": 310}  # jointly, never summed


def test_a_sync_waits_for_its_kernel_and_returns_sooner_when_it_is_removed() -> None:
    events = kernel_rows([("big", 7, 10, 1000, 0, 5), ("small", 7, 1030, 10, 1020, 5)])
    host = host_rows([("sync", "cudaDeviceSynchronize", 10, 1005), ("step", "step 0", 0, 2000)])
    # the sync returns 5 ns after `big` ends; without it, 5 ns after its own start (15); launch at 20, kernel 30-40
    assert _answer(events, host, "remove:big") == {"remove:big": 40}


def test_a_host_stall_in_a_named_range_is_removed_with_it() -> None:
    events = kernel_rows([("a", 7, 20, 10, 0, 5), ("b", 7, 620, 10, 600, 5)])
    host = host_rows([("range", "host_stall", 100, 450), ("step", "step 0", 0, 1000)])
    # the host's 595 ns gap loses the 450 ns the range covers: launch at 150, kernel at 170-180
    assert _answer(events, host, "remove:host_stall") == {"remove:host_stall": 180}


def test_the_last_rank_to_arrive_sets_the_transfer_and_balance_removes_it() -> None:
    coll = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    r0 = kernel_rows([("w", 7, 10, 100, 0, 1), (coll, 7, 110, 60, 2, 1)], rank=0)
    r1 = kernel_rows([("w", 7, 10, 150, 0, 1), (coll, 7, 160, 10, 2, 1)], rank=1)  # arrives last, 50 ns later
    host = host_rows([("step", "step 0", 0, 1000)])
    for frame in (r0, r1):
        frame["msg_bytes"] = 1000.0
    w = whatif({0: rank_graph(r0, host, 0), 1: rank_graph(r1, host, 1)}, {0: 0, 1: 0}, ["balance", "busbw:100"])
    step = w.steps.iloc[0]
    assert step["step_ns"] == 170 and 1 in step["path_ranks"]  # rank 1's work, then the transfer
    assert (step["compute_ns"], step["comm_ns"], step["launch_ns"]) == (150, 10, 10)
    out = {r.name: r.predicted_ns for r in w.scenarios.itertuples()}
    # balance: rank 1's 150 ns of work down to rank 0's 100; busbw 100 GB/s: 1000 B x (2 x 1/2) / 100 = 10 ns
    assert out["balance"] == 120 and out["busbw"] == 170


def test_balance_leaves_a_rank_of_no_work_as_it_is() -> None:
    """A step where one rank's work takes no time (kernels of 0 ns): its factor is no number;
    balance leaves that rank as it was, without a numpy cast of NaN (a warning under -W error)."""
    import warnings

    coll = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    r0 = kernel_rows([("w", 7, 10, 0, 0, 1), (coll, 7, 20, 60, 2, 1)], rank=0)
    r1 = kernel_rows([("w", 7, 10, 150, 0, 1), (coll, 7, 160, 10, 2, 1)], rank=1)
    host = host_rows([("step", "step 0", 0, 1000)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w = whatif({0: rank_graph(r0, host, 0), 1: rank_graph(r1, host, 1)}, {0: 0, 1: 0}, ["balance"])
    out = {r.name: r.predicted_ns for r in w.scenarios.itertuples()}
    # the lower median of (0, 150) is 0: rank 1 scaled to 0 ns of work, rank 0 (no work) unchanged
    assert out["balance"] < w.steps.iloc[0]["step_ns"]


def test_removing_the_late_ranks_extra_work_saves_at_most_that_work() -> None:
    graphs, epochs, profiles = _graphs(DATA / "gloo-2cpu-late")
    w = whatif(graphs, epochs, ["remove:extra_work@1"])
    e = next(p.events for p in profiles if p.rank == 1)
    extra_per_step = e[e["scope"].str.contains("extra_work")]["dur_ns"].sum() / e["step"].nunique()
    saving = w.scenarios.set_index("name").loc["remove", "saving_ns"]
    assert 0.5 * extra_per_step < saving <= extra_per_step


# ---- the command ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_json_has_the_issues_shape() -> None:
    result = CliRunner().invoke(app, ["whatif", str(DATA / "ddp-2gpu-late-torch"), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = strict_json(result.stdout)
    step = doc["steps"][1]
    assert set(step) >= {"step", "step_ns", "replayed_ns", "path", "path_ranks", "top"}
    assert set(step["path"]) == {"compute_ns", "copy_ns", "comm_ns", "launch_ns", "host_ns", "sync_ns", "wait_ns", "other_ns"}
    assert sum(step["path"].values()) == pytest.approx(step["replayed_ns"], abs=1)
    assert sum(step["compute_by_class"].values()) == step["path"]["compute_ns"] > 0
    names = [s["name"] for s in doc["scenarios"]]
    assert set(names) == {"no-host-gaps", "roofline", "balance", "overlap-comm", "together"}
    savings = [s["saving_ns"] for s in doc["scenarios"]]
    assert savings == sorted(savings, reverse=True)


@pytest.mark.parametrize("spec", ["scale:x=oops", "remove:(", "busbw:0", "nothing", "scale:x=-1"])
def test_bad_scenarios_are_one_line(capsys, spec: str) -> None:
    status, lines = run_cli(capsys, "whatif", str(DATA / "gloo-2cpu-late"), "--scenario", spec)
    assert status == 2 and len(lines) == 1 and lines[0].startswith("tracelab: error: --scenario")


def test_broken_input_is_one_line(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "rank0.pt.trace.json"
    bad.write_text('{"traceEvents": [')
    status, lines = run_cli(capsys, "whatif", str(bad))
    assert status == 2 and len(lines) == 1 and str(bad) in lines[0]


def test_proton_inputs_say_they_have_no_timeline() -> None:
    proton = CliRunner().invoke(app, ["whatif", str(DATA / "decode-1gpu-proton"), "--format", "json"])
    assert proton.exit_code == 0
    notes = strict_json(proton.stdout)["notes"]
    assert [(n["code"], n.get("rank")) for n in notes] == [("no_timeline", 0), ("nothing_to_replay", None)]
    assert notes[0]["text"].startswith("rank 0: proton records no timeline")


# ---- the workloads' hooks: --host-stall-ms R:MS, --late-every N ----------------------------------


@pytest.mark.parametrize("argv, stalled, worked", [
    (["--host-stall-ms", "1:30"], [0, 1, 2, 3], []),
    (["--host-stall-ms", "1:30", "--late-every", "2"], [0, 2], []),
    (["--late", "rank1", "--late-work", "1", "--late-every", "3"], [], [0, 3]),
    (["--host-stall-ms", "0:30"], [], [])])
def test_the_late_rank_stalls_and_works_on_the_steps_asked(monkeypatch, argv, stalled, worked) -> None:
    import argparse
    import contextlib
    import time

    import torch

    from tracelab.workloads import late as L
    from tracelab.workloads.options import late as late_options
    p = argparse.ArgumentParser()
    late_options.add_arguments(p)
    args = p.parse_args(argv)
    late_options.check(args)
    seen: list[tuple[str, int]] = []
    step = [0]
    monkeypatch.setattr(L.backends, "region", lambda name: seen.append((name, step[0])) or contextlib.nullcontext())
    extra = L.extra(args, 1, torch.device("cpu"))
    t0 = time.perf_counter()
    for i in range(4):
        step[0] = i
        extra(i)
    assert [i for name, i in seen if name == "host_stall"] == stalled
    assert [i for name, i in seen if name == "extra_work"] == worked
    assert time.perf_counter() - t0 >= 0.030 * len(stalled)


@pytest.mark.parametrize("argv, option", [(["--host-stall-ms", "x:1"], "--host-stall-ms"),
                                          (["--host-stall-ms", "1"], "--host-stall-ms"),
                                          (["--host-stall-ms=-1:5"], "--host-stall-ms"),
                                          (["--late-every", "0"], "--late-every")])
def test_bad_late_options_are_refused(argv, option) -> None:
    import argparse

    from tracelab.core.errors import UsageError
    from tracelab.workloads.options import late as late_options
    p = argparse.ArgumentParser()
    late_options.add_arguments(p)
    with pytest.raises(UsageError) as e:
        late_options.check(p.parse_args(argv))
    assert e.value.where == option


def test_csv_of_a_run_beside_a_proton_capture_warns_nothing(capsys) -> None:
    status, out, err = run_cli_output(capsys, "whatif", str(DATA / "decode-1gpu-proton"), str(DATA / "decode-1gpu-torch"),
                                      "--format", "csv")
    assert status == 0 and "warning" not in err
    rows = out.strip().splitlines()
    assert rows[0].startswith("input,name,args") and all(r.startswith(str(DATA / "decode-1gpu-torch")) for r in rows[1:])


@pytest.mark.slow
def test_a_scenario_that_matches_nothing_says_so() -> None:
    graphs, epochs, _ = _graphs(DATA / "gloo-2cpu-late")
    w = whatif(graphs, epochs, ["remove:extra_work@0", "remove:extra_work@1"])  # only rank 1 does extra work
    assert [n.values for n in w.notes if n.code == "scenario_unmatched"] == [{"scenario": "remove:extra_work@0", "what": "names, kernels, scopes, host ranges"}]
    assert [n.text for n in w.notes if n.text.startswith("scenario ")] == [
        "scenario remove:extra_work@0: nothing in these inputs matches it (names, kernels, scopes, host ranges): "
        "it changes nothing"]
    assert w.scenarios.set_index("args").loc["extra_work@0", "saving_ns"] == 0


@pytest.mark.parametrize("name", FAST)
def test_the_bounds_lean_category_sums_equal_the_step_tables(name):
    """bound.rank_path_bounds sums the path per category itself (path.category_ns, issue 30): the
    same integers as analyse.path_steps' full step table, on every rank."""
    from tracelab.reports.whatif.analyse import path_steps
    from tracelab.reports.whatif.bound import bound_of, rank_path_bounds

    for p in tracelab.load_many(DATA / name):
        full = path_steps({0: rank_graph(p.events, p.host, 0)}, {0: None})
        lean = rank_path_bounds(p.events, p.host)
        assert len(full) and list(lean["step"]) == list(full["step"])
        cols = [c for c in lean.columns if c.endswith("_ns")]
        assert (lean[cols].to_numpy(dtype=np.int64) == full[cols].to_numpy(dtype=np.int64)).all()
        known = full.set_index("step").loc[lean["step"]]  # the steps whose path is known
        assert list(lean["path_bound"]) == list(bound_of(known.reset_index()))


@pytest.mark.parametrize("name", FAST + [pytest.param(n, marks=pytest.mark.slow)  # the rule again, under -m slow
                                         for n in ("idle-sync-1gpu-torch", "gloo-2cpu-alternating", "ddp-2gpu-alternating-nsys")])
def test_the_replay_by_stretches_equals_the_chain_rounds_and_the_node_by_node(name, monkeypatch):
    """The cold replay (replay.by_frontier: each chain solved a stretch at a time, each node once)
    gives every node the start and end that whole-chain rounds from the measured times give, and
    that replay.in_order (node by node, in Python) gives, under every default scenario."""
    from tracelab.reports.whatif import replay as rp
    from tracelab.reports.whatif.analyse import default_scenarios

    graphs, epochs, _ = _graphs(DATA / name)
    g = join(graphs, epochs)
    params = [measured(g)]
    for scenario in default_scenarios(g):
        params.append(measured(g))
        scenario.apply(g, params[-1])
    for p in params:
        stretches = replay(g, p)
        rounds = replay(g, p, cold=False)
        monkeypatch.setattr(rp, "WORK_PER_NODE", 0)  # after the first chain's solve, node by node
        by_node = replay(g, p, cold=False)
        monkeypatch.setattr(rp, "WORK_PER_NODE", 1 << 40)
        for other in (rounds, by_node):
            assert np.array_equal(stretches.start_ns, other.start_ns) and np.array_equal(stretches.end_ns, other.end_ns)


def test_work_outside_every_step_range_is_one_window_not_nothing(capsys):
    """HTA's triton_example: its ProfilerStep#1 lies on a thread that launched nothing, so its one
    kernel is in no step. whatif printed nothing at all (no table, no note); it now replays the
    trace as one window, as tracelab idle does: from the launch call's start to the kernel's end."""
    import gzip

    from helpers import shared_trace

    path = shared_trace("hta/triton_example/triton_example.json.gz")
    with gzip.open(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    kernel, = (e for e in events if e.get("cat") == "kernel")
    launch, = (e for e in events if e.get("name") == "cuLaunchKernel")
    step, = (e for e in events if str(e.get("name")).startswith("ProfilerStep"))
    assert step["tid"] != launch["tid"]
    window_ns = round((kernel["ts"] + kernel["dur"] - launch["ts"]) * 1e3)
    status, out, err = run_cli_output(capsys, "whatif", str(path), "--format", "json")
    assert status == 0, err
    doc = json.loads(out)
    assert [s["step"] for s in doc["steps"]] == [None]
    assert doc["steps"][0]["step_ns"] == pytest.approx(window_ns, abs=2)
    assert doc["steps"][0]["path"]["compute_ns"] == pytest.approx(kernel["dur"] * 1e3, abs=2)
    status, out, err = run_cli_output(capsys, "whatif", str(path))
    assert status == 0 and "whole trace" in out, out


@pytest.mark.slow
def test_balance_removes_the_injected_straggler_to_its_twins_step():
    """tp-2gpu-late-torch is tp-2gpu-equal-torch with 10.7 ms of extra GEMMs per step on rank 1
    (their READMEs): 'balance' (every rank's work at the lower median rank's) must predict about
    the equal run's measured step. Its collectives, one chain each, kept their chain gap (the
    previous step's instance ended ~10.9 ms before) after a wait edge explained their start, so
    nothing moved them: balance predicted 0.00 ms of saving beside 'rank 1 is the straggler'."""
    def doc(name):
        result = CliRunner().invoke(app, ["whatif", str(DATA / name), "--format", "json"])
        assert result.exit_code == 0, result.output
        return {s["name"]: s for s in json.loads(result.stdout)["scenarios"]}

    equal_step_ns = doc("tp-2gpu-equal-torch")["balance"]["step_ns"]
    late = doc("tp-2gpu-late-torch")["balance"]
    assert late["step_ns"] > 10 * equal_step_ns  # the straggler's 10.7 ms per step
    assert late["predicted_ns"] == pytest.approx(equal_step_ns, rel=0.15)


@pytest.mark.slow
def test_an_op_that_waited_long_after_its_launch_returned_is_unexplained_not_launch_latency():
    """A launch-bound op that started more than UNEXPLAINED_NS after its launch call returned, with no
    other stream's op to explain it, waited on something the trace does not show: that wait is
    unexplained (the step claims no saving), not launch latency a faster host would remove."""
    from tracelab.reports.whatif.edges import UNEXPLAINED_NS, rank_edges

    base = tracelab.load(DATA / "idle-1gpu-small-torch" / "rank0.pt.trace.json.gz")
    ev = base.events.sort_values("start_ns").reset_index(drop=True)
    k = len(ev) // 2  # one kernel in the middle: it and all after it start 5 ms later, its launch call as it was
    wait_ns = 5_000_000
    ev.loc[k:, "start_ns"] = ev.loc[k:, "start_ns"] + wait_ns
    later = ev.loc[k + 1:, "launch_start_ns"].notna()
    ev.loc[k + 1:, "launch_start_ns"] = ev.loc[k + 1:, "launch_start_ns"].where(~later, ev.loc[k + 1:, "launch_start_ns"] + wait_ns)
    g = rank_graph(ev, base.host, 0)
    ed = rank_edges(g)
    node = int(np.flatnonzero((g.kind == GPU) & (g.start_ns == ev.loc[k, "start_ns"]))[0])
    assert ed.launch_bound[node]
    returned = g.end_ns[g.launch[node]]
    assert ed.unexplained_ns[node] == g.start_ns[node] - returned - UNEXPLAINED_NS > wait_ns - UNEXPLAINED_NS - 1
    w = whatif({0: g}, {0: None})
    step = int(ev.loc[k, "step"])
    assert not w.steps.set_index("step").loc[step, "claimed"]


@pytest.mark.slow
def test_a_cpu_only_path_says_its_compute_is_cpu_operators():
    """gloo-2cpu-late has no kernel (its ranks' JSON hold CPU ops only): whatif's 'compute' column is
    its CPU operators' time, and the notes say so; a GPU capture's notes do not."""
    import gzip

    with gzip.open(DATA / "gloo-2cpu-late" / "rank0.pt.trace.json.gz", "rt") as f:
        assert not [e for e in json.load(f)["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    result = CliRunner().invoke(app, ["whatif", str(DATA / "gloo-2cpu-late"), "--format", "json"])
    assert result.exit_code == 0 and any("compute is CPU operators' time" in n["text"] for n in json.loads(result.stdout)["notes"])
    result = CliRunner().invoke(app, ["whatif", str(DATA / "decode-1gpu-torch"), "--format", "json"])
    assert not any(n["code"] == "cpu_only_path" for n in json.loads(result.stdout)["notes"])
