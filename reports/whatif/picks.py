"""What a scenario picks out of a joined graph and how it writes durations: shared by scenarios.py
and autocast.py. Pure."""
from __future__ import annotations

import re

import numpy as np

from tracelab.core import limits
from tracelab.core.regexes import compiled, matches

from .join import Graph
from .kinds import COLL, GPU, HOST_OP


def regex(pattern: str) -> re.Pattern:
    return compiled(pattern, "--scenario")


def changed_durations_ns(values: np.ndarray) -> np.ndarray:
    """Changed durations as int64 ns, each at most limits.MAX_DUR_NS (their sums stay in int64)."""
    return np.rint(np.minimum(values, float(limits.MAX_DUR_NS))).astype(np.int64)


def work(g: Graph) -> np.ndarray:
    """Nodes that are ops of the device's work (GPU ops, collectives; CPU ops of a CPU-only trace)."""
    return np.isin(g.kind, (GPU, COLL, HOST_OP))


def matching(g: Graph, pattern: re.Pattern, rank: int | None) -> np.ndarray:
    hit = (matches(pattern, g.name, "--scenario") | matches(pattern, g.scope, "--scenario")) & work(g)
    return hit & (g.rank == rank) if rank is not None else hit


def median_ns(values: np.ndarray) -> float:
    return float(np.median(values)) if len(values) else 0.0
