"""Size and open time of the HTML report for a big synthetic run (default 8 ranks x 125k
GPU events = 1M): python benchmarks/report_html.py [--ranks 8] [--events 1000000] [-o out.html]

Rank 3 is made 15% slower in compute, so the report has a straggler to show; every rank issues
the same collectives in one order, so the what-if replays the job (its critical path is plotted).
Opening is timed in headless Chromium: the report stamps data-render-ms on <body>
(performance.now() when every plot has rendered).
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from tracelab.core import classify, schema
from tracelab.ingest.inputs import write
from tracelab.reports.html import html
from tracelab.reports.ranks import Input

KERNELS = ([f"ampere_bf16_s16816gemm_bf16_{m}x{n}_ldg8_f2f_tn" for m in (64, 128, 256) for n in (64, 128)]
           + [f"triton_red_fused_mm_{i}" for i in range(20)] + [f"triton_poi_fused_add_mul_{i}" for i in range(20)]
           + ["flash_fwd_kernel", "flash_bwd_dq_dk_dv_loop_kernel", "vectorized_elementwise_kernel",
              "reduce_kernel", "CatArrayBatchedCopy", "softmax_warp_forward"])
COMM = ["ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "ncclDevKernel_AllGather_RING_LL"]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def rank_events(rank: int, n_events: int, seed: int = 0) -> pd.DataFrame:
    """One rank: compute kernels back to back on stream 7 with small gaps, a collective on
    stream 13 after every 20 of them (launched when the compute before it ends)."""
    rng = np.random.default_rng(seed + rank)
    n_comm = n_events // 21
    n_compute = n_events - n_comm
    names = np.array(KERNELS)[rng.integers(0, len(KERNELS), n_compute)]
    slow = 1.15 if rank == 3 else 1.0
    dur = (rng.lognormal(9.0, 1.0, n_compute) * slow).astype(np.int64) + 1000  # ~8 us median
    gap = rng.integers(200, 3000, n_compute)
    start = np.cumsum(np.r_[0, (dur + gap)[:-1]])
    comm_at = start[19::20][:n_comm] + dur[19::20][:n_comm]
    comm_names = collective_order(len(comm_at), seed)
    comm_dur = rng.lognormal(10.0, 0.5, len(comm_at)).astype(np.int64) + 2000
    name = np.r_[names, comm_names]
    kernel = pd.Series(name).map(classify.canonical)
    return schema.coerce({
        "rank": rank, "source": "torch", "kind": "kernel", "name": name, "kernel": kernel,
        "op_class": classify.op_classes(kernel), "scope": "", "device": rank,
        "stream": np.r_[np.full(n_compute, 7), np.full(len(comm_at), 13)],
        "start_ns": np.r_[start, comm_at], "dur_ns": np.r_[dur, comm_dur], "count": 1})


def collective_order(n_comm: int, seed: int = 0) -> np.ndarray:
    """The collectives' names in the order every rank issues them: one order for all ranks, as
    in a real NCCL job, where ranks that issued different collectives at one position would hang
    (and the what-if would find the ranks waiting on each other in a cycle, with nothing to replay)."""
    return np.array(COMM)[np.random.default_rng(seed).integers(0, len(COMM), n_comm)]


def synthetic_inputs(ranks: int, events: int) -> list[Input]:
    epoch = 1_763_000_000_000_000_000
    return [Input(f"rank{r}", "", r, "torch", rank_events(r, events // ranks), epoch + r * 50_000)
            for r in range(ranks)]


def open_in_chromium(path: Path, chromium: str, budget_ms: int = 20000) -> tuple[float, int, int]:
    """(wall seconds of a headless Chromium run, data-render-ms, plots rendered)."""
    with tempfile.TemporaryDirectory() as profile:
        t0 = time.perf_counter()
        dom = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                              f"--virtual-time-budget={budget_ms}", "--dump-dom", path.resolve().as_uri()],
                             capture_output=True, text=True, timeout=120).stdout
        wall_s = time.perf_counter() - t0
    render = re.search(r'data-render-ms="(\d+)"', dom)
    plots = re.search(r'data-plots="(\d+)"', dom)
    return wall_s, int(render.group(1)) if render else -1, int(plots.group(1)) if plots else 0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("-o", "--out", default=str(Path(tempfile.gettempdir()) / "tracelab-bench-report.html"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    inputs = synthetic_inputs(args.ranks, args.events)
    t1 = time.perf_counter()
    text = html.render(inputs, ["synthetic"], {"workload": "synthetic", "ranks": args.ranks})
    t2 = time.perf_counter()
    out = write(args.out, text, force=True)
    print(f"{args.ranks} ranks, {sum(len(i.events) for i in inputs):,} events: generate {t1 - t0:.1f} s, "
          f"render {t2 - t1:.1f} s, file {out.stat().st_size / 1e6:.2f} MB ({out})")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium not found: file size measured, open time not")
    wall_s, render_ms, plots = open_in_chromium(out, chromium)
    print(f"chromium: {plots} plots rendered, all plots done at {render_ms} ms after navigation start; "
          f"whole headless run {wall_s:.1f} s")


if __name__ == "__main__":
    main()
