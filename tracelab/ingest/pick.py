"""Picking inputs apart: one rank out of every input (`--rank N`)."""
from __future__ import annotations

import numpy as np

from tracelab.core.errors import UsageError
from tracelab.core.schema import Profile


def pick_rank(profiles: list[Profile], rank: int, where: str) -> list[Profile]:
    """The profiles of `rank` among those loaded from one input (`where`: a multi-rank nsys
    file, a folder). A lone profile whose rank no file or name gave ("default (one file)")
    is taken as that rank. An input without it is a UsageError naming its ranks."""
    mine = [p for p in profiles if p.rank == rank]
    if mine:
        return mine
    if len(profiles) == 1 and profiles[0].meta.rank_from == "default (one file)":
        p = profiles[0]
        return [Profile(p.events.assign(rank=np.int32(rank)), p.meta.but(rank=rank, rank_from="caller"),
                        p.summary, p.host, p.memory)]
    ranks = ", ".join(str(p.rank) for p in profiles)
    raise UsageError("--rank", f"{where} holds no rank {rank} (its ranks: {ranks})")
