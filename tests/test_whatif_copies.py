"""whatif's critical path names copies (memcpy, memset) `copy`, not `compute`, and a step whose
edge is missing says its path is not known (h34's sweep): each against the rows themselves."""
from __future__ import annotations

import re

import json
import sqlite3

import numpy as np
import pandas as pd
import pytest

import tracelab
from tracelab.core import classify, schema
from tracelab.reports.whatif.analyse import whatif
from tracelab.reports.whatif.nodes import rank_graph
from tracelab.reports.whatif.analyse import path_steps
from tracelab.reports.whatif.bound import rank_path_bounds
from tracelab.reports.whatif.join import join
from tracelab.reports.whatif.path import step_paths, wait_estimate, windows
from tracelab.reports.whatif.replay import measured, replay

from helpers import DATA, shared_trace
from helpers import run_cli_output

COPY = "Memcpy HtoD (Pageable -> Device)"


def _events(kinds: list[str], names: list[str], starts: list[int], durs: list[int], launches: list[int]) -> pd.DataFrame:
    n = len(kinds)
    return schema.validate(classify.classified(schema.coerce({
        "rank": 0, "source": "torch", "kind": kinds, "name": names, "device": 0, "stream": 7,
        "start_ns": starts, "dur_ns": durs, "step": 0, "launch_start_ns": launches, "launch_dur_ns": [5] * n},
        n_rows=n, spec=schema.PARSED)))


def _copy_then_kernel(copy_kind: str, copy_name: str) -> pd.DataFrame:
    # a 1000 ns copy launched at 0, then a 10 ns kernel launched at 100 that queues behind it
    return _events([copy_kind, "kernel"], [copy_name, "gemm_kernel"], [20, 1020], [1000, 10], [0, 100])


def _host() -> pd.DataFrame:
    return schema.host_frame(["step"], ["step 0"], [1], [0], [2000])


def test_a_memcpy_on_the_path_is_copy_and_its_step_is_copy_bound():
    events = _copy_then_kernel("memcpy", COPY)
    w = whatif({0: rank_graph(events, _host(), 0)}, {0: None})
    [row] = w.steps.itertuples()
    kinds = events["kind"].astype(str)
    assert row.copy_ns == int(events.loc[kinds == "memcpy", "dur_ns"].sum()) == 1000
    assert row.compute_ns == int(events.loc[kinds == "kernel", "dur_ns"].sum()) == 10
    assert row.top[0]["what"] == "copy" and row.top[0]["name"].startswith("Memcpy HtoD")
    assert rank_path_bounds(events, _host())["path_bound"].tolist() == ["copy"]
    # the contrast: the same time as a copy *kernel* (SM work) is compute, and the step GPU-bound
    kernel = _copy_then_kernel("kernel", "copy_kernel")
    [row] = whatif({0: rank_graph(kernel, _host(), 0)}, {0: None}).steps.itertuples()
    assert (row.copy_ns, row.compute_ns) == (0, 1010)
    assert rank_path_bounds(kernel, _host())["path_bound"].tolist() == ["gpu"]


@pytest.mark.shared
def test_the_h100_traces_input_copies_are_copy_on_its_path():
    """nsys-ai's h100_2gpu_1s: 759 ms of the path is rank 0's host-to-device copies, which
    whatif called compute. Each path segment's own row kind (events, by event_row) says
    which are copies; the compute and copy columns split the GPU ops' time by it."""
    path = shared_trace("nsys-ai/h100_2gpu_1s.sqlite")
    with sqlite3.connect(path) as db:
        copy_kinds = {k for (k,) in db.execute("select distinct copyKind from CUPTI_ACTIVITY_KIND_MEMCPY")}
    assert 1 in copy_kinds  # HtoD
    p = tracelab.load_many(path)[0]
    g = join({0: rank_graph(p.events, p.host, 0)}, {0: None})
    base = measured(g)
    r = replay(g, base, cold=False)
    win = windows(g, r.start_ns, r.end_ns)
    [seg] = [x.segments for x in step_paths(g, base, r, win, wait_estimate(g)).values()]
    row_kind = p.events["kind"].astype(str).to_numpy()[np.maximum(g.event_row[seg["node"].to_numpy()], 0)]
    gpu = seg["category"].isin(["compute", "copy"]).to_numpy()
    ns = np.clip(np.minimum(seg["t1_ns"], win["end_ns"].iloc[0]) - np.maximum(seg["t0_ns"], win["begin_ns"].iloc[0]), 0, None)
    copies = gpu & np.isin(row_kind, ["memcpy", "memset"])
    [step] = path_steps({0: rank_graph(p.events, p.host, 0)}, {0: None}).itertuples()
    assert step.copy_ns == int(ns[copies].sum()) > step.replayed_ns / 2
    assert step.compute_ns == int(ns[gpu & ~copies].sum())
    assert rank_path_bounds(p.events, p.host)["path_bound"].tolist() == ["copy"]


def _late_kernel_trace():
    """idle-1gpu-small-torch with one mid-trace kernel, and all after it, 5 ms late, its launch
    call as it was (test_whatif's unexplained wait): an edge the trace does not hold."""
    base = tracelab.load(DATA / "idle-1gpu-small-torch" / "rank0.pt.trace.json.gz")
    ev = base.events.sort_values("start_ns").reset_index(drop=True)
    k = len(ev) // 2
    ev.loc[k:, "start_ns"] = ev.loc[k:, "start_ns"] + 5_000_000
    later = ev.loc[k + 1:, "launch_start_ns"].notna()
    ev.loc[k + 1:, "launch_start_ns"] = ev.loc[k + 1:, "launch_start_ns"].where(~later, ev.loc[k + 1:, "launch_start_ns"] + 5_000_000)
    return base, ev, int(ev.loc[k, "step"])


def test_a_step_with_a_missing_edge_says_its_path_is_not_known():
    base, ev, step = _late_kernel_trace()
    w = whatif({0: rank_graph(ev, base.host, 0)}, {0: None})
    rows = w.steps.set_index("step")
    assert not rows.loc[step, "path_known"] and not rows.loc[step, "claimed"]
    # the step time stands: the end of its last GPU op less the previous step's, from the rows
    end = (ev["start_ns"] + ev["dur_ns"]).groupby(ev["step"]).max()
    assert rows.loc[step, "step_ns"] == end.loc[step] - end.loc[step - 1]
    assert any(n.code == "edge_missing" and step in n.values["steps"] and not n.values["path_known"]
               and re.match(rf"steps? ([^:(]*, )?{step}\b[^:]*: an edge is missing", n.text) and "is not known" in n.text
               for n in w.notes)
    assert step not in rank_path_bounds(ev, base.host)["step"].tolist()  # no bound from an unknown path
    from tracelab.reports.idle.idle import rank_idle, step_bound, with_path_bounds
    idle = with_path_bounds(rank_idle(ev, base.host, "torch"), rank_path_bounds(ev, base.host)).steps.set_index("step")
    assert idle.loc[step, "bound_from"] == "causes" and idle.loc[step, "bound"] == step_bound(idle.loc[[step]].reset_index())[0]
    assert (idle.drop(index=step)["bound_from"] == "path").all()
    from tracelab.reports.findings.findings_more import bound_basis
    assert bound_basis(idle.reset_index())[0].startswith("by its critical path, or its idle causes in the 1 steps")
    assert bound_basis(idle.drop(index=step).reset_index()) == ("by its critical path", "")
    assert bound_basis(idle.loc[[step]].reset_index()) == (
        "by its idle causes", "; its critical path is not known: an edge is missing (tracelab whatif)")
    # the contrast: the trace as recorded knows every step's path
    untouched = whatif({0: rank_graph(base.events, base.host, 0)}, {0: None})
    assert untouched.steps["path_known"].all() and step in rank_path_bounds(base.events, base.host)["step"].tolist()


def test_the_sampled_trace_prints_its_step_time_and_no_path(capsys):
    """HTA's trace_filter sample: both steps' GPU starts are mostly unexplained (its CPU ops were
    sampled away): the table keeps each measured step time, shows ? for the path, JSON null."""
    path = shared_trace("hta/trace_filter/sampled_rank-0.json.gz")
    status, out, _ = run_cli_output(capsys, "whatif", str(path), "--format", "json")
    doc = json.loads(out)
    assert [s["path_known"] for s in doc["steps"]] == [False, False]
    assert all(s["path"] is None and s["top"] is None and s["step_ns"] > 0 for s in doc["steps"])
    status, text, _ = run_cli_output(capsys, "whatif", str(path))
    assert status == 0
    assert "not known: an edge is missing" in text and "593.881" not in text
    assert all(f"{s['step_ns'] / 1e6:,.3f}" in text for s in doc["steps"])
