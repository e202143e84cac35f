"""The report's roofline device comes by the same route as `tracelab roofline` (the trace,
else the run.json beside it) and `report --device` overrides it (issue 28)."""
from __future__ import annotations

import json
import shutil

from helpers import DATA
from helpers import run_cli_output

from tracelab.ingest.session import Session


def _without_device(tmp_path):
    """roofline-1gpu-proton with its device block removed and a run.json naming an H100."""
    folder = tmp_path / "roofline-proton"
    folder.mkdir()
    tree = json.loads((DATA / "roofline-1gpu-proton" / "rank0.hatchet").read_text())
    (folder / "rank0.hatchet").write_text(json.dumps(tree[:1]))
    run = json.loads((DATA / "train-1gpu-steps-proton" / "run.json").read_text())  # devices: one H100 SXM
    (folder / "run.json").write_text(json.dumps(run))
    return folder


def test_report_roofline_device_from_run_json_as_the_roofline_command(tmp_path, capsys):
    folder = _without_device(tmp_path)
    (profile,) = Session.open([folder]).runs[0].profiles
    digest = profile.summary["roofline"]
    status, out, _ = run_cli_output(capsys, "roofline", str(folder), "--format", "json")
    assert status == 0 and digest["device_from"] == "run.json"
    shown = json.loads(out)["device"]
    assert shown["source"] == "run.json" and shown["name"] == digest["device"].name == "H100 SXM"


def test_report_device_option(tmp_path, capsys):
    """An H100 capture reported as if on an H200: the roofline section says so."""
    trace = DATA / "roofline-1gpu-torch" / "rank0.pt.trace.json.gz"
    status, _, _ = run_cli_output(capsys, "report", str(trace), "-o", str(tmp_path / "r.html"), "--device", "H200")
    page = (tmp_path / "r.html").read_text()
    assert status == 0 and "device H200 (from the option)" in page
    status, _, _ = run_cli_output(capsys, "report", str(trace), "-o", str(tmp_path / "s.html"))
    assert status == 0 and "device H100 SXM (from the trace)" in (tmp_path / "s.html").read_text()
