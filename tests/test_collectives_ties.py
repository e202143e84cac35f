"""Two collectives whose first arrivals tie (Kineto's microsecond clock) are two collectives, not
one (reports/timeline/collectives.match numbered them by the first arrival alone)."""
from __future__ import annotations

import pandas as pd

from tracelab.reports.timeline.collectives import match


def _rows(kernel: str, group: str, arrivals: list[int]) -> list[dict]:
    return [{"rank": r, "process_group": group, "kernel": kernel, "msg_bytes": 1024.0, "arrival_ns": a,
             "end_ns": a + 5_000, "step": 1} for r, a in enumerate(arrivals)]


def test_collectives_with_tied_first_arrivals_stay_apart():
    rows = pd.DataFrame(_rows("ncclAllReduce", "0", [1_000, 3_000]) + _rows("ncclAllGather", "1", [1_000, 2_000]))
    out = match(rows)
    assert out["collective"].nunique() == 2
    per = out.groupby("collective").agg(kernel=("kernel", "unique"), last=("last_arrival_ns", "first"))
    assert sorted(len(k) for k in per["kernel"]) == [1, 1]  # each id one kernel: never merged
    assert sorted(per["last"]) == [2_000, 3_000]


def test_ids_follow_the_first_arrival():
    rows = pd.DataFrame(_rows("b", "0", [5_000, 6_000]) + _rows("a", "0", [1_000, 9_000]) + _rows("c", "0", [3_000, 3_500]))
    out = match(rows).drop_duplicates("collective").sort_values("collective")
    assert out["kernel"].tolist() == ["a", "c", "b"]
