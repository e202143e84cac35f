"""The profiler's own cost (reports/whatif/profiler_cost.py): events counted per node and per
step against the rows, the deflate on hand-made graphs (answers computed by hand), the
configuration a trace says it was profiled with, the run's measured unprofiled step, the
fit of benchmarks/profiler_cost.py, and the prediction against a real pair."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracelab
from tracelab.core import classify, schema
from tracelab.reports.whatif import analyse
from tracelab.reports.unprofiled import measured_unprofiled_ns
from tracelab.reports.whatif import profiler_cost as pc
from tracelab.reports.whatif.analyse import whatif
from tracelab.reports.whatif.nodes import rank_graph, step_counts
from tracelab.reports.whatif.render import unprofiled_line

from helpers import host_rows, kernel_rows, run_cli_output, strict_json

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
_spec = importlib.util.spec_from_file_location("profiler_cost_bench", ROOT / "benchmarks" / "profiler_cost.py")
BENCH = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(BENCH)

GPU_KEY = pc.Config("torch", True, False, "gpu").key
CPU_KEY = pc.Config("torch", True, False, "cpu").key


def _with_costs(monkeypatch, key: str, op_ns: float, launch_ns: float, range_ns: float) -> None:
    monkeypatch.setitem(pc.COSTS, key, pc.Costs(op_ns, launch_ns, range_ns, "hand-made", None))


def _profiled(graph, device: str):
    graph.profiler = pc.Config("torch", True, False, device)
    return graph


# ---- the deflate on hand-made steps ---------------------------------------------------------------

def _gpu_step():
    # three launch calls at 0, 100, 200 (10 ns each), each kernel 20 ns after its launch, 10 ns long;
    # CPU operators recorded at 2 (inside the first call), 40 and 60 (before the second), 150 (before
    # the third); the step range from 0 (inside the first call)
    events = kernel_rows([("a", 7, 20, 10, 0, 10), ("b", 7, 120, 10, 100, 10), ("c", 7, 220, 10, 200, 10)])
    host = host_rows([("step", "step 0", 0, 1000), ("cpu_op", "aten::x", 2, 3), ("cpu_op", "aten::y", 40, 5),
                      ("cpu_op", "aten::z", 60, 5), ("cpu_op", "aten::w", 150, 5)])
    return events, host


def test_events_go_to_the_node_that_holds_them_or_the_next() -> None:
    events, host = _gpu_step()
    g = rank_graph(events, host, 0)
    host_nodes = np.flatnonzero(g.kind != 3)
    # per launch call: (ops, launches, ranges) before it and inside it
    assert g.profiled_before[host_nodes].tolist() == [[0, 0, 0], [2, 0, 0], [1, 0, 0]]
    assert g.profiled_inside[host_nodes].tolist() == [[1, 1, 1], [0, 1, 0], [0, 1, 0]]
    assert not g.profiled_before[g.kind == 3].any() and not g.profiled_inside[g.kind == 3].any()


@pytest.mark.parametrize("seed", range(4))
def test_each_time_counts_once_where_a_plain_loop_puts_it(seed: int) -> None:
    """_count_into against a loop over the times: inside the node (by start) that holds it, else
    before the next node, nowhere after the last node's end; nodes in any order, some never hit."""
    rng = np.random.default_rng(seed)
    n = 40
    start = np.sort(rng.integers(0, 10_000, n)).astype(np.int64)
    end = start + rng.integers(0, 300, n)
    nodes = rng.permutation(np.flatnonzero(rng.random(n) < 0.7))
    nodes = nodes[np.argsort(start[nodes], kind="stable")]
    at = rng.integers(-100, 11_000, 500).astype(np.int64)
    before, inside = np.zeros(n), np.zeros(n)
    pc._count_into(at, nodes, start, end, before, inside)
    want_before, want_inside = np.zeros(n), np.zeros(n)
    for t in at.tolist():
        held = [k for k in nodes.tolist() if start[k] <= t]  # the latest node begun by t
        if held and t < end[held[-1]]:
            want_inside[held[-1]] += 1
        elif (later := [k for k in nodes.tolist() if start[k] > t]):
            want_before[later[0]] += 1
    assert before.tolist() == want_before.tolist() and inside.tolist() == want_inside.tolist()
    assert before.sum() + inside.sum() <= len(at)


def test_deflate_takes_each_events_cost_off_its_gap_or_its_call(monkeypatch) -> None:
    _with_costs(monkeypatch, GPU_KEY, op_ns=20, launch_ns=4, range_ns=1)
    events, host = _gpu_step()
    w = whatif({0: _profiled(rank_graph(events, host, 0), "gpu")}, {0: None}, ["no-host-gaps"])
    # call 1: 20 + 4 + 1 inside its 10 ns: 0 ns (the rest has no gap before it to come off); call 2:
    # its 90 ns gap less 2 x 20, its 10 ns less 4:
    # 50-56; call 3: 90 - 20 after it: 126-132; kernels 20 ns after their calls: 20-30, 70-80, 146-156
    assert w.steps["step_ns"].tolist() == [230] and w.unprofiled == {
        "unprofiled_step_ns": 156, "unprofiled_source": "estimated", "unprofiled_run": None,
        "replayed_unprofiled_ns": 156, "costs": {0: "hand-made"}, "error_band": None}
    # no host gaps, without the profiler: every call at 0 (the first 0 ns long), kernels back to back from 20
    row = w.scenarios.iloc[0]
    assert row["predicted_ns"] == 50 and row["predicted_unprofiled_ns"] == pytest.approx(50)


# the costs _gpu_step's records put before the third launch call (its kernel, 20 ns after it, ends
# the step): every op, launch and range recorded up to that call but its own launch, each costing
# the hand-made 20, 4 and 1 ns: the step shrinks by this much per unit of cost scale, while no
# call's own time is used up (scale <= 10 / 25: the first call's 25 ns of records in its 10 ns)
_OPS_BEFORE_THIRD, _LAUNCHES_BEFORE_THIRD, _RANGES_BEFORE_THIRD = 4, 2, 1
_COST_PER_SCALE = 20 * _OPS_BEFORE_THIRD + 4 * _LAUNCHES_BEFORE_THIRD + 1 * _RANGES_BEFORE_THIRD


def test_a_measured_unprofiled_step_calibrates_the_cost_per_event(monkeypatch) -> None:
    _with_costs(monkeypatch, GPU_KEY, op_ns=20, launch_ns=4, range_ns=1)
    events, host = _gpu_step()
    profiled = int((events["start_ns"] + events["dur_ns"]).max())  # the step: 0 to the last kernel's end
    measured = 200
    w = whatif({0: _profiled(rank_graph(events, host, 0), "gpu")}, {0: None}, ["no-host-gaps"], unprofiled_ns=measured)
    assert w.unprofiled["unprofiled_source"] == "measured" and w.unprofiled["unprofiled_step_ns"] == measured
    want = (profiled - measured) / _COST_PER_SCALE
    assert want <= 10 / 25 and w.unprofiled["cost_scale"] == pytest.approx(want, rel=0.05)
    replayed = profiled - round(_COST_PER_SCALE * w.unprofiled["cost_scale"])
    assert abs(replayed - measured) <= analyse.SCALE_TOL * measured + 1
    assert "paces" not in unprofiled_line(w.unprofiled)
    # the scenario's replay less the calibrated cost: every call at 0, kernels back to back from 20
    kernels_ns = int(events["dur_ns"].sum())
    assert w.scenarios.iloc[0]["predicted_unprofiled_ns"] == pytest.approx(measured * (20 + kernels_ns) / replayed,
                                                                           rel=1e-3)


@pytest.mark.parametrize("measured, scale", [(300, 0.0), (10, analyse.MAX_COST_SCALE)])
def test_a_step_the_cost_cannot_explain_keeps_the_anchor(monkeypatch, measured: int, scale: float) -> None:
    """Slower without the profiler than the profiled replay: no cost comes off, the scenario scaled
    by the measured step; faster than the replay with every record's time taken: the most cost."""
    _with_costs(monkeypatch, GPU_KEY, op_ns=20, launch_ns=4, range_ns=1)
    events, host = _gpu_step()
    profiled = int((events["start_ns"] + events["dur_ns"]).max())
    w = whatif({0: _profiled(rank_graph(events, host, 0), "gpu")}, {0: None}, ["no-host-gaps"], unprofiled_ns=measured)
    assert w.unprofiled["cost_scale"] == scale
    nhg = 20 + int(events["dur_ns"].sum())
    floor = nhg  # every call and gap at 0: the kernels alone, 20 ns after the first call
    base = profiled if scale == 0 else floor
    assert w.scenarios.iloc[0]["predicted_unprofiled_ns"] == pytest.approx(measured * nhg / base)


def test_a_whole_step_cuda_graph_is_its_profiled_replay(monkeypatch) -> None:
    """cuda-graph takes the host off the path: the profiler's host cost does not reach its step; a
    run measured slower without the profiler than with it scales no-host-gaps (the anchor), not it."""
    _with_costs(monkeypatch, GPU_KEY, op_ns=20, launch_ns=4, range_ns=1)
    events, host = _gpu_step()
    w = whatif({0: _profiled(rank_graph(events, host, 0), "gpu")}, {0: None}, ["cuda-graph", "no-host-gaps"],
               unprofiled_ns=300)
    rows = w.scenarios.set_index("name")
    assert rows.loc["cuda-graph", "predicted_ns"] == rows.loc["no-host-gaps", "predicted_ns"]
    assert rows.loc["cuda-graph", "predicted_unprofiled_ns"] == rows.loc["cuda-graph", "predicted_ns"]
    profiled = int((events["start_ns"] + events["dur_ns"]).max())
    assert rows.loc["no-host-gaps", "predicted_unprofiled_ns"] == pytest.approx(300 * rows.loc["no-host-gaps",
                                                                                               "predicted_ns"] / profiled)


def test_a_cost_beyond_the_time_leaves_no_negative_gap_or_call(monkeypatch) -> None:
    _with_costs(monkeypatch, GPU_KEY, op_ns=1000, launch_ns=1000, range_ns=0)
    events, host = _gpu_step()
    w = whatif({0: _profiled(rank_graph(events, host, 0), "gpu")}, {0: None}, ["no-host-gaps"])
    # every call and gap at 0: each kernel 20 ns after its call, queued behind the one before: 20-30-40-50
    assert w.unprofiled["replayed_unprofiled_ns"] == 50


def _cpu_rows(rows: list[tuple]) -> pd.DataFrame:
    """Top-level CPU operators of one rank on thread 1: (name, start, dur), all in step 0."""
    name, start, dur = zip(*rows)
    return schema.validate(classify.classified(schema.coerce({
        "rank": 0, "source": "torch", "kind": "cpu_op", "name": list(name), "device": -1, "stream": 1, "start_ns": list(start),
        "dur_ns": list(dur), "step": 0}, n_rows=len(rows), spec=schema.PARSED)))


def test_a_cpu_operator_loses_its_own_and_its_childrens_records_never_below_zero(monkeypatch) -> None:
    # operator a (0-100) holds two nested operators (at 10 and 50); b (150-200) none; c (210-215) none
    events = _cpu_rows([("aten::a", 0, 100), ("aten::b", 150, 50), ("aten::c", 210, 5)])
    host = host_rows([("step", "step 0", 0, 1000), ("cpu_op", "aten::a", 0, 100), ("cpu_op", "aten::n1", 10, 20),
                      ("cpu_op", "aten::n2", 50, 20), ("cpu_op", "aten::b", 150, 50), ("cpu_op", "aten::c", 210, 5)])
    _with_costs(monkeypatch, CPU_KEY, op_ns=10, launch_ns=0, range_ns=0)
    w = whatif({0: _profiled(rank_graph(events, host, 0), "cpu")}, {0: None}, ["no-host-gaps"])
    # a: 100 - 3 x 10 = 70; b: 50 after it, 50 - 10 long: 120-160; c: its 10 ns record takes its
    # 5 ns and 5 of the 10 ns gap before it: 165
    assert w.steps["step_ns"].tolist() == [215] and w.unprofiled["replayed_unprofiled_ns"] == 165
    # no host gaps and no profiler: 70 + 40 + 0
    assert w.scenarios.iloc[0]["predicted_unprofiled_ns"] == pytest.approx(110)


def test_a_cpu_only_trace_scales_its_profiled_replay_by_the_measured_step(monkeypatch) -> None:
    """CPU operators are the host's own work: a measured unprofiled step scales the scenario's
    profiled replay (no cost per event calibrated)."""
    events = _cpu_rows([("aten::a", 0, 100), ("aten::b", 150, 50), ("aten::c", 210, 5)])
    host = host_rows([("step", "step 0", 0, 1000), ("cpu_op", "aten::a", 0, 100), ("cpu_op", "aten::b", 150, 50),
                      ("cpu_op", "aten::c", 210, 5)])
    _with_costs(monkeypatch, CPU_KEY, op_ns=10, launch_ns=0, range_ns=0)
    measured = 150
    w = whatif({0: _profiled(rank_graph(events, host, 0), "cpu")}, {0: None}, ["no-host-gaps"], unprofiled_ns=measured)
    profiled = int((events["start_ns"] + events["dur_ns"]).max())
    no_gaps = int(events["dur_ns"].sum())  # the operators back to back
    assert w.unprofiled["cost_scale"] == 0.0
    assert w.scenarios.iloc[0]["predicted_unprofiled_ns"] == pytest.approx(measured * no_gaps / profiled)


def test_the_table_leads_with_the_users_step_prediction_and_saving(monkeypatch) -> None:
    """Where the step without the profiler is known, the table's first figures are the user's: that
    step, the prediction and the saving without the profiler; the profiled replay's after them."""
    from rich.console import Console

    from tracelab.reports.whatif.render import to_json, to_table

    events = _cpu_rows([("aten::a", 0, 100), ("aten::b", 150, 50), ("aten::c", 210, 5)])
    host = host_rows([("step", "step 0", 0, 1000), ("cpu_op", "aten::a", 0, 100), ("cpu_op", "aten::b", 150, 50),
                      ("cpu_op", "aten::c", 210, 5)])
    _with_costs(monkeypatch, CPU_KEY, op_ns=10, launch_ns=0, range_ns=0)
    measured = 150_000_000  # 150 ms
    w = whatif({0: _profiled(rank_graph(events, host, 0), "cpu")}, {0: None}, ["no-host-gaps"], unprofiled_ns=measured)
    profiled = int((events["start_ns"] + events["dur_ns"]).max())
    predicted = measured * int(events["dur_ns"].sum()) / profiled  # the operators back to back, scaled
    row = json.loads(to_json([("x", w)]))["scenarios"][0]
    assert row["saving_unprofiled_ns"] == pytest.approx(measured - predicted)
    assert row["saving_unprofiled_frac"] == pytest.approx(1 - predicted / measured)
    console = Console(width=250, record=True)
    console.print(to_table([("x", w)]))
    lines = console.export_text().splitlines()
    head = next(line for line in lines if "scenario" in line)
    assert head.index("step") < head.index("predicted") < head.index("profiled step")
    cells = [c.strip() for c in next(line for line in lines if line.strip().startswith("no-host-gaps")).split("│")]
    assert [float(c) for c in cells[2:5]] == pytest.approx([measured / 1e6, predicted / 1e6, (measured - predicted) / 1e6],
                                                           abs=1e-3)
    assert float(cells[6]) == pytest.approx(profiled / 1e6, abs=1e-3)


def test_without_known_costs_nothing_is_predicted_without_the_profiler(monkeypatch) -> None:
    monkeypatch.setattr(pc, "COSTS", {})
    events, host = _gpu_step()
    g = rank_graph(events, host, 0)
    g.profiler = pc.Config("nsys", None, None, "gpu")
    w = whatif({0: g}, {0: None}, ["no-host-gaps"])
    assert w.unprofiled["unprofiled_step_ns"] is None and w.unprofiled["unprofiled_source"] is None
    assert w.scenarios.iloc[0]["predicted_unprofiled_ns"] is None


def test_an_unfitted_configuration_takes_the_nearest_fit_without_its_band(monkeypatch) -> None:
    band = pc.Band(-0.1, 0.1, "hand-made", "pairs", "unprofiled_step_ns")
    monkeypatch.setattr(pc, "COSTS", {GPU_KEY: pc.Costs(1.0, 2.0, 3.0, "gpu pairs", band),
                                      CPU_KEY: pc.Costs(10.0, 0.0, 30.0, "cpu pairs", band)})
    assert pc.costs_for(pc.Config("torch", True, False, "gpu")) == (pc.COSTS[GPU_KEY], "gpu pairs")
    other, said = pc.costs_for(pc.Config("torch", False, False, "gpu"))  # same profiler and device, other options
    assert (other.per_op_ns, other.band) == (1.0, None) and GPU_KEY in said
    monkeypatch.delitem(pc.COSTS, GPU_KEY)
    twin, said = pc.costs_for(pc.Config("torch", True, False, "gpu"))  # only the CPU fit: no launch cost
    assert (twin.per_op_ns, twin.per_launch_ns, twin.per_range_ns, twin.band) == (10.0, 0.0, 30.0, None)
    assert said.startswith("estimated on CPU pairs only")
    assert pc.costs_for(pc.Config("nsys", None, None, "gpu"))[0] is None


# ---- what the trace and the run folder say --------------------------------------------------------

@pytest.mark.parametrize("folder, key", [
    ("train-1gpu-steps-torch", "torch noshapes nomemory gpu"),  # written without Input Dims
    ("train-1gpu-steps-nsys", "nsys gpu"),
    ("train-1gpu-steps-proton", "proton gpu"),
    ("train-cpu-pair-torch", "torch shapes memory cpu"),
])
def test_the_trace_says_how_it_was_profiled(folder: str, key: str) -> None:
    p = tracelab.load_many(DATA / folder)[0]
    assert pc.config_of(p.meta, p.memory, bool((p.events["kind"] != "cpu_op").any())).key == key


@pytest.mark.parametrize("folder", ["roofline-1gpu-torch", "decode-1gpu-torch"])  # shapes recorded, and not
def test_kineto_meta_says_whether_shapes_were_recorded(folder: str) -> None:
    path = DATA / folder / "rank0.pt.trace.json.gz"
    raw = json.loads(__import__("gzip").open(path).read())
    dims = any("Input Dims" in e.get("args", {}) for e in raw["traceEvents"] if e.get("cat") == "cpu_op")
    assert tracelab.load(path).meta.extras["record_shapes"] is dims


def test_step_counts_are_the_rows_of_each_step() -> None:
    p = tracelab.load(DATA / "train-1gpu-steps-torch/rank0.pt.trace.json.gz")
    counts = step_counts(p.events, p.host, p.meta).set_index("step")
    steps = p.host[p.host["kind"] == "step"]
    for _, s in steps.iterrows():
        k = int(str(s["name"]).split()[-1])
        inside = p.host[(p.host["start_ns"] >= s["start_ns"]) & (p.host["start_ns"] < s["start_ns"] + s["dur_ns"])]
        launches = int(((p.events["step"] == k) & p.events["launch_start_ns"].notna()).sum())  # GPU ops launched
        assert counts.loc[k, "cpu_ops"] == (inside["kind"] == "cpu_op").sum()
        assert counts.loc[k, "ranges"] == inside["kind"].isin(["range", "step"]).sum()
        assert counts.loc[k, "launches"] == launches


@pytest.mark.parametrize("results, want", [
    ({"0": {"workload": "decode", "unprofiled_step_ns": 5e6}, "1": {"workload": "decode", "unprofiled_step_ns": 6e6}},
     6e6),  # the slowest rank
    ({"0": {"workload": "train", "rows": [{"unprofiled_step_ns": 7e6}]}}, 7e6),
    ({"0": {"workload": "train", "rows": [{"unprofiled_step_ns": 7e6}, {"unprofiled_step_ns": 9e6}]}}, None),  # a sweep
    ({"0": {"workload": "decode", "unprofiled_step_ns": None}}, None),  # --no-unprofiled
    ({}, None),
])
def test_the_runs_measured_unprofiled_step(results: dict, want) -> None:
    assert measured_unprofiled_ns({"results": results}) == want


# ---- the fit (benchmarks/profiler_cost.py) ---------------------------------------------------------

def test_the_fit_recovers_costs_it_was_made_from() -> None:
    counts = np.array([[1000, 0, 3], [2000, 0, 3], [1000, 0, 40], [500, 0, 10]], dtype=float)
    cost = counts @ np.array([12_000.0, 0.0, 30_000.0])
    rows = pd.DataFrame({"folder": "f", "job": list("abcd"), "rank": 0, "config": CPU_KEY,
                         "unprofiled_step_ns": 1e8, "profiled_step_ns": 1e8 + cost,
                         "cpu_ops": counts[:, 0], "launches": counts[:, 1], "ranges": counts[:, 2]})
    fit = BENCH.fit(rows)[CPU_KEY]
    assert fit["per_op_ns"] == pytest.approx(12_000) and fit["per_range_ns"] == pytest.approx(30_000)
    assert fit["per_launch_ns"] is None  # never recorded here: not fitted
    assert all(abs(p["loo_error_frac"]) < 1e-9 for p in fit["pairs"])


def test_nnls_keeps_costs_non_negative() -> None:
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    coef, _ = BENCH.nnls(a, np.array([2.0, -1.0, 1.0]))
    assert (coef >= 0).all() and coef[1] == 0 and coef[0] == pytest.approx(1.5)


def test_a_run_folder_is_a_pair_with_its_counts() -> None:
    rows = BENCH.pair_rows(DATA / "train-cpu-pair-torch")
    run = json.loads((DATA / "train-cpu-pair-torch/run.json").read_text())
    record = run["results"]["0"]["rows"][0]
    assert len(rows) == 1 and rows[0]["unprofiled_step_ns"] == record["unprofiled_step_ns"]
    assert rows[0]["profiled_step_ns"] == record["profiled_step_ns"] and rows[0]["cpu_ops"] > 0
    assert BENCH.pair_rows(DATA / "train-1gpu-steps-none") == []  # no profiler: no pair


def test_a_run_before_step_times_pairs_with_its_none_twin() -> None:
    folders = [DATA / "train-1gpu-steps-torch", DATA / "train-1gpu-steps-none", DATA / "train-1gpu-steps-nsys"]
    twins = BENCH.none_twins(folders)
    step_ms = {f.name: json.loads((f / "run.json").read_text())["results"]["0"]["rows"][0]["step_ms"] for f in folders}
    for folder in (DATA / "train-1gpu-steps-torch", DATA / "train-1gpu-steps-nsys"):
        (row,) = BENCH.pair_rows(folder, twins)
        assert row["unprofiled_step_ns"] == pytest.approx(1e6 * np.median(step_ms["train-1gpu-steps-none"]))
        assert row["profiled_step_ns"] == pytest.approx(1e6 * np.median(step_ms[folder.name]))
        assert row["launches"] == 304  # the trainer's kernels per step, each its own launch call
    assert BENCH.pair_rows(DATA / "train-1gpu-steps-torch", {}) == []  # no twin: no pair


# ---- real pairs --------------------------------------------------------------------------------------

def _whatif_of(folder: Path, **kw):
    from tracelab.core.schema import RankData
    from tracelab.reports.whatif.nodes import shared_graph

    ps = tracelab.load_many(folder)
    graphs = {p.rank: shared_graph(RankData(p.events, p.meta, p.host, p.memory)) for p in ps}
    return whatif(graphs, {p.rank: p.meta.trace_start_epoch_ns for p in ps}, ["no-host-gaps"], **kw)


@pytest.mark.parametrize("profiled", ["train-1gpu-steps-torch", "train-1gpu-steps-nsys"])
def test_the_replay_without_the_profiler_meets_the_run_under_none(profiled: str) -> None:
    """H100 pairs not in the fits (another day's runs of the same job under torch, nsys and none):
    the replay less the profiler's cost lands within the fit's band of the median step under none
    (8.86 ms; 11.33 and 12.92 ms profiled), and nearer it than the profiled step."""
    none_ms = json.loads((DATA / "train-1gpu-steps-none/run.json").read_text())["results"]["0"]["rows"][0]["step_ms"]
    prof_ms = json.loads((DATA / profiled / "run.json").read_text())["results"]["0"]["rows"][0]["step_ms"]
    none_ns, prof_ns = 1e6 * np.median(none_ms), 1e6 * np.median(prof_ms)
    w = _whatif_of(DATA / profiled)
    predicted, band = w.unprofiled["replayed_unprofiled_ns"], w.unprofiled["error_band"]
    assert w.unprofiled["unprofiled_source"] == "estimated" and prof_ns > 1.2 * none_ns
    assert band.low_frac <= (predicted - none_ns) / none_ns <= band.high_frac
    assert abs(predicted - none_ns) < abs(prof_ns - none_ns)
    # the kernels take 0.85 ms a step: no host gaps, without the profiler, leaves them and little else
    assert 0.85e6 < w.scenarios.iloc[0]["predicted_unprofiled_ns"] < w.scenarios.iloc[0]["predicted_ns"]


@pytest.mark.slow
def test_whatif_json_says_the_runs_measured_unprofiled_step(capsys) -> None:
    status, out, _ = run_cli_output(capsys, "whatif", str(DATA / "train-cpu-pair-torch"), "--format", "json")
    doc = strict_json(out)
    record = json.loads((DATA / "train-cpu-pair-torch/run.json").read_text())["results"]["0"]["rows"][0]
    assert status == 0 and doc["unprofiled_source"] == "measured"
    assert doc["unprofiled_step_ns"] == record["unprofiled_step_ns"]
    assert doc["unprofiled"]["replayed_unprofiled_ns"] < record["profiled_step_ns"]  # the cost comes off
    row = next(r for r in doc["scenarios"] if r["name"] == "no-host-gaps")
    assert 0 < row["predicted_unprofiled_ns"] < doc["unprofiled_step_ns"]
    # a CPU-only trace: the measured step times the scenario's share of the profiled replay (the medians
    # of the claimed steps: the scenario's per step from the same replay through the library)
    claimed = [s["claimed"] for s in doc["steps"]]
    replayed = np.array([s["replayed_ns"] for s in doc["steps"]])[claimed]
    scenario = _whatif_of(DATA / "train-cpu-pair-torch").per_step["no-host-gaps"].to_numpy()[claimed]
    assert doc["unprofiled"]["cost_scale"] == 0
    assert row["predicted_unprofiled_ns"] == pytest.approx(
        record["unprofiled_step_ns"] * np.median(scenario) / np.median(replayed), rel=1e-9)


# the fused / math SDPA time at the runs' shapes, measured beside them (benchmarks/change_factors.py)
SDPA_FACTOR = 0.4362


@pytest.mark.slow
def test_a_gpu_pair_calibrates_its_cost_and_predicts_the_change_made(capsys) -> None:
    """An H100 run under torch.profiler that timed its steps without it: the cost per event is scaled
    until the replay less it meets that step (where the host, not the device, paces it), and the
    attention change's prediction lands nearer the step measured after the change (no profiler)
    than the profiled replay's."""
    before, after = DATA / "sdpa-math-1gpu-torch", DATA / "sdpa-fused-1gpu-none"
    status, out, _ = run_cli_output(capsys, "whatif", str(before), "--scenario", f"scale:sdpa={SDPA_FACTOR}",
                                    "--format", "json")
    doc = strict_json(out)
    measured = json.loads((before / "run.json").read_text())["results"]["0"]["rows"][0]["unprofiled_step_ns"]
    after_ns = json.loads((after / "run.json").read_text())["results"]["0"]["rows"][0]["unprofiled_step_ns"]
    u = doc["unprofiled"]
    assert status == 0 and doc["unprofiled_step_ns"] == measured and 0 < u["cost_scale"] < analyse.MAX_COST_SCALE
    # the replay less the calibrated cost meets the step, or the device paces it at the fitted cost, below it
    met = abs(u["calibrated_unprofiled_ns"] - measured) <= analyse.SCALE_TOL * measured
    assert met or (u["cost_scale"] == 1.0 and u["calibrated_unprofiled_ns"] < measured)
    row = doc["scenarios"][0]
    error = abs(row["predicted_unprofiled_ns"] / after_ns - 1)
    assert error < abs(row["predicted_ns"] / after_ns - 1) and error < 0.15


@pytest.mark.slow
def test_a_bare_trace_is_estimated_and_says_from_what(capsys) -> None:
    status, out, _ = run_cli_output(capsys, "whatif", str(DATA / "train-cpu-pair-torch/rank0.pt.trace.json.gz"))
    assert status == 0 and "step without the profiler:" in out and "estimated" in out and "train-cpu-pair-torch" in out


# ---- the host's steady pace, and a step the device paces at the fitted cost ------------------------

def _repeated_steps(n_steps: int, burst: int | None, odd: int | None):
    """`n_steps` steps of 1000 ns, each two launch calls (10 ns) at 0 and 100 ns into it, 400 ns
    later in step `burst` (a burst of the host's), a third call at 300 ns in step `odd`; each
    kernel 20 ns after its call, 10 ns long. (events, host, launch starts by step)."""
    launches = {k: [1000 * k, 1000 * k + 100 + (400 if k == burst else 0)] + ([1000 * k + 300] if k == odd else [])
                for k in range(n_steps)}
    rows = [(f"k{k}_{i}", 7, t + 20, 10, t, 10) for k, ts in launches.items() for i, t in enumerate(ts)]
    events = kernel_rows(rows)
    events["step"] = [k for k, ts in launches.items() for _ in ts]
    host = host_rows([("step", f"step {k}", 1000 * k, 1000) for k in range(n_steps)])
    return events, host, launches


@pytest.mark.parametrize("n_steps, burst, odd", [(5, 2, None), (6, 2, 4), (2, 1, None), (5, None, None)])
def test_steady_host_takes_each_call_at_its_median_over_the_steps_that_repeat(n_steps: int, burst, odd) -> None:
    """A call's gap and time at their medians over the steps with the most common sequence of
    calls; a step of other calls keeps its own, and fewer than MIN_STEADY_STEPS steps keep theirs."""
    from tracelab.reports.whatif.join import join
    from tracelab.reports.whatif.replay import measured

    events, host, launches = _repeated_steps(n_steps, burst, odd)
    g = join({0: rank_graph(events, host, 0)}, {0: None})
    p = measured(g)
    gap_before = p.gap_ns.copy()
    pc.steady_host(g, p)
    calls = np.flatnonzero(g.kind != 3)
    calls = calls[np.argsort(g.start_ns[calls])]
    starts = np.concatenate([launches[k] for k in sorted(launches)])
    assert g.start_ns[calls].tolist() == starts.tolist()
    gaps = np.r_[gap_before[calls[0]], starts[1:] - (starts[:-1] + 10)]  # after the call before, 10 ns long
    by_step = [k for k in sorted(launches) for _ in launches[k]]
    same = [k for k in sorted(launches) if len(launches[k]) == 2]
    for i, node in enumerate(calls):
        k = by_step[i]
        pos = launches[k].index(starts[i])
        steady = k in same and len(same) >= pc.MIN_STEADY_STEPS
        want = np.median([gaps[by_step.index(j) + pos] for j in same]) if steady else gaps[i]
        assert p.gap_ns[node] == int(want) and p.dur_ns[node] == 10
    assert (p.gap_ns[g.kind == 3] == gap_before[g.kind == 3]).all()  # kernels keep theirs


def test_a_step_the_device_paces_at_the_fitted_cost_keeps_it(monkeypatch) -> None:
    """Three launch calls 300 ns apart, 10 CPU operators (20 ns each) in each gap, kernels of 250
    ns: profiled, the host paces the step (the last kernel ends at 870 ns); at the fitted cost the
    calls come 100 ns apart and the kernels run back to back (770 ns), which no more cost taken off
    shortens. Measured at 820 ns without the profiler, the cost stays the fitted one (a smaller one
    would make the host pace the step again), and removing the middle kernel saves its time in the
    prediction, anchored on the measured step."""
    _with_costs(monkeypatch, GPU_KEY, op_ns=20, launch_ns=0, range_ns=0)
    starts, kernel_ns = [0, 300, 600], 250
    events = kernel_rows([(n, 7, t + 20 + (50 if n == "b" else 0), kernel_ns, t, 10) for n, t in zip("abc", starts)])
    ops = [("cpu_op", f"aten::op{i}", t + 20 + 25 * i, 5) for t in starts[:2] for i in range(10)]
    host = host_rows([("step", "step 0", 0, 1000), *ops])
    profiled = int((events["start_ns"] + events["dur_ns"]).max())
    back_to_back = 20 + 3 * kernel_ns
    assert profiled == 870 and back_to_back == 770
    measured_ns = 820
    w = whatif({0: _profiled(rank_graph(events, host, 0), "gpu")}, {0: None}, ["remove:^b$"], unprofiled_ns=measured_ns)
    assert w.unprofiled["cost_scale"] == 1.0 and w.unprofiled["calibrated_unprofiled_ns"] == back_to_back
    assert "the device paces it" in unprofiled_line(w.unprofiled)
    # removed, a and c back to back from 20 ns (c's call now at 200 ns, +20 ns: before a ends)
    assert w.scenarios.iloc[0]["predicted_unprofiled_ns"] == pytest.approx(measured_ns * (20 + 2 * kernel_ns)
                                                                           / back_to_back)
