"""GPU idle with a known cause, for `tracelab idle` (issue 21): per step, `--syncs` times a small
matmul then `.item()` (cudaStreamSynchronize under the hood: the host blocks until the GPU is done),
then `--host-ms` of host work (a sleep) before the next launch.

    python benchmarks/idle_causes.py --backend torch|nsys --out DIR

So each step's idle is: the sync calls' return (the GPU done, the host still blocked: idle_sync_ns),
the host's sleep after each (idle_host_ns) and launch latency (idle_launch_ns). Writes the trace and
expected.results.json (steps, syncs per step, host ms).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from graph_scopes import finish, region, start  # same regions, profiler start and end as the graph capture


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=["torch", "nsys"], required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--syncs", type=int, default=20)
    p.add_argument("--host-ms", type=float, default=0.5)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)  # [N, N]
    for _ in range(3):
        (a @ a).sum().item()
    torch.cuda.synchronize()
    prof = start(args.backend, args.out)
    for step in range(args.steps):
        with region(args.backend, f"step {step}"):
            for _ in range(args.syncs):
                (a @ a).sum().item()  # the host waits here for the GPU
                time.sleep(args.host_ms / 1e3)  # then works on the host while the GPU idles
    torch.cuda.synchronize()
    finish(prof, args, ("steps", "syncs", "host_ms"))

if __name__ == "__main__":
    main()
