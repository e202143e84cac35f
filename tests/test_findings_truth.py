"""Findings that are not findings are left out (issue 28): a collective kernel's difference
between profilers (its time is the ranks' waits, which each profiler's pace moves), a noise
claim where the inputs have no steps, a sentence without a verb, "per step" of a trace
without steps."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from tracelab.core.classify import classify_one
from tracelab.ingest.session import Session
from tracelab.reports.runs import findings_runs

from helpers import DATA


def _found(paths, sources=None):
    return Session.open(paths).findings(sources=sources)


@pytest.mark.slow
def test_a_collective_kernels_wait_is_no_difference_between_profilers():
    # one job under proton and torch: ncclDevKernel_AllReduce took 42.5 ms more under torch (its waits)
    runs = [DATA / "ddp-2gpu-equal-proton", DATA / "ddp-2gpu-equal-torch"]
    diffs = [f for f in _found(runs) if f.section == "comparison"]
    assert not [f for f in diffs if classify_one(f.evidence["kernel"]) == "communication"]


def test_exposed_communication_has_a_verb_without_a_wait():
    found = [f for f in _found([DATA / "allreduce-2gpu-torch"]) if "of its communication is exposed" in f.text]
    assert found and all(re.match(r"rank \d+(: | waits )", f.text) for f in found)


def test_no_noise_claim_without_steps():
    row = pd.Series({"time_ns[a]": 10.0, "time_ns[b]": 20.0, "delta_ns[b]": 10.0, "ratio[b]": 2.0, "count[b]": 4})
    assert "noise" not in findings_runs._difference_text("k", row, "a", "b", False, 10.0, noise=False).split(";")[0]
    assert "beyond the step-to-step noise" not in findings_runs._difference_text("k", row, "a", "b", True, 40.0,
                                                                                  noise=False)
    assert "beyond the step-to-step noise" in findings_runs._difference_text("k", row, "a", "b", False, 10.0)


def test_a_trace_without_steps_idles_over_its_span_not_per_step():
    from tracelab.reports.findings.findings import idle_or_share  # (the CUDA-graphs fix says its saving in full)
    (idle,) = [f for f in _found([DATA / "decode-1gpu-torch"], [idle_or_share]) if "idle_ns_per_step" in f.evidence]
    own = idle.text.split("; what if")[0]  # the idle sentence (tracelab whatif's clause is issue 27's)
    assert "per step" not in own and "of its" in own and "no steps" in own


def test_the_clock_line_says_whether_offsets_were_measured_or_estimated():
    from tracelab.reports.steps.steps_text import clock_line
    clock = {"collectives": 4, "offsets_ns": {0: 11_536_000, 1: 0}, "median_end_spread_ns": 200.0,
             "max_end_spread_ns": 900.0}
    assert clock_line({**clock, "basis": "epoch"}).startswith("clock: measured: each trace's own wall-clock")
    estimated = clock_line({**clock, "basis": "estimated from collective ends: the traces give no common clock"})
    assert estimated.startswith("clock: estimated from collective ends")


@pytest.mark.slow
def test_a_cpu_run_spending_its_time_in_communication_is_a_finding():
    """gloo on 2 CPU ranks: the share of rank 0's span with a collective in flight, the union of
    its communication operators' intervals over its threads (the caller's call and gloo's own
    threads overlap: their sum would count that time twice), from its events."""
    (found,) = [f for f in _found([DATA / "gloo-2cpu-late"]) if "collective in flight" in f.text]
    from tracelab.ingest.loading import load
    from tracelab.reports.timeline.intervals import merge_intervals
    ev = load(DATA / "gloo-2cpu-late" / f"rank{found.evidence['rank']}.pt.trace.json.gz").events
    comm = ev[ev["op_class"] == "communication"]
    s, e = merge_intervals(comm["start_ns"].to_numpy(), (comm["start_ns"] + comm["dur_ns"]).to_numpy())
    span = (ev["start_ns"] + ev["dur_ns"]).max() - ev["start_ns"].min()
    assert found.evidence["in_flight_ns"] == (e - s).sum() < comm["dur_ns"].sum()  # overlapping threads
    assert f"{100 * (e - s).sum() / span:.0f}% of its" in found.text and found.evidence["threads"] == comm["stream"].nunique()


@pytest.mark.slow  # every finding of a two-GPU run, replays included (~3 s)
def test_a_gpu_run_has_no_collective_in_flight_finding():
    assert not [f for f in _found([DATA / "ddp-2gpu-late-torch"]) if "collective in flight" in f.text]


def test_cpu_operator_total_says_it_sums_threads(capsys):
    from helpers import run_cli_output
    from tracelab.ingest.loading import load
    ev = load(DATA / "gloo-2cpu-late" / "rank0.pt.trace.json.gz").events
    threads, span = ev["stream"].nunique(), (ev["start_ns"] + ev["dur_ns"]).max() - ev["start_ns"].min()
    status, out, _ = run_cli_output(capsys, "breakdown", str(DATA / "gloo-2cpu-late"), "--rank", "0")
    flat = " ".join(out.split())
    assert status == 0 and f"top-level operators of {threads} threads, summed, over a {span / 1e6:,.3f} ms span" in flat


def test_a_trace_without_steps_states_its_saving_over_the_trace():
    """The what-if clause of a trace without steps (one window) speaks of the trace, not of a step."""
    found = [f for f in _found([DATA / "decode-1gpu-torch"]) if "whatif" in f.evidence]
    assert found
    for f in found:
        clause = f.text.split("; what if", 1)[1]
        w = f.evidence["whatif"]
        assert "per step" not in clause and f"ms of the {w['step_ns'] / 1e6:,.2f} ms trace" in clause
