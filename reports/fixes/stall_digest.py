"""How long a rank's host stalls (reports/timeline/stalls.py), as reports/fixes/stall.py and host.py
need it: a per-rank digest, made where the rank is parsed. Pure."""
from __future__ import annotations

from tracelab.core.schema import RankData

from ..timeline.intervals import timed
from ..timeline.stalls import shared_stalls
from .loader_digest import steps_span

MIN_STALL_SHARE = 0.05  # the stalls' time from this share of the steps' time: a finding


def rank_stalls(rank: RankData) -> dict:
    """A rank's stalls (STALL_COLUMNS), with the time its steps cover, how many steps, and whether
    its device is the CPU (no timed GPU op)."""
    stalls = shared_stalls(rank)
    span_ns, steps = steps_span(rank.host) if rank.host is not None and len(rank.host) else (0, 0)
    return {"stalls": stalls, "span_ns": span_ns, "steps": steps, "cpu_only": not len(timed(rank.events))}


def stalls_matter(f: dict) -> bool:
    """Whether a rank's stall digest (rank_stalls) holds a finding's share of its steps' time."""
    return bool(f["span_ns"]) and int(f["stalls"]["stall_ns"].sum()) >= MIN_STALL_SHARE * f["span_ns"]
