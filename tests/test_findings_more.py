"""The idle and roofline findings (reports/findings/findings_more.py): their numbers are those of
`tracelab idle` and `tracelab roofline` on the same inputs, and below their thresholds they say
nothing."""
from __future__ import annotations

import json

import pytest

from tracelab.inputs import findings_of, load_groups

from conftest import DATA
from malformed import run_cli_output


def _found(folder: str) -> list:
    paths = [str(DATA / folder)]
    return findings_of(paths, load_groups(paths))


def _json(capsys, *args) -> dict:
    status, out, err = run_cli_output(capsys, *args, "--format", "json")
    assert status == 0, err
    return json.loads(out)


def test_idle_finding_states_tracelab_idle_numbers(capsys):
    found = [f for f in _found("idle-1gpu-small-torch") if f.section == "idle" and "idle_ns_per_step" in f.evidence]
    assert len(found) == 1  # (the CUDA-graphs finding, reports/fixes/host.py, also links to the idle section)
    steps = _json(capsys, "idle", str(DATA / "idle-1gpu-small-torch"))["steps"]
    mean = lambda key: sum(s[key] for s in steps) / len(steps)  # noqa: E731
    assert found[0].evidence["idle_ns_per_step"] == pytest.approx(mean("idle_ns"))
    assert f"{mean('idle_host_ns') / 1e6:,.3f} ms of it before the host" in found[0].text
    assert f"host-bound in {len(steps)} of {len(steps)} steps" in found[0].text
    # issue 27: ranked by what no host gaps would save, as `tracelab whatif` predicts it
    scenario = next(s for s in _json(capsys, "whatif", str(DATA / "idle-1gpu-small-torch"), "--scenario",
                                     "no-host-gaps")["scenarios"] if s["name"] == "no-host-gaps")
    assert found[0].at_stake_ns == int(scenario["saving_ns"] * scenario["steps"])
    assert f"{scenario['saving_ns'] / 1e6:,.2f} ms of {scenario['step_ns'] / 1e6:,.2f} ms per step" in found[0].text


def test_gpu_bound_capture_has_no_idle_finding():
    assert not [f for f in _found("idle-1gpu-large-torch") if f.section == "idle"]


def test_roofline_finding_names_the_row_losing_most(capsys):
    found = [f for f in _found("decode-1b-1gpu-torch") if f.section == "roofline"]
    rows = _json(capsys, "roofline", str(DATA / "decode-1b-1gpu-torch"), "--top", "0")["rows"]
    top = max((r for r in rows if r["lost_ns"] is not None), key=lambda r: r["lost_ns"])
    assert len(found) == 1 and found[0].evidence["kernel"] == top["kernel"]
    assert found[0].evidence["lost_ns"] == top["lost_ns"]
    assert f"loses {top['lost_ns'] / 1e6:,.3f} ms to its roofline" in found[0].text


def test_no_roofline_finding_without_a_device_or_work():
    assert not [f for f in _found("train-cpu-torch") if f.section == "roofline"]  # CPU: no roof
    assert not [f for f in _found("decode-1gpu-proton") if f.section == "roofline"]  # no proton metrics there
