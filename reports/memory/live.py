"""What was live at each step's peak, for every step at once (reports/memory/memory.py). Pure.

A block allocated at row j (bytes > 0) of the rank's memory frame is live after row `at` while
its address's next event (a free, or a new block at the same address) comes after `at`: per
address, the last event up to `at` is that allocation. Each block is found once, with the
range of steps whose peak row falls inside its life (a sorted search), so a run of a thousand
steps costs one pass over the events, not one per step.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

GROUPS = ("scope", "op", "module")
BEFORE_TRACE = "(allocated before the trace)"
COLUMNS = ["step", "by", "name", "bytes"]


def next_same_address(mem: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(rows with an address, for each the row of its address's next event; len(mem) for none)."""
    has = mem["addr"].notna().to_numpy()
    pos = np.flatnonzero(has)
    codes = pd.factorize(mem["addr"].to_numpy()[has])[0]
    order = np.lexsort((pos, codes))
    nxt = np.full(len(pos), len(mem), dtype=np.int64)
    same = codes[order][1:] == codes[order][:-1]
    nxt[order[:-1][same]] = pos[order][1:][same]
    return pos, nxt


def live_pairs(mem: pd.DataFrame, ats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(k, j): block row j is live after row ats[k]; sorted by k, then j."""
    pos, nxt = next_same_address(mem)
    alloc = mem["bytes"].to_numpy()[pos] > 0
    j, end = pos[alloc], nxt[alloc]
    order = np.argsort(ats, kind="stable")
    sorted_ats = ats[order]
    lo, hi = np.searchsorted(sorted_ats, j, "left"), np.searchsorted(sorted_ats, end, "left")
    counts = np.maximum(hi - lo, 0)
    block = np.repeat(np.arange(len(j)), counts)
    offset = np.arange(len(block)) - np.repeat(np.cumsum(counts) - counts, counts)
    k, rows = order[lo[block] + offset], j[block]
    by_k = np.lexsort((rows, k))
    return k[by_k], rows[by_k]


def live_tops(mem: pd.DataFrame, ats: np.ndarray, peaks: np.ndarray, steps: pd.Series, top: int | None) -> pd.DataFrame:
    """Per step k (its peak row ats[k], its allocated total peaks[k]): the live blocks summed by
    scope, op and module (the `top` largest of each, ties in order of first appearance; module
    left out where no live block names one) and BEFORE_TRACE, the total less those blocks;
    COLUMNS, in step order then GROUPS order."""
    if not mem["addr"].notna().any():  # no block can be followed to its free: none is known live, nor the rest
        return pd.DataFrame({"step": pd.array([], dtype="Int64"), "by": [], "name": [], "bytes": np.array([], np.int64)})
    k, j = live_pairs(mem, np.asarray(ats, dtype=np.int64))
    sizes = mem["bytes"].to_numpy()[j].astype(np.int64)
    parts = []
    for rank_of_by, by in enumerate(GROUPS):
        names = mem[by].to_numpy()[j]
        frame = pd.DataFrame({"k": k, "name": pd.Series(names).replace("", "(none)").astype(str).to_numpy(),
                              "bytes": sizes})
        if by == "module":
            named = pd.Series(names.astype(bool)).groupby(k).any()
            frame = frame[np.isin(k, named.index[named.to_numpy()])]
        sums = frame.groupby(["k", "name"], sort=False)["bytes"].sum().reset_index()
        sums = sums.sort_values(["k", "bytes"], ascending=[True, False], kind="stable")
        if top is not None:
            sums = sums.groupby("k", sort=False).head(top)
        parts.append(sums.assign(order=rank_of_by, by=by))
    live_bytes = np.bincount(k, weights=sizes, minlength=len(ats)) if len(k) else np.zeros(len(ats))
    known = ~np.isnan(peaks)
    before = pd.DataFrame({"k": np.flatnonzero(known), "name": BEFORE_TRACE, "order": len(GROUPS),
                           "by": "before_trace",
                           "bytes": peaks[known].astype(np.int64) - live_bytes[known].astype(np.int64)})
    out = pd.concat([*parts, before], ignore_index=True).sort_values(["k", "order"], kind="stable")
    step = steps.reset_index(drop=True).astype("Int64")
    return pd.DataFrame({"step": step.iloc[out["k"].to_numpy()].to_numpy(), "by": out["by"].to_numpy(),
                         "name": out["name"].to_numpy(), "bytes": out["bytes"].to_numpy(dtype=np.int64)})
