"""What bounds a step, from its critical path: `gpu` where compute makes most of the
path, `copy` where memcpys and memsets do (an input copied in from the host is neither the
kernels' compute nor the host's launching), `communication` where transfers and waits for other ranks do, `host` where host time,
launches and syncs do; `unclear` where the path's `other` (the GPU's own gaps, and starts no
launch, stream order or wait in the trace explains) outweighs each of them: such a step is
called no one's bound. A step whose unexplained delays (edges.py) make its path unknown gives
no bound here at all: its idle causes give it (reports/idle/idle.with_path_bounds). Per rank, from
the rank's own graph (its collectives' waits estimated, no peer needed), so that `tracelab idle`
and `steps` can state it in the worker that parsed the rank, and every view agrees. Pure."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from tracelab.core.schema import RankData

from ..timeline.intervals import timed
from .analyse import unexplained_in
from .edges import MAX_UNEXPLAINED
from .join import join
from .nodes import RankGraph, RankGraphReduce, rank_graph, shared_graph
from .path import CATEGORIES, category_matrix, wait_estimate, windows
from .replay import ReplayError, measured, replay

BOUNDS = {"gpu": ("compute_ns",), "copy": ("copy_ns",), "communication": ("comm_ns", "wait_ns"), "host": ("host_ns", "launch_ns", "sync_ns")}
UNCLEAR = "unclear"  # the path's other outweighs every bound
COLUMNS = ["step", "path_bound", *[c for cols in BOUNDS.values() for c in cols]]
CATEGORY_COLUMNS = [f"{c}_ns" for c in CATEGORIES]


def bound_of(path: pd.DataFrame) -> np.ndarray:
    """Per row of a critical-path table (analyse.STEP_COLUMNS), the bound its path is made of most."""
    return _bound({c: path[c].to_numpy(dtype=np.int64) for c in CATEGORY_COLUMNS})


def _bound(by: dict[str, np.ndarray]) -> np.ndarray:
    """The bound of each step from its path's ns per category (`by`)."""
    score = np.c_[tuple(sum(by[c] for c in cols).astype(np.float64) for cols in BOUNDS.values())]
    return _largest(score, by["other_ns"].astype(np.float64))


def _largest(score: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Per row of score [step, bound], the bound with the most; UNCLEAR where `other` is more."""
    largest = np.array(list(BOUNDS), dtype=object)[np.argmax(score, axis=1)]
    return np.where(other > score.max(axis=1), UNCLEAR, largest)


def rank_path_bounds(events: pd.DataFrame, host: pd.DataFrame | None,
                     graph_of: Callable[[], RankGraph] | None = None) -> pd.DataFrame:
    """One rank's steps (COLUMNS; step -1 for a trace without steps) with the bound of each
    step's critical path; no rows where the rank has no timeline. The path's categories per step
    as analyse.path_steps has them, without the rest of its step table (no one reads it here).
    `graph_of`: gives the rank's graph where the caller has one (nodes.shared_graph: its rank
    number and roofline times change no step's bound), else it is made from the frames."""
    g = join({0: graph_of() if graph_of else rank_graph(events, host, 0, counts=False)}, {0: None})
    if not len(g):
        return pd.DataFrame(columns=COLUMNS)
    base = measured(g)
    r = replay(g, base, cold=False)  # from the measured times: 1-2 rounds, not ~7; the same times (acyclic: one solution)
    win = windows(g, r.start_ns, r.end_ns)
    if not len(win):
        return pd.DataFrame(columns=COLUMNS)
    ns = category_matrix(g, base, r, win, wait_estimate(g))  # [step, category]
    by = {f"{c}_ns": ns[:, i] for i, c in enumerate(CATEGORIES)}
    out = pd.DataFrame({"step": win["step"].to_numpy(dtype=np.int64),
                        "path_bound": _bound(by),
                        **{c: by[c] for c in COLUMNS[2:]}})
    # a step where an edge is missing (whatif's path_known false): its path is not known, so it
    # gives no bound; the step keeps the one its idle causes give
    known = unexplained_in(g, win) <= MAX_UNEXPLAINED * (win["end_ns"] - win["begin_ns"]).to_numpy()
    return out[known].reset_index(drop=True)


def path_bounds(rank: RankData) -> pd.DataFrame:
    """The whatif topic's per-rank digest of each step's critical-path bound (COLUMNS; step -1 for
    a trace without steps), made in the worker that parses the rank from the graph the whatif
    digest shares (nodes.shared_graph): idle and steps label their steps with it through the
    session, so they never build this engine themselves and every view agrees. No rows where
    the rank has no GPU timeline or its replay does not settle (times that contradict): those
    steps keep the bound their idle causes give."""
    if not len(timed(rank.events)):
        return pd.DataFrame(columns=COLUMNS)
    try:
        return rank_path_bounds(rank.events, rank.host, lambda: shared_graph(rank, counts=False))
    except ReplayError:
        return pd.DataFrame(columns=COLUMNS)


# whatif's per-rank digests (reports/topics.py): each rank's graph (jobs of up to 16 ranks) and its
# steps' bounds (idle and steps read them)
DIGESTS = {"whatif": RankGraphReduce(max_ranks=16), "path_bounds": path_bounds}
