"""tracelab: where did the GPU time go, on each rank, under proton, torch.profiler or nsys.

    import tracelab
    prof = tracelab.load("rank0.hatchet")        # Profile: .events (DataFrame), .meta
    profs = tracelab.load_many("runs/decode-torch-20261121-221530/")
    df = tracelab.events(profs)                  # one frame, the schema of tracelab.schema
"""
from __future__ import annotations

from .errors import TracelabError
from .load import detect, events, load, load_many
from .schema import COLUMNS, Profile, validate

__all__ = ["COLUMNS", "Profile", "TracelabError", "detect", "events", "load", "load_many", "validate"]
__version__ = "0.1.0"
