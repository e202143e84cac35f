"""How many of a rank's kernels came from CUDA-graph replays, and how many of the others ran
shorter than their own launch call, as reports/fixes/host.py needs it: a per-rank digest
(reports/compare.RANK_SUMMARIES), made where the rank is parsed. Pure.

A cudaGraphLaunch runs a graph's kernels: one call, many kernels, so replayed kernels share
their launch call (and its duration, which says nothing of each kernel's launch)."""
from __future__ import annotations

import pandas as pd


def rank_replays(events: pd.DataFrame) -> dict:
    """launched: kernels whose launch call the trace gives; replayed: those sharing it with
    another kernel; short: of the rest (launched one by one), those running shorter than their
    own launch call; short_gpu_ns: their GPU time."""
    k = events[(events["kind"] == "kernel") & events["launch_start_ns"].notna()]
    replayed = k["launch_start_ns"].duplicated(keep=False)
    alone = k[~replayed]
    short = alone["dur_ns"] < alone["launch_dur_ns"]
    return {"launched": int(len(k)), "replayed": int(replayed.sum()), "short": int(short.sum()),
            "short_gpu_ns": int(alone.loc[short, "dur_ns"].sum())}
