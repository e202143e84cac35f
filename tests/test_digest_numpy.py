"""Issue 30, fourth pass: the numpy steps that replaced pandas ones in the per-rank digests, each
against the formulation it replaced, on random inputs and on the edges (ties, empty, missing,
negative durations, segments that overlap)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracelab.reports.fixes import ddp_steps
from tracelab.reports.idle import host as H
from tracelab.reports.idle import idle as I
from tracelab.reports.timeline.intervals import covered, run_cummax
from tracelab.core.schema import str_array

RNG = np.random.default_rng(30)


@pytest.mark.parametrize("runs, low, high", [(1, 0, 10), (7, -5, 5), (40, 1_700_000_000_000_000_000, 1_700_000_000_100_000_000),
                                             (3, 0, 1)])
def test_run_cummax_is_groupby_cummax(runs, low, high):
    sizes = RNG.integers(1, 30, runs)
    values = RNG.integers(low, high, sizes.sum(), dtype=np.int64)
    first = np.zeros(sizes.sum(), bool)
    first[np.r_[0, np.cumsum(sizes)[:-1]]] = True
    want = pd.Series(values).groupby(np.cumsum(first), sort=False).cummax().to_numpy()
    assert np.array_equal(run_cummax(values, first), want)


def test_run_cummax_too_wide_for_int64_falls_back():
    values = np.array([np.iinfo(np.int64).min // 2, 0, np.iinfo(np.int64).max // 2, -1], np.int64)
    first = np.array([True, False, True, False])
    assert run_cummax(values, first).tolist() == [values[0], 0, values[2], values[2]]
    assert run_cummax(np.zeros(0, np.int64), np.zeros(0, bool)).tolist() == []


def _segments(disjoint: bool) -> tuple[np.ndarray, np.ndarray]:
    if disjoint:
        bounds = np.unique(RNG.integers(0, 1000, 40))
        bounds = bounds[: len(bounds) // 2 * 2]
        return bounds[0::2], bounds[1::2]
    start = np.sort(RNG.integers(0, 1000, 20))
    return start, start + RNG.integers(1, 200, 20)


@pytest.mark.parametrize("disjoint", [True, False])
def test_overlaps_is_covered_positive(disjoint):
    for _ in range(50):
        u_start, u_end = _segments(disjoint)
        start = RNG.integers(-50, 1050, 300)
        end = start + RNG.integers(-5, 100, 300)  # negative durations too
        assert np.array_equal(H._overlaps(start, end, u_start, u_end), covered(start, end, u_start, u_end) > 0)
    none = np.zeros(0, np.int64)
    assert H._overlaps(np.array([1]), np.array([5]), none, none).tolist() == [False]


@pytest.mark.parametrize("values", [["gemm", None, "elementwise", "gemm"], [1.5, None, 2.0], ["a"], []])
def test_str_array_is_astype_str(values):
    for column in (pd.Series(pd.Categorical(values)), pd.Series(values, dtype="string"), pd.Series(values, dtype=object)):
        want, got = column.astype(str).to_numpy(dtype=object), str_array(column)
        assert [(type(x), x) for x in want] == [(type(x), x) for x in got]


def test_first_per_step_is_groupby_min_reindexed():
    step = RNG.integers(-1, 6, 400)
    start = RNG.integers(1_700_000_000_000_000_000, 1_700_000_000_001_000_000, 400)
    on = RNG.random(400) < 0.3
    want = pd.Series(start[on]).groupby(step[on]).min().reindex(step).to_numpy(dtype=np.float64)
    assert np.array_equal(ddp_steps._first_per_step(step, start, on), want, equal_nan=True)


def test_step_sums_at_is_groupby_reindexed():
    gaps = pd.DataFrame({"step": RNG.integers(0, 5, 300), "rank": RNG.integers(0, 3, 300).astype(np.int32),
                         "a_ns": RNG.integers(0, 10**9, 300), "b_ns": RNG.integers(0, 10**9, 300)})
    step, rank = np.array([0, 4, 9, 2]), np.array([1, 2, 0, 0])
    want = (gaps.groupby(["step", "rank"])[["a_ns", "b_ns"]].sum()
            .reindex(pd.MultiIndex.from_arrays([step, rank])).fillna(0).to_numpy(dtype=np.int64))
    assert np.array_equal(I._sums_at(step, rank, gaps, ["a_ns", "b_ns"]), want)
    assert I._sums_at(step, rank, gaps.iloc[:0], ["a_ns"]).tolist() == [[0]] * 4


@pytest.mark.parametrize("categories, values", [(["b", "a", "c"], ["a", "b", None, "c", "a"]), ([1, "1", 2.5], [1, "1", 2.5, None]),
                                                (["x"], []), (["z", "nan"], ["nan", None, "z"])])
def test_sorted_codes_is_factorize_of_str(categories, values):
    from tracelab.reports.stats.noise import sorted_codes

    column = pd.Series(pd.Categorical(values, categories=categories))
    mask = RNG.random(len(column)) < 0.8
    want, got = pd.factorize(column.astype(str).to_numpy(dtype=object)[mask], sort=True), sorted_codes(column, mask)
    assert want[0].tolist() == got[0].tolist()
    assert [(type(x), x) for x in want[1]] == [(type(x), x) for x in got[1]]
