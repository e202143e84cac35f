"""A step without the profiler that is only estimated lowers a finding's saving, never raises it
(whatif/findings._at_stake_ns): above the profiled replay's saving, only the estimated cost per
event has moved the step's pacer. The rule on hand-made rows, then on a public V100 trace whose
fp32 GEMMs' what-if saves nothing under the profiler. And a saving above one rank's own idle that
is true: two ranks' host gaps, each delaying the other at their all-reduces."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from tracelab.ingest.session import Session
from tracelab.reports.findings.finding import Finding
from tracelab.reports.whatif.findings import with_saving

from helpers import shared_trace


def _row(saving_ns: float, predicted_unprofiled_ns: float):
    return SimpleNamespace(name="scale", args="k=0", saving_ns=saving_ns, step_ns=10e6, steps=4, saving_frac=saving_ns / 10e6,
                           predicted_unprofiled_ns=predicted_unprofiled_ns)


@pytest.mark.parametrize("source, profiled_ns, predicted_ns, rank_ns, says", [
    ("estimated", 0.01e6, 5e6, 0.01e6, True),  # 3 ms saved of the estimated 8 ms: ranks at the profiled 0.01 ms
    ("measured", 0.01e6, 5e6, 3e6, False),  # a step timed without the profiler: its saving ranks
    ("estimated", 4e6, 5e6, 3e6, False),  # lower than the profiled replay's: the estimate lowers it
    ("estimated", 2.99e6, 5e6, 3e6, False)])  # above by under 0.5% of the step: the same figure
def test_an_estimated_step_never_raises_a_saving(source, profiled_ns, predicted_ns, rank_ns, says) -> None:
    f = Finding("GEMMs; allow TF32", 1, "roofline", {"fix": "allow TF32", "scenario_text": "x"}, "tf32", {"run": ""})
    got = with_saving(f, _row(profiled_ns, predicted_ns), unprofiled={"unprofiled_step_ns": 8e6, "unprofiled_source": source})
    assert got.at_stake_ns == int(rank_ns * 4)
    assert "3.00 ms of 8.00 ms per step without the profiler" in got.text
    assert ("time the step without the profiler to confirm it" in got.text) is says


@pytest.mark.slow
def test_the_fp32_gemms_of_a_v100_trace_rank_at_their_profiled_saving() -> None:
    path = shared_trace("hta/trace_diff/test/test.json.gz")
    (f,) = [f for f in Session.open([str(path)], keep_events=True).findings() if f.code == "tf32"]
    trace = json.loads(gzip.open(path).read())["traceEvents"]
    sgemm_us = sum(e["dur"] for e in trace if e.get("cat") == "kernel" and re.search(r"sgemm", e.get("name", "")))
    assert f.values["simt_ns"] == pytest.approx(sgemm_us * 1e3, rel=1e-3)  # the GEMMs the finding names, from the JSON
    v = f.values
    assert v["unprofiled_source"] == "estimated" and v["unprofiled_saving_ns"] > v["saving_ns"] + 1e6
    assert f.at_stake_ns == int(max(0.0, v["saving_ns"]) * v["steps"])
    assert "time the step without the profiler to confirm it" in f.text
    json.dumps(f.evidence, allow_nan=False)


@pytest.mark.slow
def test_the_host_gaps_of_two_ranks_can_save_more_than_the_late_ranks_own_idle() -> None:
    """allreduce-2gpu-torch: rank 1 starts its trace 51 ms after rank 0, then each rank waits for the
    other by turns at the 48 all-reduces. Removing both ranks' host gaps cannot move rank 1's first
    launch, nor make an all-reduce shorter than the shorter of its two ranks' times (its transfer once
    both arrived): the saving stays under that bound, read from the JSON; it may exceed rank 1's own
    GPU idle, whose kernels' times hold its waits for rank 0."""
    from tracelab.reports.whatif.analyse import whatif
    from tracelab.reports.whatif.nodes import rank_graph
    import tracelab

    folder = Path(__file__).parent / "data" / "allreduce-2gpu-torch"
    kernels, first_launch_us = {}, {}
    for r in (0, 1):
        ev = [e for e in json.loads(gzip.open(folder / f"rank{r}.pt.trace.json.gz").read())["traceEvents"] if e.get("ph") == "X"]
        kernels[r] = sorted((e for e in ev if e.get("cat") == "kernel"), key=lambda e: e["ts"])
        calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                 and "correlation" in e.get("args", {})}
        first_launch_us[r] = calls[kernels[r][0]["args"]["correlation"]]["ts"]
    assert len(kernels[0]) == len(kernels[1])  # every kernel an all-reduce, matched in order
    end_us = max(e["ts"] + e["dur"] for r in (0, 1) for e in kernels[r])
    transfers_us = sum(min(a["dur"], b["dur"]) for a, b in zip(kernels[0], kernels[1]))
    bound_ms = (end_us - first_launch_us[1] - transfers_us) / 1e3
    own_idle_ms = (kernels[1][-1]["ts"] + kernels[1][-1]["dur"] - kernels[1][0]["ts"] - sum(e["dur"] for e in kernels[1])) / 1e3
    profiles = tracelab.load_many(folder)
    w = whatif({p.rank: rank_graph(p.events, p.host, p.rank) for p in profiles},
               {p.rank: p.meta.trace_start_epoch_ns for p in profiles}, ["no-host-gaps"])
    (row,) = w.scenarios.itertuples()
    assert 0 < row.saving_ns / 1e6 <= bound_ms, (row.saving_ns / 1e6, bound_ms)
    assert bound_ms > own_idle_ms + 1  # the bound allows more than rank 1's own idle
