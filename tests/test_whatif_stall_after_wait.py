"""A host stall after a collective's end, where the next CPU operator waits on that collective (a
CPU-only trace: the wait edge of reports/whatif/edges.py), is removed by no-host-stalls as one in a
chain gap is: the time comes off the wait's offset. tests/data/stall-inflight-2cpu-torch: rank 1
sleeps 30 ms while its bucket's all-reduce is in flight; the all-reduce ends early in the sleep and
its wait returns at once. Stalls recomputed straight from the Kineto JSON."""
from __future__ import annotations

import statistics

import pytest

from tracelab.ingest.session import Session

from helpers import DATA, kineto_cpu_stalls_us, run_cli_output, strict_json

FOLDER = DATA / "stall-inflight-2cpu-torch"


def _scenario(capsys, folder, name: str) -> dict:
    status, out, err = run_cli_output(capsys, "whatif", str(folder), "--scenario", name, "--format", "json")
    assert status == 0, err
    [row] = [s for s in strict_json(out)["scenarios"] if s["name"] == name.partition("@")[0]]
    return row


def test_a_stall_after_a_collective_ends_is_removed_from_the_wait(capsys):
    stalls_us = kineto_cpu_stalls_us(FOLDER / "rank1.pt.trace.json.gz")
    stall_ns = 1e3 * statistics.median(stalls_us.values())
    assert stall_ns > 20e6  # ~28 ms of each step's 30 ms sleep is untraced (the rest overlaps the all-reduce)
    row = _scenario(capsys, FOLDER, "no-host-stalls@1")
    assert row["steps"] == len(stalls_us) == 8
    # rank 0 waits for rank 1 at every all-reduce: the stall is on the path, and at most it comes off
    assert 0.6 * stall_ns < row["saving_ns"] <= 1.02 * stall_ns
    assert row["saving_unprofiled_ns"] > 0.5 * stall_ns


def test_the_stall_finding_offers_its_fix_with_the_saving(capsys):
    from tracelab.reports.fixes.stall import stall_findings
    [found] = Session.open([str(FOLDER)]).findings(sources=[stall_findings])
    assert found.values["rank"] == 1 and found.values["after"] == "gloo:all_reduce"
    assert found.values["fix_offered"] and "gains nothing" not in found.text
    assert found.evidence["whatif"]["saving_ns_per_step"] > 0.6 * found.values["stall_ns_per_step"]


@pytest.mark.parametrize("folder", ["stall-ddp-16cpu-torch", "stall-inflight-2cpu-torch"])
def test_a_stall_comes_off_once(capsys, folder):
    """Whether the stall sits in a chain gap (stall-ddp: the sleep before the backward) or in a wait's
    offset, no-host-stalls saves no more than the stalls of the rank per step, and no-host-gaps,
    which keeps the host's stalls, saves less than no-host-stalls."""
    stall_ns = 1e3 * statistics.median(kineto_cpu_stalls_us(DATA / folder / "rank1.pt.trace.json.gz").values())
    stalls, gaps = _scenario(capsys, DATA / folder, "no-host-stalls"), _scenario(capsys, DATA / folder, "no-host-gaps")
    assert 0.6 * stall_ns < stalls["saving_ns"] <= 1.02 * stall_ns
    assert gaps["saving_ns"] < 0.5 * stalls["saving_ns"]
