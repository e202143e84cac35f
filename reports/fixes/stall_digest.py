"""How long a rank's host stalls (reports/timeline/stalls.py), as reports/fixes/stall.py and host.py
need it: a per-rank digest, made where the rank is parsed. Pure."""
from __future__ import annotations

from tracelab.core.schema import RankData

from ..timeline.intervals import timed
from ..timeline.stalls import shared_stalls
from ..timeline.steps import median_per_step
from .loader_digest import step_durations_ns, steps_span

MIN_STALL_SHARE = 0.05  # the stalls' time from this share of the steps' time: a finding


def rank_stalls(rank: RankData) -> dict:
    """A rank's stalls (STALL_COLUMNS), with the time its steps cover, how many steps, their ranges'
    median time (span_ns_per_step), and whether its device is the CPU (no timed GPU op)."""
    stalls = shared_stalls(rank)
    host = rank.host if rank.host is not None and len(rank.host) else None
    span_ns, steps = steps_span(host) if host is not None else (0, 0)
    per_step = median_per_step(step_durations_ns(host), steps) if host is not None else 0.0
    return {"stalls": stalls, "span_ns": span_ns, "steps": steps, "span_ns_per_step": per_step,
            "cpu_only": not len(timed(rank.events))}


def stall_ns_per_step(f: dict) -> float:
    """The median over a rank's steps of its stalls' time in each (a stall is its step's: the one
    it delays), of a stall digest (rank_stalls)."""
    stalls = f["stalls"]
    return median_per_step(stalls["stall_ns"].groupby(stalls["step"].to_numpy()).sum().to_numpy(), f["steps"])


def stalls_matter(f: dict) -> bool:
    """Whether a rank's stall digest (rank_stalls) holds a finding's share of its steps' time: in
    all, or in the median step (a step far longer than the rest, where the ranks waited for one
    another's profiler to start, dilutes the total's share, not the median's)."""
    in_all = bool(f["span_ns"]) and int(f["stalls"]["stall_ns"].sum()) >= MIN_STALL_SHARE * f["span_ns"]
    return in_all or stall_in_most_steps(f)


def stall_in_most_steps(f: dict) -> bool:
    """Whether the median step of a rank's stall digest (rank_stalls) stalls MIN_STALL_SHARE of its time."""
    return bool(f["steps"]) and f["span_ns_per_step"] > 0 and \
        stall_ns_per_step(f) >= MIN_STALL_SHARE * f["span_ns_per_step"]
