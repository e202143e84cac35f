"""How many of a rank's kernels came from CUDA-graph replays, and how many of the others ran
shorter than their own launch call, as reports/fixes/host.py needs it: a per-rank digest
(reports/compare.RANK_SUMMARIES), made where the rank is parsed. Pure.

A cudaGraphLaunch runs a graph's kernels: one call, many kernels, so replayed kernels share
their launch call (and its duration, which says nothing of each kernel's launch)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracelab.core.schema import kind_mask

# a launch call this long is no launch overhead (a few us; this is ~200x): it loaded a module or
# compiled (a kernel's first call: lazy loading, JIT), once; a CUDA graph's capture pays it as well,
# so the GPU's idle during it is no time a graph would save (TraceLens's MI300X normalization
# trace: six first-call hipLaunchKernels of 111-332 ms, median launch 5.4 us)
ONE_OFF_LAUNCH_NS = 1_000_000


def rank_replays(events: pd.DataFrame) -> dict:
    """launched: kernels whose launch call the trace gives; replayed: those sharing it with
    another kernel; short: of the rest (launched one by one), those running shorter than their
    own launch call; short_gpu_ns: their GPU time; by_step: per step, (launched, replayed);
    one_off_launch_ns (and _by_step): the time in launch calls of ONE_OFF_LAUNCH_NS or more."""
    at = np.flatnonzero(kind_mask(events, ("kernel",)) & events["launch_start_ns"].notna().to_numpy())
    launch = events["launch_start_ns"].to_numpy(dtype=np.int64, na_value=0)[at]  # the columns' arrays: no frame copied
    replayed = pd.Series(launch).duplicated(keep=False).to_numpy()
    dur = events["dur_ns"].to_numpy(dtype=np.int64)[at]
    call_ns = events["launch_dur_ns"]
    short = ~replayed & call_ns.notna().to_numpy()[at] & (dur < call_ns.to_numpy(dtype=np.int64, na_value=0)[at])
    step = events["step"].to_numpy(dtype=np.float64, na_value=np.nan)[at]
    known = ~np.isnan(step)  # NA: in no step
    steps, at_step = np.unique(step[known].astype(np.int64), return_inverse=True)
    launched = np.bincount(at_step, minlength=len(steps)).tolist()
    replays = np.bincount(at_step, weights=replayed[known], minlength=len(steps)).astype(np.int64).tolist()
    call = call_ns.to_numpy(dtype=np.int64, na_value=0)[at]
    one_off = ~pd.Series(launch).duplicated().to_numpy() & (call >= ONE_OFF_LAUNCH_NS)  # each call once
    in_step = one_off[known]
    one_off_by_step = np.bincount(at_step[in_step], weights=call[known][in_step], minlength=len(steps)).astype(np.int64)
    return {"launched": int(len(at)), "replayed": int(replayed.sum()), "short": int(short.sum()),
            "short_gpu_ns": int(dur[short].sum()),  # a call's unknown duration compares as no call (pandas' NA)
            "by_step": {s: (n, r) for s, n, r in zip(steps.tolist(), launched, replays)},
            "one_off_launch_ns": int(call[one_off].sum()),  # over the trace; per step below (steps only)
            "one_off_launch_ns_by_step": {s: v for s, v in zip(steps.tolist(), one_off_by_step.tolist()) if v}}
