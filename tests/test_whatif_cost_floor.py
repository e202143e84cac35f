"""Where the device paces the step without the profiler, the phases timed without it set the host's
pace (regions.cost_floor): checked against counts by brute force, hand-made graphs, and a real
H100 pair (an fp32 step whose TF32 twin was timed without the profiler), read straight from the
trace JSON and run.json."""
from __future__ import annotations

import gzip
import json
import shutil
import statistics
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from tracelab.reports.whatif.profiler_cost import COSTS, Config
from tracelab.reports.whatif.regions import COUNT_COLUMNS, OUTSIDE, cost_floor, region_counts

from helpers import run_cli_output, stake_ns, strict_json

DATA = Path(__file__).parent / "data"
BEFORE = DATA / "tf32-1gpu-medium-torch"
AFTERS = [DATA / "tf32-1gpu-medium-tf32-none", DATA / "tf32-1gpu-medium-tf32-2-none"]
GPU = Config("torch", True, True, "gpu")


def test_a_regions_counts_are_those_of_the_nodes_starting_inside_it() -> None:
    rng = np.random.default_rng(7)
    starts = np.sort(rng.integers(0, 10_000, 300))
    rng.shuffle(starts)  # region_counts must not assume the nodes in order
    counts = rng.integers(0, 5, (300, 3)).astype(np.float64)
    spans = pd.DataFrame({"step": [1, 1, 1, 2, 2], "region": ["forward", "backward", "forward", "forward", "backward"],
                          "start_ns": [0, 1_500, 3_000, 5_000, 7_777], "end_ns": [1_000, 2_999, 3_500, 7_000, 9_999]})
    sync = rng.random(300) < 0.1
    got = region_counts(spans, starts, counts, sync)
    for (step, region), rows in spans.groupby(["step", "region"]):
        inside = np.zeros(len(starts), bool)
        for a, b in zip(rows["start_ns"], rows["end_ns"]):
            inside |= (starts >= a) & (starts < b)
        row = got[(got["step"] == step) & (got["region"] == region)].iloc[0]
        assert row["dur_ns"] == (rows["end_ns"] - rows["start_ns"]).sum()
        assert row[COUNT_COLUMNS].to_numpy(np.float64).tolist() == counts[inside].sum(axis=0).tolist()
        assert row["syncs"] == sync[inside].sum()
    assert len(got) == 4 and region_counts(spans.iloc[:0], starts, counts).empty


def _rank(rows: list[tuple], config: Config | None = GPU) -> SimpleNamespace:
    regions = pd.DataFrame(rows, columns=["step", "region", "dur_ns", *COUNT_COLUMNS])
    return SimpleNamespace(regions=regions, profiler=config)


def _costs(config):
    return COSTS.get(config.key) if config is not None else None


def test_the_floor_is_the_phase_that_needs_the_most_cost_off() -> None:
    c = COSTS[GPU.key]
    fwd = [(s, "forward", ns, 1000, 200, 0) for s, ns in ((1, 30e6), (2, 34e6), (3, 50e6))]  # median 34 ms
    bwd = [(s, "backward", 80e6, 2000, 400, 0) for s in (1, 2, 3)]
    out = [(s, OUTSIDE, 9e6, 10, 0, 0) for s in (1, 2, 3)]
    g = SimpleNamespace(ranks={0: _rank(fwd + bwd + out), 1: _rank(fwd + bwd)})
    measured = {0: (100e6, {"forward": 10e6, "backward": 75e6, OUTSIDE: 1.0}), 1: (100e6, {"forward": 20e6})}
    floor = cost_floor(g, measured, _costs)
    want = (34e6 - 10e6) / (1000 * c.per_op_ns + 200 * c.per_launch_ns)
    assert (floor.rank, floor.region) == (0, "forward") and floor.scale == pytest.approx(want)
    assert floor.profiled_ns == 34e6 and floor.unprofiled_ns == 10e6
    # the backward needs less ((80 - 75) / its cost); a rank measured slower than its trace sets nothing
    assert (80e6 - 75e6) / (2000 * c.per_op_ns + 400 * c.per_launch_ns) < want
    assert cost_floor(g, {0: (1.0, {"forward": 40e6, "backward": 90e6})}, _costs) is None


def test_a_phase_that_waited_for_the_device_in_the_trace_sets_nothing() -> None:
    rows = [(1, "forward", 30e6, 1000, 200, 0), (2, "forward", 30e6, 1000, 200, 0),
            (1, "optimizer", 50e6, 10, 10, 0), (2, "optimizer", 50e6, 10, 10, 0)]
    waited = pd.DataFrame(rows, columns=["step", "region", "dur_ns", *COUNT_COLUMNS]).assign(syncs=[0, 0, 1, 0])
    g = SimpleNamespace(ranks={0: SimpleNamespace(regions=waited, profiler=GPU)})
    floor = cost_floor(g, {0: (1.0, {"forward": 20e6, "optimizer": 1e6})}, _costs)
    c = COSTS[GPU.key]
    # the optimizer's .item() wait would ask for (50 - 1) ms over 10 ops and 10 launches: ~600x the fit
    assert floor.region == "forward" and floor.scale == pytest.approx(10e6 / (1000 * c.per_op_ns + 200 * c.per_launch_ns))
    assert cost_floor(g, {0: (1.0, {"optimizer": 1e6})}, _costs) is None


@pytest.mark.parametrize("measured", [None, {}, {5: (1.0, {"forward": 1e6})}, {0: (1.0, {OUTSIDE: 1.0})},
                                      {0: (1.0, {"forward": 0})}, {0: (1.0, {"optimizer": 1e6})}])
def test_no_floor_without_a_timed_phase_of_the_trace(measured) -> None:
    g = SimpleNamespace(ranks={0: _rank([(1, "forward", 30e6, 1000, 200, 0), (1, OUTSIDE, 1e6, 5, 0, 0)])})
    assert cost_floor(g, measured, _costs) is None


def test_no_floor_where_the_profiler_or_the_counts_are_not_known() -> None:
    measured = {0: (1.0, {"forward": 1e6})}
    unknown = SimpleNamespace(ranks={0: _rank([(1, "forward", 30e6, 1000, 200, 0)], config=None)})
    cpu_regions = SimpleNamespace(ranks={0: SimpleNamespace(
        regions=pd.DataFrame({"step": [1], "region": ["forward"], "dur_ns": [30e6]}), profiler=GPU)})
    assert cost_floor(unknown, measured, _costs) is None and cost_floor(cpu_regions, measured, _costs) is None


def _raw_forward() -> tuple[float, float, float]:
    """From the trace JSON: the median over steps of the outermost `forward` range's time, and of the
    CPU operators and kernel launches that start inside it."""
    events = json.loads(gzip.open(BEFORE / "rank0.pt.trace.json.gz").read())["traceEvents"]
    ranges = [e for e in events if e.get("cat") == "user_annotation" and e["name"] == "forward"]
    ops = np.sort([e["ts"] for e in events if e.get("cat") == "cpu_op"])
    launched = {e["args"]["correlation"] for e in events if e.get("cat") == "kernel"}
    launches = np.sort([e["ts"] for e in events if e.get("cat") == "cuda_runtime"
                        and e.get("args", {}).get("correlation") in launched])

    def inside(at: np.ndarray, e: dict) -> int:
        return int(np.searchsorted(at, e["ts"] + e["dur"]) - np.searchsorted(at, e["ts"]))
    return (statistics.median(e["dur"] * 1e3 for e in ranges), statistics.median(inside(ops, e) for e in ranges),
            statistics.median(inside(launches, e) for e in ranges))


def _results(folder: Path) -> dict:
    return json.loads((folder / "run.json").read_text())["results"]["0"]["rows"][0]


def _tf32_scenario() -> str:
    from tracelab.reports.whatif.scenarios import PRODUCTS

    factor = 0.16851531659423  # the products' TF32 over fp32 time, microbenchmarked on the same H100 (README)
    return f"scale:{PRODUCTS}={factor}"


@pytest.mark.slow
def test_an_h100_step_the_device_paces_predicts_its_tf32_twin(capsys, tmp_path) -> None:
    """The fp32 step is device-paced without the profiler (140 ms) and host-bound under it (184 ms):
    the fitted cost per event leaves the host at ~118 ms, so TF32's shorter products met that host.
    The forward timed without the profiler (20 ms, 55 ms in the trace) bounds the host's pace, and
    the prediction lands within 15% of the TF32 step measured (the two runs' median)."""
    status, out, _ = run_cli_output(capsys, "whatif", str(BEFORE), "--scenario", _tf32_scenario(), "--format", "json")
    doc = strict_json(out)
    floor = doc["unprofiled"]["cost_floor"]
    profiled_ns, ops, launches = _raw_forward()
    cost = COSTS[GPU.key]
    assert status == 0 and floor["region"] == "forward"
    assert floor["profiled_ns"] == pytest.approx(profiled_ns, rel=1e-6)
    assert floor["unprofiled_ns"] == _results(BEFORE)["unprofiled_region_ns"]["forward"]
    assert floor["cost_ns"] == pytest.approx(ops * cost.per_op_ns + launches * cost.per_launch_ns, rel=0.05)
    assert doc["unprofiled"]["cost_scale"] == pytest.approx((floor["profiled_ns"] - floor["unprofiled_ns"])
                                                            / floor["cost_ns"])
    tf32_ns = statistics.median(_results(a)["unprofiled_step_ns"] for a in AFTERS)
    [row] = doc["scenarios"]
    assert abs(row["predicted_unprofiled_ns"] / tf32_ns - 1) < 0.15
    # the same trace without its phases' times: the fitted cost alone, ~2x the step measured
    bare = tmp_path / BEFORE.name
    shutil.copytree(BEFORE, bare)
    run = json.loads((bare / "run.json").read_text())
    run["results"]["0"]["rows"][0].pop("unprofiled_region_ns")
    (bare / "run.json").write_text(json.dumps(run))
    (bare / "rank0.results.json").unlink()
    status, out, _ = run_cli_output(capsys, "whatif", str(bare), "--scenario", _tf32_scenario(), "--format", "json")
    doc = strict_json(out)
    assert status == 0 and doc["unprofiled"]["cost_scale"] == 1 and doc["unprofiled"]["cost_floor"] is None
    assert doc["scenarios"][0]["predicted_unprofiled_ns"] > 1.5 * tf32_ns


@pytest.mark.slow
def test_findings_rank_by_the_saving_without_the_profiler(capsys) -> None:
    """The device paces this step without the profiler and the host under it: under the profiler
    the host's gaps would save the most, without it the products' time does. Findings rank by the
    latter, each by its own scenario's saving over its steps as whatif predicts it."""
    from tracelab.ingest.session import Session

    found = Session.open([str(BEFORE)]).findings()
    staked = [f for f in found if "whatif" in f.evidence]
    assert len(staked) >= 2
    for f in staked:
        scenario = f.evidence["whatif"]["scenario"]
        status, out, _ = run_cli_output(capsys, "whatif", str(BEFORE), "--scenario", scenario, "--format", "json")
        [row] = [r for r in strict_json(out)["scenarios"] if r["name"] != "together"]
        assert status == 0 and f.at_stake_ns == stake_ns(row)
    assert [f.at_stake_ns for f in staked] == sorted((f.at_stake_ns for f in staked), reverse=True)
    host = next(f for f in staked if f.evidence["whatif"]["scenario"] == "no-host-gaps")
    first = staked[0]
    assert first.evidence["whatif"]["saving_ns_per_step"] < host.evidence["whatif"]["saving_ns_per_step"]
    assert "TF32" in first.text and first.at_stake_ns > host.at_stake_ns
    # host-bound is said of the trace: without the profiler the host's gaps save under half their share
    v = host.values
    assert v["unprofiled_saving_ns"] / v["unprofiled_step_ns"] < 0.5 * v["saving_share"]
    assert "'s steps are host-bound under the profiler (" in host.text


def test_a_step_host_bound_without_the_profiler_too_is_said_host_bound() -> None:
    from tracelab.ingest.session import Session

    [host] = [f for f in Session.open([str(DATA / "idle-1gpu-small-torch")]).findings() if f.code == "host_bound"]
    v = host.values
    assert v["unprofiled_saving_ns"] / v["unprofiled_step_ns"] >= 0.5 * v["saving_share"]
    assert "'s steps are host-bound (" in host.text and "under the profiler (" not in host.text
