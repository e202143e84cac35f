"""The bound from the evidence: a step is host-bound only where the GPU waited on the host (host,
launch and sync idle) for at least HOST_BOUND_SHARE of it; a host that queued the work ahead of
a busy GPU sits on the critical path without bounding the step."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from tracelab.reports.idle.idle import HOST_BOUND_SHARE, HOST_CAUSES, host_needs_host_idle

from helpers import DATA, run_cli_output, shared_trace


def _rows(**over) -> pd.DataFrame:
    row = {"step": 1, "rank": 0, "kernels": 10, "span_ns": 100_000, "busy_ns": 96_000, "idle_ns": 4_000,
           "idle_host_ns": 1_000, "idle_stall_ns": 0, "idle_launch_ns": 500, "idle_sync_ns": 0, "idle_dependency_ns": 0,
           "idle_other_ns": 2_500, "exposed_comm_ns": 0, "bound": "host", "bound_from": "path"}
    return pd.DataFrame([{**row, **over}])


def test_host_ahead_of_a_busy_gpu_is_gpu_bound():
    out = host_needs_host_idle(_rows())
    assert out["bound"].tolist() == ["gpu"] and out["bound_from"].tolist() == ["causes"]


def test_host_late_for_enough_of_the_step_stays_host_bound():
    host_ns = int(HOST_BOUND_SHARE * 100_000)
    out = host_needs_host_idle(_rows(idle_host_ns=host_ns, idle_launch_ns=0, busy_ns=100_000 - host_ns - 2_500))
    assert out["bound"].tolist() == ["host"] and out["bound_from"].tolist() == ["path"]


def _idle_steps(capsys, path) -> list[dict]:
    """The steps of `tracelab idle PATH --format json`, run in this process (the rule is the command's
    output; tests/test_cli_errors.py runs the CLI as its own process)."""
    status, out, err = run_cli_output(capsys, "idle", str(path), "--format", "json")
    assert status == 0, err
    return json.loads(out)["steps"]


@pytest.mark.slow
@pytest.mark.parametrize("path", [DATA / "train-small-1gpu-torch", DATA / "idle-1gpu-large-torch",
                                  DATA / "whatif-stall-2gpu-torch"])
def test_no_host_bound_step_without_host_idle(capsys, path):
    for s in _idle_steps(capsys, path):
        host_ns = sum(s[c] for c in HOST_CAUSES)
        assert s["bound"] != "host" or host_ns >= HOST_BOUND_SHARE * s["span_ns"], s


@pytest.mark.slow
def test_hta_step_with_a_busy_gpu_is_not_host_bound(capsys):
    """HTA's trace_diff rank 1, step 1012: the GPU busy 95.9% of the step and never waiting on the host;
    its critical path had called it host-bound."""
    steps = {(s["rank"], s["step"]): s for s in _idle_steps(capsys, shared_trace("hta/trace_diff"))}
    s = steps[(1, 1012)]
    assert sum(s[c] for c in HOST_CAUSES) < HOST_BOUND_SHARE * s["span_ns"]
    assert s["busy_ns"] > 0.95 * s["span_ns"] and s["bound"] == "gpu"
