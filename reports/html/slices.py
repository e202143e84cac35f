"""Slices over a rank's timed rows, for timeline views: lanes that keep overlapping
intervals of one stream apart, nested scope slices over the kernels they hold, and one
slice per step. Pure numpy/pandas: arrays and frames in, arrays and frames out.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def lanes(start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """Per interval (sorted by start), the first lane free at its start, so that the
    intervals of one lane never overlap (kernels of one stream overlap under PDL)."""
    out = np.zeros(len(start_ns), dtype=np.int64)
    if len(start_ns) < 2 or (start_ns[1:] >= np.maximum.accumulate(end_ns)[:-1]).all():
        return out
    free_at: list[int] = []
    for i, (s, e) in enumerate(zip(start_ns.tolist(), end_ns.tolist())):
        lane = next((k for k, t in enumerate(free_at) if t <= s), len(free_at))
        if lane < len(free_at):
            free_at[lane] = e
        else:
            free_at.append(e)
        out[i] = lane
    return out


def scope_slices(scope: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> pd.DataFrame:
    """Nested slices over intervals that never overlap and are sorted by start (one lane of
    one stream), each under a scope path ("a/b", "" for none): at each depth, a run of
    consecutive intervals under one path is one slice.
    Columns: name (the innermost part), path, depth, start_ns, end_ns."""
    cols = ["name", "path", "depth", "start_ns", "end_ns"]
    codes, scopes = pd.factorize(scope, sort=False)
    parts = [str(s).split("/") if s else [] for s in scopes]
    out = []
    for depth in range(1, max(map(len, parts), default=0) + 1):
        prefixes = np.array(["/".join(p[:depth]) if len(p) >= depth else "" for p in parts], dtype=object)
        path = prefixes[codes]
        first = np.flatnonzero(np.r_[True, path[1:] != path[:-1]])
        keep = path[first] != ""
        out.append(pd.DataFrame({"path": path[first][keep], "depth": depth, "start_ns": start_ns[first][keep],
                                 "end_ns": np.maximum.reduceat(end_ns, first)[keep]}))
    if not out:
        return pd.DataFrame(columns=cols)
    df = pd.concat(out, ignore_index=True)
    df["name"] = [p.rsplit("/", 1)[-1] for p in df["path"]]
    return df[cols]


def step_slices(rows: pd.DataFrame) -> pd.DataFrame:
    """One slice per step of a rank: first start to last end of its rows, cut at the next
    step's start so that the slices of the steps track never overlap."""
    if "step" not in rows.columns or not rows["step"].notna().any():
        return pd.DataFrame(columns=["step", "start_ns", "end_ns"])
    out = (rows[rows["step"].notna()].groupby("step").agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
           .sort_values("start_ns").reset_index())
    out["end_ns"] = np.minimum(out["end_ns"], out["start_ns"].shift(-1).fillna(np.iinfo(np.int64).max)).astype("int64")
    return out
