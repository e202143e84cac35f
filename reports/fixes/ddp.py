"""The finding on the gradient all-reduce exposed after backward (ddp_steps.py says what is
measured): the overlap or the bucket size to change, with the exposed time per step beyond
the rank's waits for the other ranks."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..fmt import binary_size
from ..findings.finding import SECTIONS, Finding, Said, fix_writer, ms
from .ddp_steps import WHOLE

MIN_EXPOSED_SHARE = 0.05  # exposed gradient all-reduce (less waiting) under this share of the step is no finding
NO_OVERLAP = 0.9  # exposed over this share of the all-reduce time: it does not overlap backward
SMALL_MSG_BYTES = 1 << 20  # all-reduces under 1 MiB are latency-bound
SMALL_MSG_COUNT = 4  # ... when a step has more than this many


def _waits_per_step(ev, group: str, rank: int, steps: pd.DataFrame) -> dict[int, int] | None:
    """step -> ns the rank waited for the last rank at the collectives of its gradient
    all-reduces' kernels in that step (reports/waits.py; a kernel also used by other collectives
    counts their waits too: the fixable time is then understated, never overstated); None
    where the run's inputs give no who-waits (one rank of the job, no timestamps)."""
    by_rank = _collectives_by_rank(ev, group)
    if by_rank is None:
        return None
    empty = (np.zeros(0, np.int64), np.zeros(0, dtype=object), np.zeros(0, np.int64))
    step, kernel, wait = by_rank.get(rank, empty)
    out = {}
    for s, names in zip(steps["step"], steps["kernels"]):
        mine = (step == int(s)) & np.isin(kernel, str(names).split("|"))
        out[int(s)] = int(np.nansum(wait[mine]))
    return out


def _collectives_by_rank(ev, group: str) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
    """The run's collectives (who-waits) per rank: (step, WHOLE without; kernel; wait_ns), split
    once per command for every rank's finding."""
    w = ev.comparison.waits.get(group)
    if w is None or not len(w.collectives):
        return None

    def split() -> dict:
        c = w.collectives
        rank = c["rank"].to_numpy()
        step = c["step"].astype("float64").fillna(WHOLE).astype("int64").to_numpy()
        kernel, wait = c["kernel"].astype(str).to_numpy(dtype=object), c["wait_ns"].to_numpy()
        return {int(r): (step[rank == r], kernel[rank == r], wait[rank == r]) for r in np.unique(rank)}
    return ev.shared(("ddp waits", group), split)


def _rank_figures(ev, i) -> dict | None:
    steps = i.digest("ddp")
    if not len(steps):
        return None
    waits = _waits_per_step(ev, i.group, i.rank, steps)
    wait = np.array([waits[int(s)] for s in steps["step"]] if waits is not None else np.zeros(len(steps)),
                    dtype=np.int64)
    fixable = np.maximum(steps["exposed_ns"].to_numpy(dtype=np.int64) - wait, 0)
    # times per step are medians over the steps (timeline/steps.median_per_step: one step of the ranks'
    # profiler start skew moves a mean); the counts and bytes a step issues are means; totals are sums
    return {"steps": len(steps), "allreduces": float(steps["allreduces"].mean()),
            "msg_bytes": float(steps["msg_bytes"].mean()) if steps["msg_bytes"].notna().all() else None,
            "comm_ns": float(steps["comm_ns"].median()), "exposed_ns": float(steps["exposed_ns"].median()),
            "tail_ns": float(steps["tail_ns"].median()),
            "wait_ns": float(np.median(wait)) if waits is not None else None, "fixable_ns": float(np.median(fixable)),
            "fixable_total_ns": int(fixable.sum()), "span_ns": float(steps["span_ns"].median())}


def ddp_findings(ev) -> list[Finding]:
    """Per run, the rank whose gradient all-reduces are most exposed beyond its waits, where that
    is at least MIN_EXPOSED_SHARE of its step and the figures point to a change (_fix): the overlap or
    the bucket size, with its figures. Left out where the inputs hold one rank of the job (its
    waits for the others unknown: exposed time may be all waiting)."""
    several = len({i.group for i in ev.inputs}) > 1
    best: dict[str, tuple] = {}
    for i in ev.inputs:
        if not i.timed:
            continue
        f = _rank_figures(ev, i)
        if f and f["wait_ns"] is not None and _fix(f) and f["fixable_ns"] >= MIN_EXPOSED_SHARE * f["span_ns"] and (
                i.group not in best or f["fixable_ns"] > best[i.group][1]["fixable_ns"]):
            best[i.group] = (i, f)
    out = []
    for group, (i, f) in best.items():
        waited = f"{ms(f['wait_ns'])} of it waiting for the last rank"
        # the fix said only where its what-if (overlap-comm) saves time (whatif/findings.with_saving)
        write = fix_writer(f"{group + ': ' if several and group else ''}rank {i.rank}'s gradient all-reduce is exposed "
                           f"{ms(f['fixable_ns'])} per step of {ms(f['span_ns'])}{' beyond its waits' if f['wait_ns'] else ''} "
                           f"({_count(f)}, {ms(f['comm_ns'])}, {_share(f['exposed_ns'], f['comm_ns'])} of it beside no "
                           f"compute kernel; {waited}): ", _fix(f))
        out.append(Finding(write(Said()), f["fixable_total_ns"], SECTIONS["overlap"], {"rank": i.rank, **f, "fix": _fix(f)},
                           "ddp_bucket", {"run": group, "rank": i.rank, **f}, write))
    return out


def _count(f: dict) -> str:
    n = f"{f['allreduces']:.3g} all-reduce" + ("s" if f["allreduces"] != 1 else "") + " per step"
    if f["msg_bytes"] is None:
        return n
    return f"{n} of {binary_size(f['msg_bytes'] / max(f['allreduces'], 1))} on average"


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def _fix(f: dict) -> str | None:
    """The change the figures point to; None where they point to none (exposed between backward's
    kernels, not after them: the GPU had no compute queued, a host-bound step's idle finding)."""
    exposed_share = f["exposed_ns"] / f["comm_ns"] if f["comm_ns"] else 0.0
    per_msg = f["msg_bytes"] / max(f["allreduces"], 1) if f["msg_bytes"] is not None else None
    if exposed_share >= NO_OVERLAP and f["allreduces"] <= 1:
        size = f" (its gradients are {binary_size(f['msg_bytes'])})" if f["msg_bytes"] is not None else ""
        return ("one bucket, all-reduced after backward, so nothing overlaps it: DDP with a bucket_cap_mb below the "
                f"gradients' size{size} starts the first buckets' all-reduce while backward still runs")
    if exposed_share >= NO_OVERLAP:
        return ("they run after backward: launch each bucket's all-reduce as its gradients are ready "
                "(DistributedDataParallel's hooks do; a loop over the gradients after backward does not)")
    if per_msg is not None and per_msg < SMALL_MSG_BYTES and f["allreduces"] > SMALL_MSG_COUNT:
        return ("many small all-reduces, each paying NCCL's latency: larger buckets (DDP's bucket_cap_mb) "
                "send fewer, larger messages")
    if f["tail_ns"] >= 0.5 * f["exposed_ns"]:
        return (f"{ms(f['tail_ns'])} of it runs after backward's last kernel, the last buckets' all-reduce: a "
                "smaller bucket_cap_mb shortens that tail")
    return None
