"""Reports of any mix of run folders (issue 22): every pair of our run-folder kinds (workload x
profiler, CPU and GPU, 1 and 2 ranks) gives a run table, blank (None) where a row does not apply
to a run, and the whole HTML report renders without a traceback (slow: ~30 s for all pairs)."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tracelab.cli.html_report import write_report
from tracelab.ingest import cache
from tracelab.reports.runtable import RESULTS, run_table

DATA = Path(__file__).resolve().parent / "data"
KINDS = [f"{w}-{s}" for w in ("decode-1gpu", "train-2gpu", "allreduce-2gpu", "overlap-2gpu")
         for s in ("torch", "nsys", "proton")] + ["decode-1gpu-steps-none", "train-1gpu-steps-none", "train-cpu-torch"]
PAIRS = list(itertools.combinations(KINDS, 2))


def _info(name: str) -> dict:
    return json.loads((DATA / name / "run.json").read_text())


@pytest.mark.parametrize("a,b", PAIRS)
def test_run_table_of_every_pair(a, b):
    infos = [_info(a), _info(b)]
    table = run_table([(a, infos[0]), (b, infos[1])])
    assert list(table.columns) == [a, b]
    for (name, info), (other_name, other) in ((( a, infos[0]), (b, infos[1])), ((b, infos[1]), (a, infos[0]))):
        mine, theirs = info.get("config") or {}, other.get("config") or {}
        for key in mine.keys() - theirs.keys() - {"backend"}:  # a key of one workload only: blank for the other
            assert table.loc[f"config: {key}", name] == mine[key]
            assert table.loc[f"config: {key}", other_name] is None
        own = {label for label, _, _ in RESULTS.get(info["workload"], [])}
        for label in {label for label, _, _ in RESULTS.get(other["workload"], [])} - own:
            assert table.loc[label, name] is None
    assert not any(isinstance(v, float) and v != v for v in table.to_numpy().ravel())  # no NaN cell


@pytest.mark.slow
def test_report_of_every_pair(tmp_path, monkeypatch):
    # each run folder is in 14 pairs: its traces are parsed and digested once, then read from the
    # run's caches (as tracelab reads a large trace again), the rule here being the report of a mix
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    for a, b in PAIRS:
        out = write_report([str(DATA / a), str(DATA / b)], tmp_path / "r.html", force=True)
        text = out.read_text()
        assert a in text and b in text and "<td>nan</td>" not in text
