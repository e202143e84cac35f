"""A step's period (issue 28): its first activity's start to the next step's on the same rank,
what a throughput figure sees; unknown at the last step of a run of consecutive steps (a decode
sample's last token: the next sample's first token is no successor). Checked on a real GPU
capture against the events frame grouped with pandas, and on a copy whose tokens 4 and 5 are a
second sample's 1 and 2 (tests/test_step_occurrences.py renames them)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from tracelab.ingest.loading import load
from tracelab.reports.timeline.collectives import activity
from tracelab.reports.timeline.steps import step_table

DATA = Path(__file__).resolve().parent / "data"
TRACE = DATA / "decode-1gpu-steps-torch/rank0.pt.trace.json.gz"


def _first_start_ns(events: pd.DataFrame) -> pd.Series:
    rows = activity(events)
    return rows.dropna(subset=["step"]).groupby("step")["start_ns"].min()


def _period(table: pd.DataFrame) -> dict[int, float | None]:
    return {int(s): (None if math.isnan(p) else float(p)) for s, p in zip(table["step"], table["period_ns"])}


def test_the_period_is_the_next_steps_first_start_minus_this_ones():
    events = load(TRACE).events
    first = _first_start_ns(events)
    want = {int(s): (float(first[s + 1] - first[s]) if s + 1 in first.index else None) for s in first.index}
    got = _period(step_table(events))
    assert got == want and sum(v is None for v in got.values()) == 1
    assert all(v > 0 for v in got.values() if v is not None)


def test_a_samples_last_step_has_no_period(tmp_path):
    from helpers import renamed_token_copy  # tokens 1..5 -> 1, 2, 3 and a second sample's 11, 12
    events = load(renamed_token_copy(tmp_path)).events
    got = _period(step_table(events))
    first = _first_start_ns(events)
    assert sorted(got) == [1, 2, 3, 11, 12]
    assert got[3] is None and got[12] is None  # 3 -> 11 is not a successor: no period across samples
    assert got[1] == float(first[2] - first[1]) and got[11] == float(first[12] - first[11])


def test_periods_of_several_ranks_stay_within_each_rank():
    events = load(TRACE).events
    two = pd.concat([events, events.assign(rank=1, start_ns=events["start_ns"] + 10**9)], ignore_index=True)
    table = step_table(two)
    by_rank = {r: _period(g) for r, g in table.groupby("rank")}
    assert by_rank[0] == by_rank[1] == _period(step_table(events))
    assert np.isnan(table["period_ns"]).sum() == 2
