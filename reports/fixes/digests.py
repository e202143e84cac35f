"""The per-rank digests of the fixes (reports/topics.py), made in the worker that parsed the rank:
what names the fix (DDP's exposed all-reduce, CUDA graph replays, the data loader's waits, host stalls)."""
from __future__ import annotations

from tracelab.core.schema import OnEvents

from .ddp_steps import rank_ddp
from .loader_digest import rank_loader
from .replays import rank_replays
from .stall_digest import rank_stalls

DIGESTS = {"ddp": OnEvents(rank_ddp), "replays": OnEvents(rank_replays), "loader": rank_loader,
           "stalls": rank_stalls}
