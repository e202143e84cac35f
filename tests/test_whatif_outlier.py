"""One step far from the rest moves no figure per step: the what-if table's profiled step and
prediction, and the findings' "X ms per step of Y ms", are medians over the steps, as the step
without the profiler is. tests/data/stall-ddp-16cpu-torch is a real capture with such a step:
its ranks started their profilers apart, so its first step holds rank 0's wait for rank 1 at
the first collective (~1.6 s against ~50 ms). Expected figures come straight from the Kineto
JSON; a copy whose first step is stretched by another 10 s gives the same figures."""
from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from tracelab.ingest.session import Session
from tracelab.reports.fmt import duration

from helpers import DATA, kineto_cpu_stalls_us, kineto_step_ranges, run_cli_output, strict_json

FOLDER = DATA / "stall-ddp-16cpu-torch"


def _windows_us(folder: Path) -> list[float]:
    """Each step's time over both ranks, from the previous step's end (the latest rank's) to its
    own; the first from its earliest start (shorter than the replay's first window, which begins
    at the first traced call: both far above the rest)."""
    ranges = [kineto_step_ranges(folder / f"rank{r}.pt.trace.json.gz") for r in (0, 1)]
    end = {k: max(r[k][1] for r in ranges) for k in ranges[0]}
    first = min(r[0][0] for r in ranges)
    return [end[k] - (end[k - 1] if k else first) for k in sorted(end)]


def _whatif(capsys, folder: Path) -> dict:
    status, out, err = run_cli_output(capsys, "whatif", str(folder), "--scenario", "no-host-stalls", "--format", "json")
    assert status == 0, err
    return strict_json(out)


def _stall_finding(folder: Path):
    from tracelab.reports.fixes.stall import stall_findings
    [found] = Session.open([str(folder)]).findings(sources=[stall_findings])
    return found


def test_the_profiled_step_and_its_prediction_are_medians_over_the_steps(capsys):
    windows = _windows_us(FOLDER)
    assert windows[0] > 20 * statistics.median(windows)  # the capture still has its outlier step
    doc = _whatif(capsys, FOLDER)
    [row] = [s for s in doc["scenarios"] if s["name"] == "no-host-stalls"]
    claimed = [s for s in doc["steps"] if s["claimed"]]
    assert row["steps"] == len(claimed) == len(windows) == 20
    assert row["step_ns"] == pytest.approx(1e3 * statistics.median(windows), rel=0.005)
    assert row["step_ns"] == pytest.approx(statistics.median(s["step_ns"] for s in claimed))
    mean_ns = 1e3 * sum(windows) / len(windows)
    assert row["step_ns"] < 0.5 * mean_ns  # what the mean said: the outlier spread over every step
    assert row["saving_ns"] == pytest.approx(row["step_ns"] - row["predicted_ns"])
    # the stall of ~30 ms a step is most of the median step, as it is of each step but the first
    assert 0.5 < row["saving_frac"] < 0.7


def test_the_stall_finding_says_medians_per_step_and_keeps_its_total(capsys):
    ranges = kineto_step_ranges(FOLDER / "rank1.pt.trace.json.gz")
    stalls = list(kineto_cpu_stalls_us(FOLDER / "rank1.pt.trace.json.gz").values())
    found = _stall_finding(FOLDER)
    v = found.values
    assert v["rank"] == 1 and v["steps"] == len(ranges) == 20
    assert v["stall_ns"] == pytest.approx(1e3 * sum(stalls), rel=1e-4)  # the total stays a sum
    assert v["stall_ns_per_step"] == pytest.approx(1e3 * statistics.median(stalls), rel=1e-4)
    span_us = statistics.median(e - b for b, e in ranges.values())
    assert v["span_ns_per_step"] == pytest.approx(1e3 * span_us, abs=1e3)
    assert (f"host stalls {duration(1e3 * statistics.median(stalls))} per step of {duration(1e3 * span_us)} "
            f"({100 * statistics.median(stalls) / span_us:.0f}%)") in found.text
    # its saving's step is the what-if's: the median step, not the mean that held the first step
    row = found.evidence["whatif"]
    assert row["step_ns"] == pytest.approx(1e3 * statistics.median(_windows_us(FOLDER)), rel=0.005)


def _stretched(folder: Path, out: Path, extra_us: float) -> Path:
    """A copy of the run whose first step is `extra_us` longer on both ranks: every event from a
    moment inside rank 0's first step on is shifted by it (one clock for both ranks), and an
    event running across that moment lasts that much longer (the job paused there)."""
    out.mkdir()
    at = kineto_step_ranges(folder / "rank0.pt.trace.json.gz")[0][0] + 1000.0
    for rank in (0, 1):
        with gzip.open(folder / f"rank{rank}.pt.trace.json.gz") as f:
            trace = json.load(f)
        for e in trace["traceEvents"]:
            if "ts" not in e:
                continue
            if e["ts"] >= at:
                e["ts"] += extra_us
            elif e.get("ph") == "X" and e["ts"] + e.get("dur", 0) > at:
                e["dur"] += extra_us
        with gzip.open(out / f"rank{rank}.pt.trace.json.gz", "wt") as f:
            json.dump(trace, f)
    return out


@pytest.mark.slow  # two 1 MB traces written and parsed again, ~4 s
def test_a_longer_first_step_moves_no_figure_per_step(tmp_path, capsys):
    stretched = _stretched(FOLDER, tmp_path / "stretched", 10e6)
    base, longer = _windows_us(FOLDER), _windows_us(stretched)
    assert longer[0] == pytest.approx(base[0] + 10e6) and longer[1:] == pytest.approx(base[1:])
    rows = [{s["name"]: s for s in _whatif(capsys, f)["scenarios"]} for f in (FOLDER, stretched)]
    for key in ("step_ns", "predicted_ns", "saving_ns"):
        assert rows[1]["no-host-stalls"][key] == pytest.approx(rows[0]["no-host-stalls"][key], rel=1e-6), key
    found = [_stall_finding(f).values for f in (FOLDER, stretched)]
    assert found[1]["stall_ns_per_step"] == pytest.approx(found[0]["stall_ns_per_step"])
    assert found[1]["span_ns_per_step"] == pytest.approx(found[0]["span_ns_per_step"])
    assert found[1]["span_ns"] == pytest.approx(found[0]["span_ns"] + 10e9, rel=1e-6)  # the total holds it all
    assert found[1]["stall_ns"] == found[0]["stall_ns"]  # the pause fell inside an operator it lengthened
    assert found[1]["share"] < 0.05 < found[0]["share"]  # in all, the stalls' share fell below a finding's: not per step
