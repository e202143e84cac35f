"""Breakdown figures against sums taken straight from the trace files."""
from __future__ import annotations

import gzip
import json
import sqlite3
from collections import Counter, defaultdict
from pathlib import Path

import pandas as pd
import pytest
from helpers import shared_trace
from helpers import run_cli_output

import tracelab
from tracelab.core.classify import canonical
from tracelab.reports.breakdown.breakdown import REST, breakdown, summary

KINETO = "hta/trace_filter/sampled_rank-1.json.gz"
NSYS = "nsys-ai/mfu_2gpu_before.sqlite"
DATA = Path(__file__).resolve().parent / "data"


def _kineto_kernel_sums(path):
    doc = json.loads(gzip.decompress(path.read_bytes()))
    total, count = defaultdict(int), Counter()
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e.get("ph") == "X":
            key = canonical(e["name"])
            total[key] += round(e["dur"] * 1000)
            count[key] += 1
    return total, count


@pytest.mark.slow
def test_kernel_breakdown_matches_json():
    path = shared_trace(KINETO)
    expected_ns, expected_count = _kineto_kernel_sums(path)
    df = tracelab.load(path).events
    table = breakdown(df[df["kind"] == "kernel"], by="kernel")
    got = dict(zip(table["kernel"], table["total_ns"]))
    assert got == dict(expected_ns)
    assert dict(zip(table["kernel"], table["count"])) == dict(expected_count)
    assert table["share"].sum() == pytest.approx(1.0)
    assert table["total_ns"].is_monotonic_decreasing


def test_top_keeps_the_total():
    df = tracelab.load(shared_trace(KINETO)).events
    full = breakdown(df, by="kernel")
    top = breakdown(df, by="kernel", top=5)
    assert len(top) == 6 and top["kernel"].iloc[-1] == REST
    assert top["total_ns"].sum() == full["total_ns"].sum() == df["dur_ns"].sum()
    assert top["count"].sum() == full["count"].sum()


@pytest.mark.shared
def test_nsys_summary_per_rank_matches_sql():
    path = shared_trace(NSYS)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT globalPid, sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL "
                          "GROUP BY globalPid ORDER BY globalPid").fetchall()
    df = tracelab.events(tracelab.load_many(path))  # two processes: two ranks
    got = summary(df)
    assert sorted(got["kernel_ns"].tolist()) == sorted(ns for _, ns in rows)
    assert (got["busy_ns"] <= got["span_ns"]).all()
    assert ((got["idle_share"] >= 0) & (got["idle_share"] <= 1)).all()


@pytest.mark.slow
@pytest.mark.parametrize("by", ["kernel", "op_class", "scope"])
def test_cli_json_totals(by, capsys):
    path = shared_trace(KINETO)
    status, out, err = run_cli_output(capsys, "breakdown", str(path), "--by", by, "--format", "json", "--top", "3")
    assert status == 0, err
    doc = json.loads(out)
    df = tracelab.load(path).events
    assert sum(r["total_ns"] for r in doc["breakdown"]) == int(df["dur_ns"].sum())
    assert doc["summary"][0]["rank"] == 1
    assert doc["summary"][0]["kernel_ns"] == int(df.loc[df["kind"] == "kernel", "dur_ns"].sum())


@pytest.mark.parametrize("rel, header", [("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", "CPU operator"),
                                         (KINETO, "kernel")])
def test_breakdown_table_names_what_its_rows_are(rel, header, capsys):
    # a CPU-only trace's rows are CPU operators: the table said "kernel" over them
    status, out, err = run_cli_output(capsys, "breakdown", str(shared_trace(rel)), "--top", "3")  # in this process
    assert status == 0, err
    head = next(line for line in out.splitlines() if "time (ms)" in line)
    assert head.split("┃")[-1].strip() == header


def test_top_over_many_ranks_is_chosen_over_all_ranks_totals():
    """20 ranks of one real trace, each with one kernel of its own made 30x longer: every
    rank's local top 3 differs, but the rows kept are the 3 kernels with the most time summed
    over all ranks (computed here from the events), on every rank that has them, so a kept
    kernel's least and median over the ranks describe all of them (issue 22)."""
    from tracelab.reports.breakdown.breakdown import spread, top_rows

    one = tracelab.load(DATA / "train-2gpu-torch" / "rank0.pt.trace.json.gz").events
    one = one[one["kind"] == "kernel"]
    names = one.groupby(one["kernel"].astype(str))["dur_ns"].sum().sort_values().index[:20]
    ranks = []
    for r, boosted in enumerate(names):
        dur = one["dur_ns"].where(one["kernel"].astype(str) != boosted, one["dur_ns"] * 30)
        ranks.append(one.assign(rank=r, dur_ns=dur))
    df = pd.concat(ranks, ignore_index=True)
    table = breakdown(df, by="kernel", top=3)
    summed = df.groupby(df["kernel"].astype(str))["dur_ns"].sum().sort_values(ascending=False)
    assert set(table["kernel"]) - {REST} == set(summed.index[:3])
    for name in summed.index[:3]:
        per_rank = df[df["kernel"].astype(str) == name].groupby("rank")["dur_ns"].sum()
        row = spread(table, "kernel").set_index("kernel").loc[name]
        assert (row["ranks"], row["min_ns"], row["median_ns"]) == (len(per_rank), per_rank.min(), per_rank.median())
    for r, g in table.groupby("rank"):
        assert g["total_ns"].sum() == df.loc[df["rank"] == r, "dur_ns"].sum()  # nothing lost: (rest) holds the others
        assert g["share"].sum() == pytest.approx(1.0)
    assert top_rows(breakdown(df, by="kernel"), "kernel", 3).equals(table)
    local = breakdown(df[df["rank"] == 0], by="kernel", top=3)  # one rank: its own top, as before
    mine = df[df["rank"] == 0].groupby(df["kernel"].astype(str))["dur_ns"].sum().nlargest(3)
    assert set(local["kernel"]) - {REST} == set(mine.index)
