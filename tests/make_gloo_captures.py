"""Make the three 2-rank CPU captures (gloo, torch.profiler) that the who-waits verdicts are
tested on: `late` (rank 1 does extra matrix products before each all-reduce), `alternating`
(the rank of the step's parity does them) and `equal` (nobody does). Each step is a
`step N` range holding `compute`, the extra work when it applies, and the all-reduce.

    python tests/make_gloo_captures.py tests/data            # writes gloo-2cpu-{late,alternating,equal}/

Not a test: the captures are committed (small), with this command in their README.
"""
from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function

CASES = ("late", "alternating", "equal")


def products(n: int, size: int = 768) -> None:
    a = torch.randn(size, size)
    for _ in range(n):
        a = a @ a
        a = a / a.norm()


def late(case: str, rank: int, step: int) -> bool:
    return {"late": rank == 1, "alternating": rank == step % 2, "equal": False}[case]


def rank_main(rank: int, world: int, case: str, out: str, steps: int, base: int, extra: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= world:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[rank]})  # a core each: equal conditions
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    grads = torch.ones(1 << 16)
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for step in range(steps):
            with record_function(f"step {step}"):
                with record_function("compute"):
                    products(base)
                if late(case, rank, step):
                    with record_function("extra_work"):
                        products(extra)
                with record_function("grad_sync"):
                    dist.all_reduce(grads)
    dist.barrier()
    plain = Path(out) / f"rank{rank}.pt.trace.json"
    prof.export_chrome_trace(str(plain))
    with open(plain, "rb") as f, gzip.open(f"{plain}.gz", "wb") as g:
        shutil.copyfileobj(f, g)
    plain.unlink()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="folder that gets gloo-2cpu-<case>/")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--base", type=int, default=2, help="768x768 matrix products per step on every rank")
    p.add_argument("--extra", type=int, default=30, help="extra products on the late rank (about 0.2 s on a "
                                                         "busy 2-core machine: well above its noise)")
    args = p.parse_args(argv)
    for i, case in enumerate(CASES):
        folder = Path(args.out) / f"gloo-2cpu-{case}"
        folder.mkdir(parents=True, exist_ok=True)
        mp.spawn(rank_main, args=(2, case, str(folder), args.steps, args.base, args.extra, 29611 + i), nprocs=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
