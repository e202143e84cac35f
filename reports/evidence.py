"""The straggler rule for short captures (3 to 5 steps, what torch.profiler schedules and nsys
capture ranges give): a block test over steps with the collectives summed inside them, and
the size of the lateness against the clock and step-to-step noise. reports/verdicts.straggler
calls `block_verdict` beside its signed-rank (or binomial) test; either may name the rank.

Why a block test: the collectives of one step are not independent (a rank whose host starts
the step late is late at every collective after), so counting 39 of 39 all-reduces as 39
coin tosses would overstate the evidence; the step is the unit. But the signed-rank test over
n steps cannot go below p = 2^-n (x the ranks): no straggler could ever be named on fewer than
6 steps of 2 ranks. Its magnitude is what makes a 30 ms lateness in 3 of 3 steps evidence, so
the block test is Student's one-sided t-test of the rank's per-step lateness (its arrivals less
the other ranks' mean, summed over the step's collectives): it weighs the mean lateness against
its own step-to-step spread. Bonferroni over the ranks, p < BLOCK_ALPHA.

And to be named the rank must be last at most of the collectives (beyond the noise: a rank late
at one all-reduce of four per step is a delay there, not a straggler) and late beyond the
noise in every step: its per-step lateness
above the larger of the clocks' uncertainty (the collectives' median end spread, per collective
of the step, twice) and the work's own step-to-step noise (stats.noise.step_noise_ns). A consistent
rank late by less than the noise is not a straggler, however steady.

The false-positive rate of the whole rule on 3- to 5-step windows of real captures with no
straggler, rank labels permuted per step: benchmarks/straggler_windows.py, benchmarks/RESULTS.md.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from .stats import BLOCK_ALPHA
from .stats.noise import clock_spread_ns, floor_ns, step_threshold_ns
from .stats.tests import block_p






def block_verdict(late: pd.DataFrame, pc: pd.DataFrame, clock_ns: float, floor_ns: float, min_ns: float
                  ) -> dict[str, Any]:
    """The block test's candidate (the rank with the most lateness) and its evidence: `rank`,
    `p_value` (Bonferroni over the ranks), `named` (p < BLOCK_ALPHA, late beyond the noise in every
    step and last at most of the collectives), and the numbers the verdict line states (evidence()). `late`: unit x rank lateness
    (verdicts.lateness); `pc`: verdicts.per_collective; `clock_ns`: the collectives' median end
    spread; `floor_ns`: stats.noise.floor_ns."""
    if late.empty or late.shape[1] < 2:
        return {"rank": None, "p_value": None, "named": False}
    rank = int(late.sum().idxmax())
    p = min(1.0, block_p(late[rank].to_numpy()) * late.shape[1])
    threshold = step_threshold_ns(pc, clock_ns, floor_ns, min_ns).reindex(late.index)
    beyond = late[rank] > threshold
    ev = evidence(late[rank], pc, rank, clock_ns, floor_ns)
    most = ev["last_at"] > ev["collectives"] / 2  # the collectives' own say: last at most of them
    return {"rank": rank, "p_value": p, "named": bool(p < BLOCK_ALPHA and beyond.all() and most and len(late) >= 2),
            "steps_beyond_noise": int(beyond.sum()), **ev}


def evidence(late_r: pd.Series, pc: pd.DataFrame, rank: int, clock_ns: float, floor_ns: float) -> dict[str, Any]:
    """What the line says of the rank: at how many collectives it was last (beyond the noise) of
    how many, in how many steps it was late of how many, its mean lateness per step, and that
    as a multiple of the clock noise per step and of the step-to-step noise (None where zero)."""
    clock_step = clock_per_step_ns(pc, clock_ns)
    mean = float(late_r.mean()) if len(late_r) else 0.0
    types = pc.get("type")
    return {"last_at": int((pc["last_rank"] == rank).sum()), "collectives": int(len(pc)),
            "late_steps": int((late_r > 0).sum()), "steps": int(len(late_r)), "lateness_ns": mean,
            "x_clock": mean / clock_step if clock_step > 0 else None,
            "x_step_noise": mean / floor_ns if floor_ns > 0 else None,
            "kind": _kind(types) if types is not None else "collectives"}


def clock_per_step_ns(pc: pd.DataFrame, clock_ns: float) -> float:
    """A clock noise of `clock_ns` at each of a step's collectives (their mean count per unit of
    `pc`, verdicts.per_collective), per step; 0 without units."""
    per_step = pc.groupby("unit")["collective"].size()
    return float(clock_ns * per_step.mean()) if len(per_step) else 0.0


_PLURAL = {"allreduce": "all-reduces", "allgather": "all-gathers", "reducescatter": "reduce-scatters",
           "broadcast": "broadcasts", "alltoall": "all-to-alls", "reduce": "reduces", "sendrecv": "send/recvs"}


def _kind(types: pd.Series) -> str:
    """'all-reduces' when every collective is one type, else 'collectives'."""
    kinds = set(types.dropna().astype(str))
    return _PLURAL.get(next(iter(kinds)), "collectives") if len(kinds) == 1 else "collectives"



def typed(pc: pd.DataFrame, coll: pd.DataFrame) -> pd.DataFrame:
    if "type" not in coll:
        return pc
    return pc.merge(coll.groupby("collective")["type"].first().reset_index(), on="collective", how="left")



def block_of(late: pd.DataFrame, pc: pd.DataFrame, coll: pd.DataFrame, min_ns: float) -> dict[str, Any]:
    """block_verdict of the matched collectives `coll` (with the noise columns waits.py adds)."""
    return block_verdict(late, typed(pc, coll), clock_spread_ns(coll), floor_ns(coll), min_ns)


def evidence_of(late: pd.DataFrame, pc: pd.DataFrame, coll: pd.DataFrame, rank: int) -> dict[str, Any] | None:
    if rank not in late:
        return None
    return evidence(late[rank], typed(pc, coll), rank, clock_spread_ns(coll), floor_ns(coll))


