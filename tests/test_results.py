"""Each workload's results have one declared schema (tracelab/results.py), one spelling per
unit (GB/s is `_gb_s`), and run folders written before these names still read."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tracelab.ingest import results, runfolder
from tracelab.core.errors import RunError
from tracelab.reports.html import workload_plots

DATA = Path(__file__).resolve().parent / "data"
RUNS = sorted(p.parent for p in DATA.glob("*/run.json"))
BANDWIDTH = re.compile(r"(gbps|gbs)$")  # the spellings of GB/s that are gone


def _keys(record: dict) -> set[str]:
    return set(record) | {k for row in record.get("rows", []) for k in row}


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_old_run_folders_read_with_todays_names(run: Path) -> None:
    raw = json.loads((run / "run.json").read_text())
    stored = raw.get(results.RUN_KEY, raw.get(results.OLD_RUN_KEY))  # old folders say "figures"
    per_rank = results.of_run(raw)
    assert per_rank and sorted(per_rank) == sorted(stored)
    for rank, record in per_rank.items():
        assert not any(BANDWIDTH.search(k) for k in _keys(record))
        if results.RUN_KEY in raw:  # written by today's workloads: the whole schema holds
            results.check(record)
        workload = record.get("workload", "decode")  # decode's records named no workload once
        declared = set(results.RESULTS[workload]) | set(results.ROWS.get(workload, {}))
        assert _keys(record) <= declared  # older captures may lack options added since
        old = stored[rank]
        for old_row, row in zip(old.get("rows", []), record.get("rows", [])):
            for old_name, name in results.OLD_NAMES.items():
                if old_name in old_row:
                    assert row[name] == old_row[old_name]


def test_gather_reads_old_and_new_result_files(tmp_path: Path) -> None:
    old = DATA / "allreduce-2gpu-torch"
    shutil.copy(old / "rank0.figures.json", tmp_path / "rank0.figures.json")
    record = results.upgrade(json.loads((old / "rank1.figures.json").read_text()))
    results.write(tmp_path, 1, record)
    got = runfolder.gather(tmp_path)
    assert sorted(got) == ["0", "1"]
    raw0 = json.loads((old / "rank0.figures.json").read_text())
    assert [r["busbw_gb_s"] for r in got["0"]["rows"]] == [r["busbw_gbps"] for r in raw0["rows"]]
    assert json.loads((tmp_path / "rank1.results.json").read_text()) == got["1"]


def test_the_allreduce_plot_reads_an_old_run() -> None:
    raw = json.loads((DATA / "allreduce-2gpu-torch" / "run.json").read_text())
    (note, fig), = workload_plots.workload_figures(raw)
    rows = sorted(raw["figures"]["0"]["rows"], key=lambda r: (r["impl"], r["msg_bytes"]))
    assert [y for line in fig["data"] for y in line["y"]] == [round(r["busbw_gbps"], 3) for r in rows]


@pytest.mark.parametrize("change, complaint", [
    (lambda r: r.update(bandwidth_gbs=1.0), "undeclared"),
    (lambda r: r.pop("tokens_per_s"), "missing"),
    (lambda r: r.update(workload="nonesuch"), "unknown workload"),
])
def test_check_refuses_undeclared_and_missing_fields(change, complaint) -> None:
    old = {"workload": "decode", **json.loads((DATA / "decode-2gpu-torch" / "rank0.figures.json").read_text())}
    record = results.upgrade(old)  # how an old record is read: fields added since filled in
    results.check(record)
    change(record)
    with pytest.raises(RunError, match=complaint):
        results.check(record)


def test_write_refuses_a_record_that_breaks_the_schema(tmp_path: Path) -> None:
    with pytest.raises(RunError):
        results.write(tmp_path, 0, {"workload": "train", "rank": 0})
    assert not list(tmp_path.iterdir())
