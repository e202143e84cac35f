"""The parse's fast paths (issue 30) against the pandas or plain-Python ways they replace: each
must give the same values, dtypes, categories in order and code widths on good and odd input."""
from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from tracelab.core import classify, schema
from tracelab.parsers._steps import Names, main_threads, name_mask, per_name

TEXTS = [
    pd.Series(["b", None, "a", "b"], dtype="string"),
    pd.Series(["é", "e", "E", "ä"], dtype="string", index=[5, 6, 7, 8], name="n"),
    pd.Series(["b", "a"], dtype=object),
    pd.Series(["b", np.nan, "a"], dtype=object),
    pd.Series(["x", 1, "x"], dtype=object),  # not all text: astype's way
    pd.Series([], dtype="string"),
]


def _same_categorical(a, b) -> bool:
    a, b = pd.Series(a).array, pd.Series(b).array
    return (a.dtype == b.dtype and list(a.categories) == list(b.categories) and a.categories.dtype == b.categories.dtype
            and np.array_equal(a.codes, b.codes) and a.codes.dtype == b.codes.dtype)


@pytest.mark.parametrize("column", TEXTS)
def test_as_category_is_astype(column):
    got, want = classify.as_category(column), column.astype("category")
    assert _same_categorical(got, want) and got.index.equals(want.index) and got.name == want.name


@pytest.mark.parametrize("values", [["kernel", "memset", "kernel"], np.array(["cpu_op", None, "zzz"], dtype=object),
                                   ["memcpy", np.nan], []])
def test_categorical_with_categories_is_pandas(values):
    assert _same_categorical(schema._categorical(values, schema.KINDS), pd.Categorical(values, categories=list(schema.KINDS)))


@pytest.mark.parametrize("value, dtype, categories", [
    (-1, "int32", None), (np.nan, "float64", None), (-1, "int16", None), ("", "string", None), (pd.NA, "Int64", None),
    (3, "Int64", None), ("torch", "category", schema.SOURCES), ("zzz", "category", schema.SOURCES),
    (np.nan, "category", schema.SOURCES), ("x", "category", None)])
def test_broadcast_is_the_list_of_n(value, dtype, categories):
    n = 4
    got = schema._broadcast(value, n, dtype, categories)
    if dtype == "category":
        want = pd.Categorical([value] * n, categories=list(categories)) if categories else pd.Categorical([value] * n)
        assert _same_categorical(got, want)
    elif dtype in ("string", "Int64"):
        want = pd.array([value] * n, dtype=dtype)
        assert got.dtype == want.dtype and got.equals(want)
    else:
        want = np.asarray([value] * n, dtype=dtype)
        assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)


def test_na_ints_is_pd_array_of_na():
    got, want = schema.na_ints(5), pd.array([pd.NA] * 5, dtype="Int64")
    assert got.dtype == want.dtype and got.equals(want) and np.array_equal(got._data, want._data)
    got[[1, 3]] = [7, 9]  # filled in place as the parser does
    assert got.tolist() == [pd.NA, 7, pd.NA, 9, pd.NA]


def test_names_index_and_per_name_match_the_dict_way():
    names = Names(["b", "a", "b", "c", "a"])
    verdict = lambda n: n != "a"  # noqa: E731
    assert name_mask(names, verdict).tolist() == [verdict(n) for n in names]
    names += ["a", "d"]  # grown after its index was made: made again
    assert per_name(names, ord, np.int64).tolist() == [ord(n) for n in names]
    assert names.distinct()[0] == ["b", "a", "c", "d"]
    assert name_mask(Names(), verdict).dtype == bool and not len(name_mask([], verdict))


@pytest.mark.slow
def test_main_threads_is_the_groupby():
    def groupby_way(pid, tid, dur_ns):
        total = pd.DataFrame({"pid": pid, "tid": tid, "dur_ns": np.asarray(dur_ns, dtype=np.float64)}).groupby(
            ["pid", "tid"])["dur_ns"].sum()
        return {int(p): int(key[1]) for p, key in total.groupby(level=0).idxmax().items()}

    rng = np.random.default_rng(30)
    for _ in range(200):  # ties (durations 0..4) included: the first thread of equals
        n = int(rng.integers(1, 40))
        pid, tid, dur = rng.integers(0, 3, n), rng.integers(-2, 4, n), rng.integers(0, 5, n)
        assert main_threads(pid, tid, dur) == groupby_way(pid, tid, dur)


def test_host_frame_has_na_check():
    names = pd.Series(["a", "b"], dtype="string")
    assert not schema._has_na(names) and schema._has_na(pd.Series(["a", None], dtype="string"))
    kinds = pd.Categorical(["sync", "cpu_op"], categories=list(schema.HOST_KINDS))
    with pytest.raises(schema.SchemaError):
        schema.host_frame(kinds, ["a", None], [1, 1], [5, 3], [1, 1])
    frame = schema.host_frame(kinds, ["a", "b"], [1, 2], [5, 3], [1, 1])
    assert frame["name"].tolist() == ["b", "a"] and frame["start_ns"].tolist() == [3, 5]


def test_host_frame_orders_as_sort_values():
    random.seed(30)
    n = 500
    start = [random.randrange(50) for _ in range(n)]  # many equal starts: the sort must be stable
    kinds = pd.Categorical([random.choice(schema.HOST_KINDS) for _ in range(n)], categories=list(schema.HOST_KINDS))
    names, tid, dur = [f"n{i}" for i in range(n)], list(range(n)), [1] * n
    got = schema.host_frame(kinds, names, tid, start, dur)
    want = pd.DataFrame({"kind": kinds, "name": pd.array(names, dtype="string"), "tid": np.array(tid),
                         "start_ns": np.array(start), "dur_ns": np.array(dur)}).sort_values(
        "start_ns", kind="stable", ignore_index=True)
    assert got.equals(want) and list(got.dtypes) == list(want.dtypes)


def test_kineto_frame_orders_as_sort_values():
    from tracelab.parsers import chrome

    rng = np.random.default_rng(31)
    n = 300
    cols = {"kind": np.array(["kernel"] * n, dtype=object), "name": [f"k{i % 7}" for i in range(n)],
            "device": rng.integers(0, 2, n), "stream": rng.integers(7, 9, n), "start_ns": rng.integers(0, 20, n),
            "dur_ns": rng.integers(0, 5, n), "msg_bytes": np.full(n, np.nan), "process_group": [""] * n,
            "step": schema.na_ints(n)}
    want = schema.coerce({**cols, "rank": 3, "source": "torch", "count": 1}, n_rows=n, spec=schema.PARSED).sort_values(
        ["start_ns", "device", "stream"], kind="stable", ignore_index=True)
    got = chrome._frame(cols, 3)
    assert got.equals(want) and list(got.dtypes) == list(want.dtypes)
    cols["device"] = cols["device"].astype(float)  # a key that is no integer array: the frame's sort, same rows
    assert chrome._frame(cols, 3).equals(want)
