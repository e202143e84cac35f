"""Where the memory went: per rank and step, the allocated and reserved totals, the
peak and what was live there, the allocator's own calls; across ranks and runs, the peaks side
by side and what stands out. `analysis` (one rank) and `across` (ranks, runs) are pure; `text`
and `html` render."""
from __future__ import annotations

from .across import Memory, combine
from .memory import RankMemory, RankMemoryDigest, rank_memory

__all__ = ["Memory", "RankMemory", "RankMemoryDigest", "combine", "rank_memory"]
