"""Reports of any mix of run folders (issue 22): every pair of our run-folder kinds (workload x
profiler, CPU and GPU, 1 and 2 ranks) gives a run table, blank (None) where a row does not apply
to a run; the whole HTML report renders without a traceback for a pair of each two shapes of run
(profiler x ranks x CPU or GPU), each two workloads and every run folder (slow: ~1 s a pair)."""
from __future__ import annotations

import functools
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


@functools.cache  # read once: the pairs are chosen while collecting
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


def _shape(name: str) -> tuple:
    """What the report of a run draws from: its profiler, its ranks, CPU or GPU (run.json)."""
    info = _info(name)
    return info["backend"], info["ranks_per_node"], "cpu" if any(d["index"] < 0 for d in info["devices"]) else "gpu"


def _covers(a: str, b: str) -> set[tuple]:
    return {("shapes", *sorted([_shape(a), _shape(b)])), ("workloads", *sorted([_info(a)["workload"], _info(b)["workload"]])),
            ("run", a), ("run", b)}


def report_pairs() -> list[tuple[str, str]]:
    """The fewest pairs (greedily, in PAIRS' order) that meet every pair of two shapes (_shape, a
    shape beside itself too), every pair of two workloads and every run folder: the report of two
    runs of one shape and workload draws the same sections, tables and plots, its numbers aside."""
    left, out = set().union(*(_covers(a, b) for a, b in PAIRS)), []
    while left:
        best = max(PAIRS, key=lambda pair: len(_covers(*pair) & left))
        out.append(best)
        left -= _covers(*best)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("a,b", report_pairs())
def test_report_of_a_pair_of_each_shape(a, b, tmp_path, monkeypatch):
    # each run folder is in several pairs: its traces are parsed and digested once, then read from
    # the run's caches (as tracelab reads a large trace again), the rule here being the report of a mix
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    out = write_report([str(DATA / a), str(DATA / b)], tmp_path / "r.html")
    text = out.read_text()
    assert a in text and b in text and "<td>nan</td>" not in text


@pytest.mark.slow  # the slow test's cases checked, beside it
def test_the_report_pairs_meet_every_shape_workload_and_run():
    """Read another way (the trace files' names and count, and the devices' indexes), every two
    kinds' shapes and every two workloads are met by some report pair, every kind is in one, and
    the pairs are fewer than half of all pairs."""
    def shape(name: str) -> tuple:
        traces = [f.suffix for f in (DATA / name).iterdir() if f.name.endswith((".sqlite", ".hatchet", ".pt.trace.json.gz"))]
        return frozenset(traces), len(traces), min(d["index"] for d in _info(name)["devices"]) < 0

    def met(pairs, key) -> set:
        return {frozenset([key(a), key(b)]) for a, b in pairs}

    pairs = report_pairs()
    assert {k for pair in pairs for k in pair} == set(KINDS) and len(pairs) < len(PAIRS) / 2
    assert met(pairs, shape) == met(PAIRS, shape)
    assert met(pairs, lambda k: _info(k)["workload"]) == met(PAIRS, lambda k: _info(k)["workload"])
