"""Test helper: multi-rank captures with known lateness, made from a real trace's events by
shifting timestamps. Every function returns the new events and a line saying what it shifted.

The model is NCCL's: a rank's collective kernel starts when the rank gets there and ends
when the last rank has arrived and the transfer is done; everything after it on that rank
moves with that end. Lateness is added before chosen collectives of chosen ranks, as an
inserted kernel (`extra_work`, more GPU work) or as a gap (an idle GPU: the host was late).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from tracelab.core import schema
from tracelab.reports.timeline.collectives import collectives

EXTRA_KERNEL = "extra_work"


def ranks_from_one(df: pd.DataFrame, rank: int, world: int, copies: int = 1) -> tuple[pd.DataFrame, str]:
    """`world` ranks doing exactly the work of `rank` (its events copied), repeated `copies`
    times in time with the steps renumbered: equal work, the base of the other cases."""
    one = df[df["rank"] == rank]
    span = int((one["start_ns"] + one["dur_ns"]).max()) + 1_000_000
    n_steps = int(one["step"].max()) + 1 if one["step"].notna().any() else 0
    laps = [one.assign(start_ns=one["start_ns"] + i * span, step=one["step"] + i * n_steps) for i in range(copies)]
    lap = pd.concat(laps, ignore_index=True)
    out = pd.concat([lap.assign(rank=np.int32(r)) for r in range(world)], ignore_index=True)
    return out, f"rank {rank}'s events copied to ranks 0..{world - 1}, {copies} time(s) 1 ms apart"


def make_late(df: pd.DataFrame, late: Callable[[int, int, int], int], idle: bool = False,
              seed: int | None = None, jitter_ns: int = 0) -> tuple[pd.DataFrame, str]:
    """Add late(collective, step, rank) ns before each collective kernel of each rank (an
    `extra_work` kernel, or a gap when `idle`), plus a random idle gap of up to `jitter_ns`
    (seeded) on every rank; replay the collectives so that each ends together."""
    df = df.sort_values(["rank", "start_ns"], kind="stable", ignore_index=True)
    coll = collectives(df)
    rng = np.random.default_rng(seed)
    start = df["start_ns"].to_numpy(dtype=np.int64).copy()
    dur = df["dur_ns"].to_numpy(dtype=np.int64).copy()
    row_of = _collective_rows(df, coll)
    shift = {int(r): 0 for r in df["rank"].unique()}
    done = {r: -1 for r in shift}  # last row already shifted, per rank
    extra_rows, total = [], 0
    for c, group in coll.groupby("collective", sort=True):
        arrive, orig_end = {}, {}
        for _, m in group.iterrows():
            r, i = int(m["rank"]), row_of[(c, int(m["rank"]))]
            _shift_rows(df, start, r, done[r], i, shift[r])
            done[r] = i
            add = int(late(c, -1 if pd.isna(m["step"]) else int(m["step"]), r))
            if add and not idle:
                extra_rows.append(_extra(df.loc[i], start[i], add))
            total += add
            gap = int(rng.integers(0, jitter_ns)) if jitter_ns else 0  # noise: always idle
            arrive[r], orig_end[r] = start[i] + add + gap, int(m["end_ns"])
        last = max(arrive.values())
        for _, m in group.iterrows():
            r, i = int(m["rank"]), row_of[(c, int(m["rank"]))]
            end = last + int(m["transfer_ns"])  # the rank's own transfer, after the last arrival
            start[i], dur[i] = arrive[r], end - arrive[r]
            shift[r] = end - orig_end[r]
    for r in shift:
        _shift_rows(df, start, r, done[r], len(df), shift[r])
    out = df.assign(start_ns=pd.array(start, dtype="Int64"), dur_ns=dur)
    if extra_rows:
        out = pd.concat([out, pd.DataFrame(extra_rows)], ignore_index=True)
        out = schema.coerce({c: out[c].to_numpy(dtype=object) for c in schema.COLUMNS}, n_rows=len(out))
    kind = "a gap (idle GPU)" if idle else f"an {EXTRA_KERNEL} kernel"
    return out, (f"{total / 1e6:.3f} ms added in all as {kind} before collective kernels, "
                 f"jitter up to {jitter_ns} ns per rank and collective; collectives replayed to end together")


def _collective_rows(df: pd.DataFrame, coll: pd.DataFrame) -> dict[tuple[int, int], int]:
    """(collective, rank) -> row index in df of its kernel (matched on rank and start)."""
    index = {(int(r), int(s)): i for i, (r, s) in enumerate(zip(df["rank"], df["start_ns"]))
             if df["op_class"].iat[i] == "communication"}
    return {(int(c), int(r)): index[(int(r), int(a))] for c, r, a in zip(coll["collective"], coll["rank"],
                                                                           coll["arrival_ns"])}


def _shift_rows(df: pd.DataFrame, start: np.ndarray, rank: int, after: int, upto: int, by: int) -> None:
    """Shift rows after..upto (exclusive of after, inclusive of upto) of `rank` by `by` ns."""
    sel = np.flatnonzero((df["rank"].to_numpy() == rank)[after + 1:upto + 1]) + after + 1
    start[sel] += by


def _extra(row: pd.Series, at_ns: int, dur_ns: int) -> dict:
    extra = row.to_dict()
    extra.update(name=EXTRA_KERNEL, kernel=EXTRA_KERNEL, op_class="gemm", start_ns=at_ns, dur_ns=dur_ns,
                 msg_bytes=np.nan)
    return extra
