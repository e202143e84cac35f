"""Each phase's own slowdown under the profiler (reports/whatif/regions.py), checked against the
per-phase sums read straight from the trace JSON and run.json, and the workload's RegionClock."""
from __future__ import annotations

import functools
import gzip
import json
import shutil
import statistics
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import tracelab
from tracelab.core.schema import RankData
from tracelab.reports.whatif.analyse import prepare, whatif
from tracelab.reports.whatif.kinds import HOST_OP
from tracelab.reports.whatif.nodes import shared_graph
from tracelab.reports.unprofiled import measured_regions, measured_step
from tracelab.reports.whatif.regions import OUTSIDE, RankPace, node_regions, pace, paces_of, rank_pace, region_spans
from tracelab.run import backends
from helpers import slow_after

DATA = Path(__file__).parent / "data"
RUN = DATA / "train-2cpu-late-regions"
STALL, STALL_GONE = DATA / "stall-ddp-16cpu-torch", DATA / "stall-ddp-16cpu-after-none"


@functools.lru_cache(maxsize=None)
def _raw_regions(rank: int) -> tuple[dict[int, dict[str, int]], dict[int, int]]:
    """Per step, the outermost user ranges inside the step range on its thread, summed by name, and
    the step's duration (ns), straight from the trace JSON (Kineto's us with ns decimals)."""
    events = json.loads(gzip.open(RUN / f"rank{rank}.pt.trace.json.gz").read())["traceEvents"]
    ranges = [e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    out, steps = {}, {}
    for s in [e for e in ranges if e["name"].startswith("step ")]:
        n, t0, t1 = int(s["name"].split()[1]), s["ts"], s["ts"] + s["dur"]
        steps[n] = round(s["dur"] * 1e3)
        inside = [e for e in ranges if e is not s and e["tid"] == s["tid"] and t0 <= e["ts"] and e["ts"] + e["dur"] <= t1]
        top = [e for e in inside if not any(o is not e and o["ts"] <= e["ts"] and e["ts"] + e["dur"] <= o["ts"] + o["dur"]
                                            for o in inside)]
        out[n] = {}
        for e in top:
            out[n][e["name"]] = out[n].get(e["name"], 0) + round(e["dur"] * 1e3)
    return out, steps


def _row(rank: int) -> dict:
    return json.loads((RUN / "run.json").read_text())["results"][str(rank)]["rows"][0]


@functools.lru_cache(maxsize=2)
def _graphs(folder: Path = RUN):
    """The ranks' graphs and epochs, read once (the tests only read them)."""
    ps = tracelab.load_many(folder)
    return {p.rank: shared_graph(RankData(p.events, p.meta, p.host, p.memory)) for p in ps}, \
        {p.rank: p.meta.trace_start_epoch_ns for p in ps}


@slow_after(1)
@pytest.mark.parametrize("rank", [0, 1])
def test_each_steps_phases_are_its_outermost_ranges_on_its_thread(rank: int) -> None:
    raw, _ = _raw_regions(rank)
    got = _graphs()[0][rank].regions
    assert {(int(s), r): int(d) for s, r, d in got.itertuples(index=False)} == pytest.approx(
        {(s, r): d for s, phases in raw.items() for r, d in phases.items()}, abs=1e3)  # Kineto's ns rounding
    assert "extra_work" in set(got["region"]) if rank == 1 else "extra_work" not in set(got["region"])


@pytest.mark.parametrize("rank", [0, 1])
def test_a_phases_factor_is_its_time_without_the_profiler_over_its_median_in_the_trace(rank: int) -> None:
    raw, steps = _raw_regions(rank)
    row = _row(rank)
    graphs, _ = _graphs()
    rg = graphs[rank]
    step_ns = pd.Series((rg.step_ranges["end_ns"] - rg.step_ranges["start_ns"]).to_numpy(np.float64),
                        index=rg.step_ranges["step"].to_numpy())
    rp = rank_pace(rg.regions, step_ns, row["unprofiled_step_ns"], row["unprofiled_region_ns"])
    for name, unprofiled in row["unprofiled_region_ns"].items():
        if name == OUTSIDE:
            outside = statistics.median(steps[s] - sum(raw[s].values()) for s in steps)
            assert rp.regions[name] == pytest.approx(unprofiled / outside, rel=1e-3)
        else:
            assert rp.regions[name] == pytest.approx(unprofiled / statistics.median(raw[s][name] for s in raw), rel=1e-3)
    assert rp.step == pytest.approx(row["unprofiled_step_ns"] / statistics.median(steps.values()), rel=1e-3)


def test_each_operator_takes_its_phases_factor_on_its_time_and_gap() -> None:
    graphs, epochs = _graphs()
    b = prepare(graphs, epochs)
    paces = paces_of(b.g, measured_regions(json.loads((RUN / "run.json").read_text())))
    assert set(paces) == {0, 1}
    p = b.base.copy()
    factor = pace(b.g, p, paces)
    host = b.g.kind != 4  # kinds.COLL: collectives keep their time
    assert (factor[~host] == 1).all() and (p.dur_ns[~host] == b.base.dur_ns[~host]).all()
    extra = host & (b.g.rank == 1) & np.array([str(s).startswith("extra_work") for s in b.g.scope])
    want = paces[1].regions["extra_work"]
    assert extra.any() and np.allclose(p.dur_ns[extra], b.base.dur_ns[extra] * want, atol=1)
    plain = host & np.array([str(s) == "" for s in b.g.scope])
    assert np.allclose(factor[plain], [paces[r].of(OUTSIDE) for r in b.g.rank[plain]])


def test_a_gap_takes_the_factor_of_the_phase_it_lies_in() -> None:
    """A gap between two operators of one phase is that phase's; one that ends a phase or opens one
    (an operator whose predecessor on its thread is in another phase) lies outside them."""
    graphs, epochs = _graphs()
    b = prepare(graphs, epochs)
    paces = paces_of(b.g, measured_regions(json.loads((RUN / "run.json").read_text())))
    p = b.base.copy()
    pace(b.g, p, paces)
    checked = {"inside": 0, "between": 0}
    for r, rp in paces.items():
        mine = np.flatnonzero((b.g.kind == HOST_OP) & (b.g.rank == r))
        mine = mine[np.lexsort((b.g.start_ns[mine], b.g.chain[mine]))]
        phase = [next((part for part in str(s).split("/") if part in rp.regions), OUTSIDE) for s in b.g.scope[mine]]
        for k in range(1, len(mine)):
            i, before = mine[k], b.base.gap_ns[mine[k]]
            if before <= 0 or b.g.chain[i] != b.g.chain[mine[k - 1]]:
                continue
            same = phase[k] == phase[k - 1]
            want = rp.of(phase[k]) if same else rp.of(OUTSIDE)
            assert p.gap_ns[i] == pytest.approx(before * want, abs=1)
            checked["inside" if same else "between"] += 1
    assert checked["inside"] > 100 and checked["between"] > 10


@pytest.mark.slow
def test_a_stall_between_phases_is_kept_at_its_own_pace_and_its_removal_predicted() -> None:
    """A 30 ms sleep outside every phase on rank 1 of a DDP job (a quiet 16-core host): paced as the
    time outside the phases, the replay meets the step measured beside the trace; without the stall
    it meets the step measured with the stall removed for real (its own run.json)."""
    graphs, epochs = _graphs(STALL)
    m = measured_step(json.loads((STALL / "run.json").read_text()), [])
    w = whatif(graphs, epochs, ["no-host-stalls"], unprofiled_ns=m.ns, unprofiled_regions=m.regions)
    assert w.unprofiled["calibrated_unprofiled_ns"] == pytest.approx(m.ns, rel=0.05)
    gone = json.loads((STALL_GONE / "run.json").read_text())["results"]
    measured_after_ns = max(rec["rows"][0]["unprofiled_step_ns"] for rec in gone.values())
    assert w.scenarios.iloc[0]["predicted_unprofiled_ns"] == pytest.approx(measured_after_ns, rel=0.20)


def test_the_paced_replay_meets_the_measured_step_and_balance_is_predicted_from_it() -> None:
    graphs, epochs = _graphs()
    m = measured_step(json.loads((RUN / "run.json").read_text()), [])
    w = whatif(graphs, epochs, ["balance"], unprofiled_ns=m.ns, unprofiled_regions=m.regions)
    u = w.unprofiled
    assert set(u["region_factors"]) == {"0", "1"}
    # the replay of every phase at its own pace lands near the step measured without the profiler
    assert u["calibrated_unprofiled_ns"] == pytest.approx(m.ns, rel=0.25)
    row = w.scenarios.iloc[0]
    assert 0 < row["predicted_unprofiled_ns"] < m.ns
    assert "phases_not_paced" not in [n.code for n in w.notes]


def _without_regions(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    shutil.copytree(RUN, folder)
    run = json.loads((folder / "run.json").read_text())
    for record in run["results"].values():
        record["rows"][0].pop("unprofiled_region_ns")  # an older run: the step alone
    (folder / "run.json").write_text(json.dumps(run))
    return folder


def test_a_run_that_timed_no_phases_scales_the_whole_step_alike(tmp_path: Path) -> None:
    run = json.loads((_without_regions(tmp_path) / "run.json").read_text())
    assert measured_regions(run) is None
    graphs, epochs = _graphs()
    m = measured_step(run, [])
    w = whatif(graphs, epochs, ["balance"], unprofiled_ns=m.ns, unprofiled_regions=m.regions)
    claimed = w.steps["claimed"].to_numpy()
    row = w.scenarios.iloc[0]
    scenario = w.per_step[row["name"]].to_numpy()[claimed]  # the profiled replay of each claimed step
    want = m.ns * np.median(scenario) / np.median(w.steps["replayed_ns"].to_numpy()[claimed])
    assert "region_factors" not in w.unprofiled and row["predicted_unprofiled_ns"] == pytest.approx(want, rel=1e-9)
    said = [n.values for n in w.notes if n.code == "phases_not_paced"]
    assert said == [{"step_measured": True}] and "scale the whole step alike" in _note_text(w)


def _note_text(w) -> str:
    return " ".join(n.text for n in w.notes if n.code == "phases_not_paced")


def test_bare_traces_without_a_measured_step_say_the_fitted_cost_comes_off_alike() -> None:
    graphs, epochs = _graphs()
    w = whatif(graphs, epochs, ["balance"])
    assert w.unprofiled["unprofiled_source"] == "estimated" and "region_factors" not in w.unprofiled
    said = [n.values for n in w.notes if n.code == "phases_not_paced"]
    assert said == [{"step_measured": False}] and "fitted cost per event" in _note_text(w)


@pytest.mark.parametrize("regions, want", [
    # forward 4 and 6 ms in the trace's two steps of 10 and 12 ms: median 5 ms, 6 ms outside it
    ({"forward": 3e6, "": 5e6}, {"forward": 3 / 5, OUTSIDE: 5 / 6}),
    ({"forward": 3e6}, {"forward": 3 / 5}),  # the time outside not timed: the step's factor there
    ({"forward": 0, "": 5e6}, {}),  # a phase of no time: the step outside it is not comparable either
    ({"forward": None}, {}),  # nothing timed: the whole step alike
    ({"nowhere": 3e6, "": 5e6}, {}),  # a phase the trace does not hold
    ({}, {}),
])
def test_broken_or_missing_phase_times_fall_back_to_the_steps_factor(regions: dict, want: dict) -> None:
    frame = pd.DataFrame({"step": [0, 1], "region": ["forward", "forward"], "dur_ns": [4e6, 6e6]})
    rp = rank_pace(frame, pd.Series([10e6, 12e6], index=[0, 1]), 22e6, regions)
    assert rp.regions == pytest.approx(want) and rp.step == pytest.approx(2.0)
    assert rp.of("backward") == rp.step and rp.of("forward") == rp.regions.get("forward", rp.step)
    assert rank_pace(frame, pd.Series([10e6], index=[0]), 0.0, regions) is None


def test_a_rank_without_measured_phases_leaves_every_rank_scaled_alike() -> None:
    graphs, epochs = _graphs()
    g = prepare(graphs, epochs).g
    one = {0: measured_regions(json.loads((RUN / "run.json").read_text()))[0]}
    assert paces_of(g, one) == {} and paces_of(g, None) == {}


def test_a_node_takes_the_first_scope_part_that_is_a_timed_phase() -> None:
    got = node_regions(np.array(["forward/attn", "step 3/backward", "", "optimizer"], dtype=object), {"forward", "backward"})
    assert list(got) == ["forward", "backward", OUTSIDE, OUTSIDE]
    assert RankPace(1.5, {"forward": 0.5}).of("backward") == 1.5


def test_the_region_clock_times_each_phase_directly_inside_a_step(monkeypatch) -> None:
    ticks = iter(range(0, 10**6, 10))  # each perf_counter_ns call 10 ns after the last
    monkeypatch.setattr(backends.time, "perf_counter_ns", lambda: next(ticks))
    # no profiler records and no GPU: region() is the clock alone (and torch need not load here)
    off = SimpleNamespace(_C=SimpleNamespace(_autograd=SimpleNamespace(_profiler_enabled=lambda: False)))
    monkeypatch.setattr(backends, "_torch", lambda: off)
    monkeypatch.setattr(backends, "_cuda_available", lambda: False)
    with backends.clocked() as clock:
        for _ in range(3):
            with backends.region("step"):
                with backends.region("forward"):
                    with backends.region("inner"):  # nested: part of forward, not a phase
                        pass
                with backends.region("backward"):
                    pass
    # per step: forward holds inner's two ticks (30 ns), backward 10 ns, the step 70 ns in all
    assert clock.steps == [{"forward": 30, "backward": 10, "": 30}] * 3
    assert clock.medians_ns() == {"": 30, "backward": 10, "forward": 30}
    with backends.region("after"):  # no clock open: nothing timed
        pass


def _held_by_another(ranges: list[tuple], i: int) -> bool:
    """Whether range i (name, tid, start, end) lies within another of `ranges` (of equal extent: the
    one listed first holds the other)."""
    _, _, s, e = ranges[i]
    return any(j != i and o[2] <= s and e <= o[3] and (o[2], o[3]) != (s, e) or (j < i and (o[2], o[3]) == (s, e))
               for j, o in enumerate(ranges))


def test_region_spans_are_the_outermost_ranges_on_the_step_ranges_thread() -> None:
    # step 1 on thread 7: nested ranges, two starting together (the longer holds the shorter), twins of
    # one extent, a range of another thread, one straddling the step's end; step 2 on thread 8
    steps_raw = [("ProfilerStep#1", 7, 0, 1_000), ("ProfilerStep#2", 8, 2_000, 3_000)]
    ranges = [("forward", 7, 10, 400), ("inner", 7, 10, 200), ("deeper", 7, 50, 60), ("backward", 7, 400, 900),
              ("twin", 7, 905, 950), ("twin2", 7, 905, 950), ("other thread", 9, 0, 1_000), ("late", 7, 990, 1_100),
              ("optimizer", 8, 2_100, 2_500), ("held", 8, 2_200, 2_300), ("left of step", 8, 1_900, 2_100)]
    rows = [("step", t, s, e) for _, t, s, e in steps_raw] + [("range", t, s, e) for _, t, s, e in ranges]
    names = [n for n, *_ in steps_raw] + [n for n, *_ in ranges]
    order = np.random.default_rng(3).permutation(len(rows))  # the host frame in no particular order
    host = pd.DataFrame({"kind": pd.Categorical([rows[i][0] for i in order], categories=["sync", "range", "step"]),
                         "name": pd.array([names[i] for i in order], dtype="string"),
                         "tid": np.array([rows[i][1] for i in order], np.int64),
                         "start_ns": np.array([rows[i][2] for i in order], np.int64),
                         "dur_ns": np.array([rows[i][3] - rows[i][2] for i in order], np.int64)})
    steps = pd.DataFrame({"step": [1, 2, 3], "start_ns": [0, 2_000, 5_000], "end_ns": [1_000, 3_000, 6_000]})
    got = region_spans(host, steps)
    listed = [ranges[i - len(steps_raw)] for i in order if i >= len(steps_raw)]  # the ranges in the frame's order
    want = []
    for step, (_, tid, t0, t1) in enumerate(steps_raw, start=1):
        inside = [r for r in listed if r[1] == tid and t0 <= r[2] and r[3] <= t1]
        want += sorted(((step, n, s, e) for i, (n, _, s, e) in enumerate(inside) if not _held_by_another(inside, i)),
                       key=lambda r: r[2])
    assert list(got.itertuples(index=False, name=None)) == want
    assert [n for _, n, _, _ in want] == ["forward", "backward", want[2][1], "optimizer"]  # one twin; step 3 has no range
    assert got.dtypes.tolist() == [np.dtype(np.int64), np.dtype(object), np.dtype(np.int64), np.dtype(np.int64)]
    assert region_spans(host, steps.iloc[:0]).empty and region_spans(host.iloc[:0], steps).empty


def test_a_range_overlapping_the_last_kept_one_is_no_region_of_its_own() -> None:
    # a range that starts inside the kept one and ends after it is not held, yet no region either:
    # the regions of a step never overlap
    host = pd.DataFrame({"kind": pd.Categorical(["step", "range", "range", "range"], categories=["range", "step"]),
                         "name": pd.array(["s", "a", "b", "c"], dtype="string"), "tid": np.full(4, 1, np.int64),
                         "start_ns": np.array([0, 10, 50, 120], np.int64), "dur_ns": np.array([200, 90, 60, 30], np.int64)})
    got = region_spans(host, pd.DataFrame({"step": [4], "start_ns": [0], "end_ns": [200]}))
    assert list(got.itertuples(index=False, name=None)) == [(4, "a", 10, 100), (4, "c", 120, 150)]
