"""tracelab whatif's must-show checks on real GPU runs (issue 27; tests/data/whatif-*): each
prediction against the workload's own figures, read straight from its files (the step timed
without a profiler under a CUDA graph; the per-step step_ms of the steps without the cause),
and lower bounds summed straight from the trace JSON."""
from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import numpy as np
import pytest

import tracelab
from tracelab.reports.roofs import trace_device
from tracelab.reports.whatif.analyse import whatif
from tracelab.reports.whatif.nodes import rank_graph
from tracelab.reports.whatif.scenarios import GRAPH_GAP_NS

DATA = Path(__file__).parent / "data"
pytestmark = pytest.mark.slow


def _whatif(folder: Path, scenario: str):
    profiles = tracelab.load_many(folder)
    graphs = {p.rank: rank_graph(p.events, p.host, p.rank, trace_device(p.meta)) for p in profiles}
    w = whatif(graphs, {p.rank: p.meta.trace_start_epoch_ns for p in profiles}, [scenario])
    steps = w.steps.assign(predicted=w.per_step.iloc[:, 0].to_numpy())
    return steps[steps["claimed"]]


def _kernels(path: Path) -> list[dict]:
    trace = json.loads(gzip.open(path).read())
    return [e for e in trace["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]


def _step_ms(path: Path) -> list[float]:
    return json.loads(path.read_text())["rows"][0]["step_ms"]


def test_no_host_gaps_against_a_whole_step_cuda_graph():
    folder = DATA / "whatif-step-1gpu-torch"
    rows = [json.loads(line) for line in (folder / "graph_step.jsonl").read_text().splitlines()]
    graph_ms = next(r["step_ms_median"] for r in rows if r["mode"] == "cuda_graph")
    steps = _whatif(folder, "no-host-gaps")
    predicted_ms = steps["predicted"].mean() / 1e6
    assert abs(predicted_ms / graph_ms - 1) <= 0.25, (predicted_ms, graph_ms)
    kernels = _kernels(folder / "rank0.pt.trace.json.gz")
    busy_ms = sum(e["dur"] for e in kernels) / 1e3 / len(steps)  # us -> ms, per step
    per_step = len(kernels) / len(steps)
    # the GPU's own busy time, plus at most a graph's gap between kernels and a few launches' cost
    assert busy_ms <= predicted_ms <= busy_ms + per_step * GRAPH_GAP_NS / 1e6 + 0.05, (busy_ms, predicted_ms)


def _interleaved(name: str, scope: str, scenario: str):
    """(predicted saving, measured saving) in ms, medians over the steps with the cause (even,
    but the first) against those without it (odd), from the workload's own step_ms."""
    folder = DATA / name
    ms = _step_ms(folder / "rank1.results.json")
    with_ms = statistics.median(ms[2::2])
    without_ms = statistics.median(ms[1::2])
    steps = _whatif(folder, scenario)
    late = steps[(steps["step"] % 2 == 0) & (steps["step"] > 0)]
    saving_ms = float((late["step_ns"] - late["predicted"]).median()) / 1e6
    return saving_ms, with_ms - without_ms


STALL_SCENARIOS = ("remove:host_stall@1", "no-host-stalls@1")  # by its range's name, and found by its untraced time


@pytest.mark.parametrize("scenario", STALL_SCENARIOS)
def test_removing_a_host_stall_saves_what_the_steps_without_it_show(scenario):
    saving_ms, measured_ms = _interleaved("whatif-stall-2gpu-torch", "host_stall", scenario)
    # 9.7 ms predicted against 12.3 ms (-21%): the steps without the stall are a low stand-in
    # (each follows a stall step, where rank 0 got a head start; see the test below); a saving
    # near 0 or above what removing it saved would be wrong
    assert measured_ms > 5 and 0.5 * measured_ms <= saving_ms <= measured_ms, (saving_ms, measured_ms)


def _own_ranges_ms(folder: Path, scope: str) -> dict[int, float]:
    """Per step, straight from the trace JSON: the slowest rank's `step N` range less its `scope`
    ranges inside it (ms): the host-bound job without a host stall, in that very step."""
    out: dict[int, float] = {}
    for path in sorted(folder.glob("rank*.pt.trace.json.gz")):
        ev = [e for e in json.loads(gzip.open(path).read())["traceEvents"]
              if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
        cut = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"] == scope]
        for e in ev:
            if e["name"].startswith("step ") and e["name"][5:].isdigit():
                a, b = e["ts"], e["ts"] + e["dur"]
                inside = sum(max(0, min(b, y) - max(a, x)) for x, y in cut)
                n = int(e["name"][5:])
                out[n] = max(out.get(n, 0.0), (e["dur"] - inside) / 1e3)  # us -> ms
    return out


@pytest.mark.parametrize("scenario", STALL_SCENARIOS)
def test_removing_a_host_stall_predicts_each_stall_step_without_it(scenario):
    """Per step with the stall, the prediction against that step's own reference (not the
    neighbouring steps, which the stall shortened): within 3% in each. The stall is on rank 1;
    rank 0 waits for it at the gradient all-reduce, so each step is rank 0's wait shortened too."""
    folder = DATA / "whatif-stall-2gpu-torch"
    steps = _whatif(folder, scenario)
    own = _own_ranges_ms(folder, "host_stall")
    stalled = steps[(steps["step"] % 2 == 0) & (steps["step"] > 0)]
    assert len(stalled) >= 4
    for r in stalled.itertuples():
        assert abs(r.predicted / 1e6 / own[int(r.step)] - 1) <= 0.03, (r.step, r.predicted / 1e6, own[int(r.step)])
        assert own[int(r.step)] < r.step_ns / 1e6 - 2  # the stall did cost this step time
    after = steps[steps["step"] % 2 == 1]  # the steps after a stall, measured: shorter than the job without it
    assert (after["step_ns"].to_numpy() < after["predicted"].to_numpy() + 1).all()


def test_removing_extra_gpu_work_of_a_host_bound_rank_saves_near_nothing():
    folder = DATA / "whatif-late-2gpu-torch"
    saving_ms, measured_ms = _interleaved("whatif-late-2gpu-torch", "extra_work", "remove:extra_work@1")
    trace = json.loads(gzip.open(folder / "rank1.pt.trace.json.gz").read())["traceEvents"]
    ranges = [(e["ts"], e["ts"] + e["dur"]) for e in trace if e.get("name") == "extra_work" and e.get("ph") == "X"]
    assert ranges
    # the 4096x4096 products: the only kernels over 1 ms (the tiny model's take microseconds)
    extra_ms = sum(e["dur"] for e in trace if e.get("cat") == "kernel" and e["dur"] > 1000) / 1e3 / len(ranges)
    assert extra_ms > 5  # real GPU work removed per step...
    assert abs(saving_ms) < 0.1 * extra_ms and abs(measured_ms) < 0.1 * extra_ms, (saving_ms, measured_ms, extra_ms)


def test_the_error_bands_the_answer_states_hold_on_these_captures():
    """bands.py states each scenario's measured error beside its prediction: recomputed here from
    the captures, each error lies inside the band stated (to half a percent)."""
    from tracelab.reports.whatif.bands import BANDS

    folder = DATA / "whatif-step-1gpu-torch"
    rows = [json.loads(line) for line in (folder / "graph_step.jsonl").read_text().splitlines()]
    graph_ms = next(r["step_ms_median"] for r in rows if r["mode"] == "cuda_graph")
    err = _whatif(folder, "no-host-gaps")["predicted"].mean() / 1e6 / graph_ms - 1
    b = BANDS["no-host-gaps"]
    assert b.low_frac - 0.005 <= err <= b.high_frac + 0.005, err
    folder = DATA / "whatif-stall-2gpu-torch"
    own = _own_ranges_ms(folder, "host_stall")
    for scenario in STALL_SCENARIOS:
        steps = _whatif(folder, scenario)
        stalled = steps[(steps["step"] % 2 == 0) & (steps["step"] > 0)]
        errs = [r.predicted / 1e6 / own[int(r.step)] - 1 for r in stalled.itertuples()]
        b = BANDS[scenario.partition(":")[0].partition("@")[0]]
        assert b.low_frac - 0.005 <= min(errs) and max(errs) <= b.high_frac + 0.005, (scenario, errs)
