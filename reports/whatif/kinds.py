"""The kinds of a what-if graph's nodes: what nodes.py builds and every step after it reads
(the replay, the scenarios, the profiler's cost taken off the host's nodes)."""
from __future__ import annotations

LAUNCH, SYNC, HOST_OP, GPU, COLL = 0, 1, 2, 3, 4
KIND_NAMES = ("launch", "sync", "host op", "gpu", "collective")
NONE = -1
