"""Rows grouped by one integer key with numpy alone: what a pandas groupby(sort=True) gives
for sums, minima, maxima and first values, without a groupby's fixed cost per call (the
who-waits analysis groups the same few hundred rows many times per run and rank)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Groups:
    """`order` sorts the rows by key (stable: a group's rows keep their order), `keys` are the
    distinct keys ascending, `starts` where each group begins in that order, `of` each sorted
    row's group (its position in `keys`)."""
    order: np.ndarray
    keys: np.ndarray
    starts: np.ndarray
    of: np.ndarray

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Per group, the sum of `values` (rows in their own order); integers stay exact."""
        return np.add.reduceat(values[self.order], self.starts) if len(self.starts) else values[:0]

    def min(self, values: np.ndarray) -> np.ndarray:
        return np.minimum.reduceat(values[self.order], self.starts) if len(self.starts) else values[:0]

    def max(self, values: np.ndarray) -> np.ndarray:
        return np.maximum.reduceat(values[self.order], self.starts) if len(self.starts) else values[:0]

    def first(self, column: pd.Series) -> pd.api.extensions.ExtensionArray:
        """Per group, its first value that is not missing, missing where none (groupby's "first"),
        in the column's own dtype."""
        values = column.array.take(self.order)
        valid = np.flatnonzero(~np.asarray(pd.isna(values), dtype=bool))
        at = np.full(len(self.keys), -1, np.int64)
        groups, first = np.unique(self.of[valid], return_index=True)
        at[groups] = valid[first]
        return values.take(at, allow_fill=bool((at < 0).any()))


def by(key: np.ndarray) -> Groups:
    """Groups of the rows of `key` (integers, none missing)."""
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    change = np.r_[True, ordered[1:] != ordered[:-1]] if len(ordered) else np.zeros(0, bool)
    return Groups(order, ordered[change], np.flatnonzero(change), np.cumsum(change) - 1)
