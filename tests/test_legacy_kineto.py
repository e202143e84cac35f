"""Kineto as PyTorch 1.8/1.9 wrote it (pytorch/kineto's tb_plugin sample, tests/data/public/kineto):
step ranges filed as `Operator` events, `[memory]` events without a `cat`, without addresses and
without totals. Each figure is recomputed from the JSON itself."""
from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest

import tracelab

from helpers import shared_trace

PATH = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


@pytest.fixture(scope="module")
def raw() -> dict:
    with gzip.open(shared_trace(PATH)) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def profile():
    return tracelab.load(shared_trace(PATH))


@pytest.mark.slow
def test_operator_step_ranges_are_steps(raw, profile):
    steps = sorted(int(m.group(1)) for e in raw["traceEvents"]
                   if e.get("cat") == "Operator" and (m := re.fullmatch(r"ProfilerStep#(\d+)", e.get("name", ""))))
    assert steps == [5, 6, 7, 8, 9, 10]
    assert sorted(profile.events["step"].dropna().unique().tolist()) == steps
    host = profile.host
    assert sorted(host.loc[host["kind"] == "step", "name"]) == sorted(f"ProfilerStep#{s}" for s in steps)
    assert not host.loc[host["kind"] == "cpu_op", "name"].str.startswith("ProfilerStep#").any()


def test_kernels_of_each_step_from_the_file(raw, profile):
    """The kernels whose launch falls in ProfilerStep#6, counted from the file by correlation id."""
    ev = raw["traceEvents"]
    step6 = next(e for e in ev if e.get("name") == "ProfilerStep#6")
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in ev
                 if e.get("cat") == "Runtime" and "correlation" in (e.get("args") or {})}
    n = sum(1 for e in ev if e.get("cat") == "Kernel"
            and step6["ts"] <= launch_ts.get(e["args"].get("correlation"), -1) < step6["ts"] + step6["dur"])
    assert n > 0 and int(((profile.events["step"] == 6) & (profile.events["kind"] == "kernel")).sum()) == n


def test_uncategorised_memory_events_are_read_with_summed_totals(raw, profile):
    mem = [e for e in raw["traceEvents"] if e.get("name") == "[memory]"]
    assert mem and all("cat" not in e and "Addr" not in e["args"] for e in mem)
    cuda = sorted((e for e in mem if e["args"]["Device Type"] == 1), key=lambda e: e["ts"])
    running = np.cumsum([e["args"]["Bytes"] for e in cuda])
    frame = profile.memory
    assert len(frame) == len(mem)
    gpu = frame[frame["device"] == 0]
    assert int(gpu["total_allocated_bytes"].max()) == int(running.max())
    assert gpu["addr"].isna().all()
    assert any(n.code == "memory_summed" and "running sum of their bytes" in n.text for n in profile.meta.notes)


def test_steps_and_memory_commands_answer(capsys):
    from helpers import run_cli_output

    status, out, _ = run_cli_output(capsys, "steps", str(shared_trace(PATH)), "--format", "json")
    assert status == 0 and len(json.loads(out)["steps"]) == 6
    status, out, _ = run_cli_output(capsys, "memory", str(shared_trace(PATH)), "--format", "json")
    assert status == 0 and "no memory events" not in out
