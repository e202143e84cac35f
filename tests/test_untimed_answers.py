"""A profiler that cannot answer a question says so (issue 28): proton records no timeline
and no memcpy, so its `breakdown` says "memcpy not recorded" (JSON null), its `steps` says
that step times and who waited in which step cannot be answered from it, and the findings
line names what it cannot answer instead of "none (nothing stands out beyond the noise)"."""
from __future__ import annotations

import json

import pytest

from helpers import DATA, slow_after
from helpers import run_cli_output

# two ranks and one in the fast run; the third capture, a rule already met twice, under -m slow
PROTON = [DATA / "ddp-2gpu-equal-proton", DATA / "decode-1gpu-steps-proton",
          pytest.param(DATA / "allreduce-2gpu-proton", marks=pytest.mark.slow, id="allreduce-2gpu-proton")]


@slow_after(1)
@pytest.mark.parametrize("folder", PROTON, ids=lambda p: p.name)
def test_proton_breakdown_says_memcpy_is_not_recorded(capsys, folder):
    status, out, _ = run_cli_output(capsys, "breakdown", str(folder))
    flat = " ".join(out.split())
    assert status == 0 and "memcpy 0.000" not in flat and "memcpy not recorded (proton records kernels only)" in flat
    status, out, _ = run_cli_output(capsys, "breakdown", str(folder), "--format", "json")
    assert all(r["memcpy_ns"] is None and r["memset_ns"] is None for r in json.loads(out)["summary"])


@pytest.mark.slow
def test_torch_breakdown_keeps_its_memcpy_time(capsys):
    status, out, _ = run_cli_output(capsys, "breakdown", str(DATA / "ddp-2gpu-late-torch"), "--format", "json")
    assert status == 0 and all(r["memcpy_ns"] > 0 for r in json.loads(out)["summary"])


@pytest.mark.parametrize("folder", PROTON, ids=lambda p: p.name)
def test_proton_steps_say_what_proton_cannot_answer(capsys, folder):
    status, out, _ = run_cli_output(capsys, "steps", str(folder))
    flat = " ".join(out.split())
    assert status == 0 and "no range matches the step pattern" not in flat
    assert "proton records no timeline" in flat and "cannot be answered from it" in flat
    assert "has a rank late beyond the noise" not in flat and "clock:" not in flat  # no verdict from no timeline
    assert "findings: none (nothing in these inputs" not in flat


def test_a_timed_run_without_findings_keeps_the_plain_none(capsys):
    from tracelab.reports.findings.findings import NONE, lines
    assert lines([], {"proton"}, timed=True) == [f"findings: none ({NONE})"]
    assert "proton records no timeline" in lines([], {"proton"}, timed=False)[0]
