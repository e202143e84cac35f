"""The allreduce workload's options (workloads/allreduce.py), parsed and checked without torch."""
from __future__ import annotations

import argparse
import os

from tracelab.core.errors import UsageError
from tracelab.run import backends

from . import shared

DESCRIPTION = ("All-reduce, several ways, over a sweep of message sizes (the comparison of\n"
               "symm-mem-recipes, github.com/yifuwang/symm-mem-recipes, and a gloo/NCCL benchmark as in\n"
               "Stanford CS336's assignment 2): every result checked against the expected sum,\n"
               "median latency (CUDA events per call over many calls; perf_counter on the CPU; the\n"
               "slowest rank's median) and bus bandwidth 2*(n-1)/n * bytes / time.")
IMPLS = ("nccl", "gloo", "symm-one-shot", "symm-two-shot", "triton-one-shot", "multimem")
GPU_IMPLS = set(IMPLS) - {"gloo"}
DTYPES = ("bf16", "fp32")
VECTOR_BYTES = 16  # every rank's share of a message is whole 16-byte vectors
MULTICAST_OFF = ("multimem needs NVLink multicast (NVLS), which is off here "
                 "(TORCH_SYMM_MEM_DISABLE_MULTICAST=1 / NCCL_NVLS_ENABLE=0); "
                 "choose nccl, symm-one-shot, symm-two-shot or triton-one-shot")


def keep_multicast_off() -> None:
    """Multicast stays off unless the user turned it on: on shared machines a program that
    uses it can put the host's GPUs out of service."""
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


def multicast_off() -> bool:
    return os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" or os.environ["NCCL_NVLS_ENABLE"] == "0"


def parse(argv: list[str] | None, gpu: bool) -> argparse.Namespace:
    """The options, checked (UsageError) for a machine with or without a GPU and the world torchrun set."""
    keep_multicast_off()
    p = argparse.ArgumentParser(prog="python -m tracelab.workloads.allreduce", description=DESCRIPTION)
    shared.add_arguments(p)
    p.add_argument("--impl", default="nccl" if gpu else "gloo",
                   help=f"comma list of {', '.join(IMPLS)} (default: nccl on a GPU, gloo on the CPU)")
    p.add_argument("--sizes", default="4K-1G" if gpu else "4K-256K",
                   help="message sizes: comma list of sizes (4K, 1M) or ranges LO-HI in powers of 2 "
                        "(default: 4K-1G on a GPU, 4K-256K on the CPU)")
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16", help="element type (default: bf16)")
    p.add_argument("--iters", type=int, default=0, help="timed calls per size (default 0: about 50 ms' worth, 5..500)")
    args = p.parse_args(argv)
    return _validate(args, gpu)


def needs_torch(args: argparse.Namespace) -> bool:
    return False


def _validate(args: argparse.Namespace, gpu: bool) -> argparse.Namespace:
    args.impls = shared.parse_choices("--impl", args.impl, IMPLS)
    args.msg_bytes = shared.parse_sizes(args.sizes)
    world_size = shared.env_rank()[1]
    if "multimem" in args.impls and multicast_off():
        raise UsageError("--impl", MULTICAST_OFF)
    if not gpu and GPU_IMPLS & set(args.impls):
        raise UsageError("--impl", f"CUDA GPUs are needed for {', '.join(sorted(GPU_IMPLS & set(args.impls)))}; "
                                   "on the CPU use gloo")
    if "triton-one-shot" in args.impls and world_size & (world_size - 1):
        raise UsageError("--impl", f"triton-one-shot needs a power-of-2 world size, not {world_size}")
    share = VECTOR_BYTES * world_size
    bad = [shared.human_bytes(n) for n in args.msg_bytes if n % share]
    if bad:
        raise UsageError("--sizes", f"{', '.join(bad)} do not divide over {world_size} rank(s) in "
                                    f"{VECTOR_BYTES}-byte vectors (use multiples of {share} bytes)")
    if args.iters < 0:
        raise UsageError("--iters", f"must be 0 (auto) or more, not {args.iters}")
    backends.check(args.backend, gpu)
    return args
