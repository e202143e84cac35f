"""Issue 42: the numpy steps that replaced pandas ones in the who-waits analysis (collectives.match,
verdicts.waits and lateness, stats.groups), each against the pandas formulation it replaced, on
random inputs and on the edges (ties, missing keys and steps, one rank, sums whose float order matters)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracelab.reports import verdicts as V
from tracelab.reports.stats import groups as G
from tracelab.reports.timeline import collectives as C

RNG = np.random.default_rng(42)


def _same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert got.to_json() == want.to_json()


@pytest.mark.parametrize("n, keys", [(0, 1), (1, 1), (50, 3), (400, 40)])
def test_groups_are_a_groupby(n, keys):
    key = RNG.integers(-keys, keys, n)
    value = RNG.integers(-10**15, 10**15, n, dtype=np.int64)
    step = pd.array(np.where(RNG.random(n) < 0.4, None, RNG.integers(0, 9, n)), dtype="Int64")
    g = G.by(key)
    frame = pd.DataFrame({"key": key, "value": value, "step": step}).groupby("key", sort=True)
    assert np.array_equal(g.keys, frame.size().index.to_numpy())
    assert np.array_equal(g.sum(value), frame["value"].sum().to_numpy())
    assert np.array_equal(g.min(value), frame["value"].min().to_numpy())
    assert np.array_equal(g.max(value), frame["value"].max().to_numpy())
    first = pd.Series(g.first(pd.Series(step)), dtype="Int64")
    pd.testing.assert_series_equal(first, frame["step"].first().reset_index(drop=True), check_names=False)


def _pandas_match(rows: pd.DataFrame) -> pd.DataFrame:
    """collectives.match as pandas said it: the formulation the numpy one replaced."""
    rows = rows.assign(size=rows["msg_bytes"].fillna(-1)).sort_values(["rank", "arrival_ns"], kind="stable")
    rows["instance"] = rows.groupby(["rank", "process_group", "kernel", "size"]).cumcount()
    keys = ["process_group", "kernel", "size", "instance"]
    rows["ranks"] = rows.groupby(keys, sort=False)["rank"].transform("size")
    rows = rows[rows["ranks"] > 1].copy().sort_values(["arrival_ns", "rank"], kind="stable")
    g = rows.groupby(keys, sort=False)
    rows["last_arrival_ns"] = g["arrival_ns"].transform("max")
    rows["last_rank"] = g["rank"].transform("last").astype("Int64")
    tied = (rows["arrival_ns"] == rows["last_arrival_ns"]).groupby([rows[k] for k in keys]).transform("sum") > 1
    rows.loc[tied, "last_rank"] = pd.NA
    rows["wait_ns"] = rows["last_arrival_ns"] - rows["arrival_ns"]
    rows["transfer_ns"] = (rows["end_ns"] - rows["last_arrival_ns"]).clip(lower=0)
    first = g["arrival_ns"].transform("min")
    rows["collective"] = rows.assign(first_ns=first).groupby(["first_ns", *keys], sort=True, dropna=False).ngroup()
    rows["type"] = rows["kernel"].map(C.collective_type)
    counts = rows.dropna(subset=["step"]).groupby([*keys, "step"]).size().rename("n").reset_index()
    mode = counts.sort_values(["n", "step"], ascending=[False, True]).drop_duplicates(keys).set_index(keys)["step"]
    rows["step"] = pd.Series(mode.reindex(pd.MultiIndex.from_frame(rows[keys])).to_numpy(), index=rows.index,
                             dtype="Int64")
    rows["msg_bytes"] = rows["size"].where(rows["size"] >= 0)
    return rows.sort_values(["collective", "rank"], kind="stable")[C.COLUMNS].reset_index(drop=True)


def _comm_rows(ranks: int, per_rank: int, groups: list, tick_ns: int) -> pd.DataFrame:
    """Random communication rows: a few groups, kernels and sizes, arrivals on a coarse tick (ties)."""
    n = ranks * per_rank
    arrive = RNG.integers(0, 3, n) * tick_ns
    return pd.DataFrame({"rank": np.repeat(np.arange(ranks), per_rank),
                         "process_group": np.array(groups, dtype=object)[RNG.integers(0, len(groups), n)],
                         "kernel": np.array(["ncclAllReduce", "ncclAllGather", "ncclSend"], dtype=object)[RNG.integers(0, 3, n)],
                         "msg_bytes": np.where(RNG.random(n) < 0.3, np.nan, RNG.integers(1, 3, n) * 1024.0),
                         "step": pd.array(np.where(RNG.random(n) < 0.2, None, RNG.integers(0, 4, n)), dtype="Int64"),
                         "arrival_ns": arrive, "end_ns": arrive + RNG.integers(0, 5_000, n)})


@pytest.mark.parametrize("ranks, per_rank, groups, tick_ns", [(2, 30, ["", "pg1"], 1_000), (5, 40, ["0", "1", "2"], 1),
                                                              (3, 20, ["a", None], 1_000), (1, 10, [""], 1_000),
                                                              (8, 6, [""], 10**6)])
def test_match_is_the_pandas_matching(ranks, per_rank, groups, tick_ns):
    rows = _comm_rows(ranks, per_rank, groups, tick_ns)
    want = _pandas_match(rows)
    got = C.match(rows)
    _same(got, want)
    if ranks > 1:
        assert len(got) and got["last_rank"].isna().any()  # the coarse tick made ties: nobody last there


def _coll(ranks: int, steps: int, spread_ns: float) -> pd.DataFrame:
    """Matched collectives of random rows, four per step, arrivals far from 0 (floats lose digits there)."""
    rows = _comm_rows(ranks, 4 * steps, [""], 1).assign(
        kernel="ncclAllReduce", msg_bytes=1024.0, step=pd.array(np.repeat(np.arange(steps), 4).tolist() * ranks, dtype="Int64"))
    start = 1_700_000_000_000_000_000 + np.tile(np.arange(4 * steps) * 10**7, ranks)
    rows["arrival_ns"] = start + RNG.normal(0, spread_ns, len(rows)).astype(np.int64)
    rows["end_ns"] = rows["arrival_ns"] + 10_000
    return C.match(rows)


@pytest.mark.parametrize("ranks, steps, spread_ns", [(2, 3, 1e5), (3, 20, 1e6), (7, 5, 3e3)])
def test_waits_and_lateness_are_the_pivot_tables(ranks, steps, spread_ns):
    coll = _coll(ranks, steps, spread_ns)
    c = coll.merge(V.per_collective(coll)[["collective", "unit"]], on="collective")
    _same(V.waits(coll), c.pivot_table(index="unit", columns="rank", values="wait_ns", aggfunc="sum",
                                       fill_value=0).astype("int64"))
    others = (c.groupby("collective")["arrival_ns"].transform("sum") - c["arrival_ns"]) / (c["ranks"] - 1)
    want = c.assign(late_ns=c["arrival_ns"] - others).pivot_table(index="unit", columns="rank", values="late_ns",
                                                                  aggfunc="sum", fill_value=0)
    _same(V.lateness(coll), want)  # to the last bit: the same compensated sum, in the same order
