#!/usr/bin/env python3
"""`tracelab idle` against HolisticTraceAnalysis 0.5.0's idle time breakdown and kernel launch
statistics on the same Kineto traces (issue 21; benchmarks/RESULTS.md, "Why was the GPU idle").

usage: python benchmarks/hta_idle.py --hta-python /tmp/hta-venv/bin/python TRACE [TRACE ...]

Each TRACE (a Kineto .json.gz) is copied alone into a temporary folder (HTA reads every JSON of
its folder) and HTA runs there under its own Python (it needs pandas < 3): get_idle_time_breakdown
and get_cuda_kernel_launch_stats of rank 0. Then, from tracelab's events of the same trace: its
own per-step causes (reports/idle/idle.py), and HTA's definitions recomputed on tracelab's rows (per
stream over the whole trace; host wait where the launch call began after the stream's previous
op ended, kernel wait a gap under 30 us, other the rest; launch delay from the end of the launch
call), so that what differs by definition and what differs by data can be told apart. Prints
one JSON object per trace.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HTA_CODE = """
import json, sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
idle, _ = a.get_idle_time_breakdown(visualize=False)
ls = a.get_cuda_kernel_launch_stats(visualize=False)[0]
short = ls[ls["gpu_duration"] < ls["cpu_duration"]]
print(json.dumps({"idle_us": {r["idle_category"]: float(r["idle_time"]) for _, r in idle.iterrows()},
                  "streams": sorted({int(s) for s in idle["stream"]}),
                  "launches": len(ls), "delay_median_us": float(ls["launch_delay"].median()),
                  "delay_p90_us": float(ls["launch_delay"].quantile(0.9)),
                  "launch_cpu_us": float(ls["cpu_duration"].sum()), "short_kernels": len(short),
                  "short_kernels_gpu_us": float(short["gpu_duration"].sum())}))
"""


def hta(python: str, trace: Path) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(trace, folder)
        out = subprocess.run([python, "-c", HTA_CODE, folder], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def hta_rule_on_ours(events, delay_us: float = 30) -> dict:
    """HTA's idle categories and launch delay, computed on tracelab's rows (ns, not rounded)."""
    import numpy as np

    out = {"host_wait": 0, "kernel_wait": 0, "other": 0}
    rows = events[events["kind"].isin(["kernel", "memcpy", "memset"])].sort_values("start_ns")
    for _, s in rows.groupby("stream"):
        start, end = s["start_ns"].to_numpy(dtype=np.int64), (s["start_ns"] + s["dur_ns"]).to_numpy(dtype=np.int64)
        launch = s["launch_start_ns"].astype("float64").to_numpy()
        gap, prev_end = start[1:] - end[:-1], end[:-1]
        host = launch[1:] > prev_end
        kernel = ~host & (gap < delay_us * 1000)
        out["host_wait"] += int(gap[host].sum())
        out["kernel_wait"] += int(gap[kernel].sum())
        out["other"] += int(gap[~host & ~kernel].sum())
    known = rows[rows["launch_start_ns"].notna()]
    after_call = (known["start_ns"] - known["launch_start_ns"] - known["launch_dur_ns"]).clip(lower=0)
    return {"idle_ms": {k: v / 1e6 for k, v in out.items()},
            "delay_from_call_end_median_us": float(after_call.median()) / 1e3}


def ours(trace: Path) -> dict:
    import tracelab
    from tracelab.reports.idle.idle import CAUSES, RankIdle

    p = tracelab.load_many(trace, reduce={"idle": RankIdle()})[0]
    result = p.summary["idle"]
    launches = result.launches.iloc[0]
    return {"steps": len(result.steps), "bound": sorted(set(result.steps["bound"])),
            "idle_ms": {c: result.steps[c].sum() / 1e6 for c in ("idle_ns", *CAUSES)},
            "span_ms": result.steps["span_ns"].sum() / 1e6, "busy_ms": result.steps["busy_ns"].sum() / 1e6,
            "launches": int(launches["launched"]), "delay_median_us": launches["delay_median_ns"] / 1e3,
            "delay_p90_us": launches["delay_p90_ns"] / 1e3, "launch_cpu_ms": launches["launch_cpu_ns"] / 1e6,
            "short_kernels": int(launches["short_kernels"]),
            "short_kernels_gpu_ms": launches["short_kernels_gpu_ns"] / 1e6,
            "hta_rule_on_tracelab_rows": hta_rule_on_ours(p.events)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hta-python", required=True)
    p.add_argument("traces", nargs="+", type=Path)
    a = p.parse_args()
    for trace in a.traces:
        print(json.dumps({"trace": str(trace), "hta": hta(a.hta_python, trace), "tracelab": ours(trace)}, default=float),
              flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
