"""classify.classified by categories and codes: the same kernel and op_class columns, categories
in the same order, as pandas' map of every row (the way it was computed before, written here)."""
from __future__ import annotations

import pandas as pd
import pytest

from tracelab.core import classify
from tracelab.core.schema import OP_CLASSES


def _by_rows(names: pd.Series, kinds: list[str]) -> tuple[pd.Series, list]:
    cat = names.astype("category")
    kernels = cat.map({n: classify.canonical(str(n)) for n in cat.cat.categories}).astype("category")
    classes = []
    for kernel, kind in zip(kernels, kinds):
        if kind in ("memcpy", "memset"):
            classes.append("memory")
        elif pd.isna(kernel):
            classes.append(classify.classify_cpu_op("<NA>") if kind == "cpu_op" else None)
        else:
            classes.append(classify.classify_cpu_op(kernel) if kind == "cpu_op" else classify.classify_one(kernel))
    return kernels, classes


@pytest.mark.parametrize("names", [
    ["a::z", "b", None],  # no two names share a kernel: categories in the names' order, not sorted
    ["a::z", "b", "c::z", "void ncclKernel_AllReduce<float>(int)", None, "b"],  # shared: sorted
    ["_ZN4c10d22oneShotAllReduceKernelIfEEvv", "MmBackward0", "memcpy", "memcpy"],
    [],
])
def test_same_as_mapping_every_row(names):
    kinds = ["cpu_op" if n == "MmBackward0" else "memcpy" if n == "memcpy" else "kernel" for n in names]
    series = pd.Series(names, dtype="string")
    want_kernels, want_classes = _by_rows(series, kinds)
    got_kernels = classify._canonical_column(series.astype("category"))
    pd.testing.assert_series_equal(got_kernels, want_kernels, check_exact=True)
    assert list(got_kernels.cat.categories) == list(want_kernels.cat.categories)
    got = classify.op_classes(got_kernels, pd.Series(kinds, dtype=object))
    assert list(got.categories) == list(OP_CLASSES)
    assert [None if pd.isna(c) else c for c in got] == want_classes
