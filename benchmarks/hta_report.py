#!/usr/bin/env python3
"""HolisticTraceAnalysis' nearest equivalent of `tracelab report DIR`, for the side-by-side
measurement (benchmarks/bench_hta_ranks.py; benchmarks/RESULTS.md, "the many-rank report").
Run it with the Python of a venv that has HolisticTraceAnalysis 0.5.0 (it needs pandas < 3),
never ours:

    /path/to/hta-venv/bin/python benchmarks/hta_report.py DIR

It loads every rank of DIR (TraceAnalysis(trace_dir=DIR)) and computes what the report shows
per rank: the temporal breakdown (busy, idle, non-compute), the idle time breakdown, the
communication/computation overlap and the kernel breakdown (per kernel type and the top
kernels), then prints one line of JSON with the rows each produced.
"""
from __future__ import annotations

import json
import sys
import time


def main() -> None:
    from hta.trace_analysis import TraceAnalysis

    folder = sys.argv[1]
    began = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=folder)
    loaded = time.perf_counter()
    temporal = analysis.get_temporal_breakdown(visualize=False)
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    kernel_types, kernels = analysis.get_gpu_kernel_breakdown(visualize=False)
    idle = analysis.get_idle_time_breakdown(visualize=False)
    done = time.perf_counter()
    print(json.dumps({"ranks": len(analysis.t.traces), "load_s": round(loaded - began, 2),
                      "analyses_s": round(done - loaded, 2), "temporal_rows": len(temporal),
                      "overlap_rows": len(overlap), "kernel_type_rows": len(kernel_types),
                      "kernel_rows": len(kernels), "idle_rows": len(idle[0]) if isinstance(idle, tuple) else len(idle)}))


if __name__ == "__main__":
    main()
