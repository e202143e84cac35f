"""What was live at each step's peak, found for every step at once (reports/memory/live.py), equals
the per-step walk it replaced (kept here as the reference: per address the last event up to the
peak, live where it is an allocation), on real captures and on a made-up frame with an address
used twice, a zero-byte event, ties in size and steps without a module name; and the allocator's
calls per step equal a filter of the host frame."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracelab.ingest.loading import load_many
from tracelab.reports.memory.live import BEFORE_TRACE, GROUPS, live_tops
from tracelab.reports.memory.memory import AllocatorCalls, is_allocator, rank_memory

from helpers import DATA


def _reference(mem: pd.DataFrame, at: int, allocated_bytes: float, top: int | None) -> pd.DataFrame:
    upto = mem.iloc[:at + 1]
    upto = upto[upto["addr"].notna()]
    live = upto.groupby("addr", sort=False).tail(1)
    live = live[live["bytes"] > 0]
    parts = []
    for by in GROUPS:
        if by == "module" and not live[by].astype(bool).any():
            continue
        sums = live.groupby(live[by].replace("", "(none)"), sort=False)["bytes"].sum().sort_values(
            ascending=False, kind="stable")
        sums = sums if top is None else sums.head(top)
        parts.append(pd.DataFrame({"by": by, "name": sums.index.astype(str), "bytes": sums.to_numpy(dtype=np.int64)}))
    if not np.isnan(allocated_bytes):
        parts.append(pd.DataFrame({"by": ["before_trace"], "name": [BEFORE_TRACE],
                                   "bytes": [int(allocated_bytes) - int(live["bytes"].sum())]}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({"by": [], "name": [], "bytes": []})


def _check(mem: pd.DataFrame, ats: list[int], peaks: list[float], steps: list, top: int | None) -> None:
    got = live_tops(mem, np.array(ats), np.array(peaks, dtype=float), pd.Series(steps, dtype="Int64"), top)
    for k, (at, peak, step) in enumerate(zip(ats, peaks, steps)):
        mine = got[got["step"].eq(step).fillna(False) if step is not None else got["step"].isna()]
        want = _reference(mem, at, peak, top)
        assert mine["by"].tolist() == want["by"].tolist() and mine["name"].tolist() == want["name"].tolist(), k
        assert mine["bytes"].tolist() == want["bytes"].tolist(), k


def test_made_up_frame():
    mem = pd.DataFrame({
        "addr": [1, 2, 3, 1, 1, 4, 2, np.nan, 5, 3, 6],
        "bytes": [100, 50, 50, -100, 80, 0, -50, 10, 50, -50, 50],
        "scope": ["a", "b", "", "a", "c", "d", "b", "x", "b", "", "a"],
        "op": ["mm", "add", "add", "mm", "mm", "cat", "add", "y", "add", "add", "mm"],
        "module": ["", "", "", "", "", "", "", "", "m", "", ""]})
    _check(mem, [2, 4, 6, 8, 10], [300.0, 400.0, np.nan, 500.0, 260.0], [1, 2, 3, 4, 5], top=None)
    _check(mem, [10, 0, 5], [1000.0, 100.0, 90.0], [7, 8, 9], top=1)  # peaks out of order, one name each


@pytest.mark.parametrize("trace", ["train-2cpu-memory-torch/rank0.pt.trace.json.gz",
                                   "train-2cpu-memory-equal-torch/rank1.pt.trace.json.gz"])
def test_real_captures(trace):
    p = load_many([DATA / trace], workers=1)[0]
    r = rank_memory(p.memory, p.host, 0, top=3)
    device = r.steps["device"].iloc[0]
    mem = p.memory[p.memory["device"] == device].reset_index(drop=True)
    allocated = mem["total_allocated_bytes"].astype(float).to_numpy()
    for step, g in r.top.groupby("step"):
        row = r.steps[r.steps["step"] == step].iloc[0]
        at = int(np.flatnonzero(mem["time_ns"].to_numpy() == row["peak_at_ns"])[-1])  # the peak's row
        want = _reference(mem, at, float(row["peak_allocated_bytes"]), 3)
        assert g["bytes"].tolist() == want["bytes"].tolist() and g["name"].tolist() == want["name"].tolist()
        calls = p.host[is_allocator(p.host)]
        span = r.spans[r.spans["step"] == step].iloc[0]
        inside = calls[calls["start_ns"].between(int(span["start_ns"]), int(span["end_ns"]))]
        assert (row["alloc_calls"], row["alloc_ns"]) == (len(inside), inside["dur_ns"].sum())
        assert np.isfinite(allocated).any()


def test_allocator_calls_without_a_host_frame():
    assert AllocatorCalls(None).between(0, 10) == {"alloc_calls": None, "alloc_ns": None, "alloc_sync_calls": None}
