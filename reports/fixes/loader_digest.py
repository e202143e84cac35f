"""How long a rank's host spends in its data loader (the DataLoader's `__next__`: the profiler's
`enumerate(DataLoader)#...__next__` operator, a record_function or NVTX range of that name), as
reports/fixes/loader.py needs it: a per-rank digest of the host frame, made where the rank is
parsed. Pure."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracelab.core.regexes import searched
from tracelab.core.schema import RankData

from ..timeline.intervals import covered, merge_intervals
from ..timeline.stalls import shared_loader_rows  # the loader's rows, as the stalls leave them to it
from ..timeline.steps import median_per_step

MULTIPROCESS = re.compile(r"MultiProcessingDataLoaderIter", re.IGNORECASE)


def rank_loader(rank: RankData) -> dict:
    """The host's time in data-loader ranges and operators (their union, ns), their names (the
    longest first), whether any loader is multi-process, and the time the steps' ranges cover
    (the trace's host span where it has none) with how many steps; per step, the medians over
    steps of each step range's time and of the loader's time in its window (step_windows)."""
    host = rank.host
    if host is None or not len(host):
        return {"loader_ns": 0, "names": [], "multiprocess": False, "span_ns": 0, "steps": 0, "span_ns_per_step": 0.0,
                "loader_ns_per_step": 0.0}
    loader = host[shared_loader_rows(rank)]  # the stalls' loader rows: the host's names searched once a rank
    span_ns, n_steps = steps_span(host)
    windows = step_windows(host)
    # the column grouped by an array: a frame grouped by a Series first looks the Series up among
    # its column labels, and pandas' failed lookup formats the whole Series into its message
    by_name = loader["dur_ns"].groupby(loader["name"].astype(str).to_numpy()).sum().sort_values(ascending=False)
    return {"loader_ns": int(_union_ns(loader)), "names": by_name.index.tolist()[:3],
            "multiprocess": bool(searched(MULTIPROCESS, loader["name"]).any()),
            "span_ns": span_ns, "steps": n_steps, "span_ns_per_step": median_per_step(step_durations_ns(host), n_steps),
            "loader_ns_per_step": median_per_step(covered(*windows, *_union(loader)), n_steps)}


def steps_span(host: pd.DataFrame) -> tuple[int, int]:
    """(the time the host's step ranges cover, overlaps once; the host frame's first start to last
    end where it has none) and how many step ranges: what a host finding's share is of."""
    steps = host[host["kind"] == "step"]
    if len(steps):
        return int(_union_ns(steps)), int(len(steps))
    return int((host["start_ns"] + host["dur_ns"]).max() - host["start_ns"].min()), 0


def step_durations_ns(host: pd.DataFrame) -> np.ndarray:
    """Each step range's duration (ns), by start."""
    steps = host[host["kind"] == "step"]
    return steps["dur_ns"].to_numpy(dtype=np.int64)[np.argsort(steps["start_ns"].to_numpy(), kind="stable")]


def step_windows(host: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(begin, end) of each step range's window, by start: from the previous step range's end (the
    first: its own start) to its own end. Host time between two steps delays the next one, so it
    is that step's, as a stall between steps is (timeline/stalls.py)."""
    steps = host[host["kind"] == "step"].sort_values("start_ns", kind="stable")
    start = steps["start_ns"].to_numpy(dtype=np.int64)
    end = start + steps["dur_ns"].to_numpy(dtype=np.int64)
    return np.r_[start[:1], end[:-1]], end


def _union(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    return merge_intervals(start, start + rows["dur_ns"].to_numpy(dtype=np.int64))


def _union_ns(rows: pd.DataFrame) -> int:
    """The time the rows' intervals cover, overlaps counted once."""
    if not len(rows):
        return 0
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    end = start + rows["dur_ns"].to_numpy(dtype=np.int64)
    order = np.argsort(start, kind="stable")
    start, end = start[order], np.maximum.accumulate(end[order])
    gaps = np.maximum(0, start[1:] - end[:-1])  # a new interval begins past all before it
    return int(end[-1] - start[0] - gaps.sum())
