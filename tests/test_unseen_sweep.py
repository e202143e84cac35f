"""False or misleading first lines found on public traces (h34's sweep), each against the rows."""
from __future__ import annotations

import json
import sqlite3

from tracelab.inputs import findings_of, load_groups
from tracelab.reports.idle.idle import MIN_LAUNCHED_FOR_GRAPHS

from conftest import DATA, shared_trace
from malformed import run_cli_output


def _found(*paths) -> list:
    paths = [str(p) for p in paths]
    return findings_of(paths, load_groups(paths))


def test_no_cuda_graph_advice_for_a_trace_of_two_kernels(capsys):
    """nsys-ai's mock.sqlite: 2 kernels, host-bound by 18 ms of launch idle (first-call set-up, not
    launch overhead): no 'capture the step in a CUDA graph', no graph hint; decode-1gpu-torch
    (150 kernels launched one by one) keeps both."""
    mock = shared_trace("nsys-ai/mock.sqlite")
    with sqlite3.connect(mock) as db:
        [(kernels,)] = db.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    assert kernels < MIN_LAUNCHED_FOR_GRAPHS
    status, out, _ = run_cli_output(capsys, "idle", str(mock), "--format", "json")
    doc = json.loads(out)
    assert status == 0 and doc["steps"][0]["bound"] == "host"  # the step is host-bound: only the advice goes
    assert not any("CUDA graph" in n for n in doc["notes"])
    assert not [f for f in _found(mock) if "CUDA graph" in f.text]
    eager = DATA / "decode-1gpu-torch"
    assert len([f for f in _found(eager) if "CUDA graph" in f.text]) == 1
    status, out, _ = run_cli_output(capsys, "idle", str(eager), "--format", "json")
    assert any("CUDA graph" in n for n in json.loads(out)["notes"])


def test_a_lone_rank_file_among_runs_is_named_by_its_folder():
    """A file named rank0.pt.trace.json.gz beside a run folder was the run 'rank0', its findings
    'rank0: rank 0's GPU idles ...': the run read as a rank. Its folder now comes first."""
    lone = DATA / "decode-1gpu-torch" / "rank0.pt.trace.json.gz"
    found = _found(lone, DATA / "decode-2gpu-torch")
    mine = [f.text for f in found if f.text.startswith("decode-1gpu-torch/rank0: rank 0")]
    assert mine and not [f.text for f in found if f.text.startswith("rank0:")]
    # the contrast: files of one run keep their plain rank labels (no run prefix at all)
    one_run = _found(*sorted((DATA / "decode-2gpu-torch").glob("rank*.pt.trace.json.gz")))
    assert one_run and not [f.text for f in one_run if f.text.startswith(("rank0:", "rank1:", "decode-2gpu-torch"))]
