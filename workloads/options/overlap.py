"""The overlap workload's options (workloads/overlap.py), parsed and checked without torch."""
from __future__ import annotations

import argparse

from tracelab.core.errors import UsageError
from tracelab.run import backends

from . import shared
from .allreduce import keep_multicast_off

DESCRIPTION = ("Communication and matrix products, overlapped or not (as TransformerEngine, Flux and\n"
               "symm-mem-recipes do it): the two\n"
               "collectives of tensor parallelism around a GEMM, fused against unfused.")
# model -> (N, K) of symm-mem-recipes' fused all-gather matmul benchmark
MODELS = {"8B": (1792, 4096), "70B": (3584, 8192), "105B": (6656, 16384), "tiny": (64, 128)}
OPS = ("ag-matmul", "matmul-rs")
VARIANTS = ("unfused", "fused")
DTYPES = ("bf16", "fp32")


def parse(argv: list[str] | None, gpu: bool) -> argparse.Namespace:
    """The options, checked (UsageError) for a machine with or without a GPU and the world torchrun set."""
    keep_multicast_off()
    p = argparse.ArgumentParser(prog="python -m tracelab.workloads.overlap", description=DESCRIPTION)
    shared.add_arguments(p)
    p.add_argument("--op", default=",".join(OPS), help=f"comma list of {', '.join(OPS)} (default: both)")
    p.add_argument("--variant", default="unfused,fused" if gpu else "unfused",
                   help="comma list of unfused, fused (default: both on a GPU, unfused on the CPU)")
    p.add_argument("--models", default="8B,70B,105B" if gpu else "tiny",
                   help=f"shapes (N, K) by model, comma list of {', '.join(MODELS)} "
                        "(default: 8B,70B,105B on a GPU, tiny on the CPU)")
    p.add_argument("--rows", default="4096,8192,16384" if gpu else "64",
                   help="rows M (gathered), comma list (default: 4096,8192,16384 on a GPU, 64 on the CPU)")
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16" if gpu else "fp32",
                   help="element type (default: bf16 on a GPU, fp32 on the CPU, where bf16 products are slow)")
    p.add_argument("--iters", type=int, default=20, help="timed calls per variant and shape (default: 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls first (default: 3)")
    return _validate(p.parse_args(argv), gpu)


def needs_torch(args: argparse.Namespace) -> bool:
    return False


def _validate(args: argparse.Namespace, gpu: bool) -> argparse.Namespace:
    args.ops = shared.parse_choices("--op", args.op, OPS)
    args.variants = shared.parse_choices("--variant", args.variant, VARIANTS)
    args.model_names = shared.parse_choices("--models", args.models, list(MODELS))
    try:
        args.ms = [int(m) for m in args.rows.split(",")]
    except ValueError:
        raise UsageError("--rows", f"{args.rows!r} is not a comma list of row counts") from None
    world_size = shared.env_rank()[1]
    bad = [m for m in args.ms if m <= 0 or m % world_size]
    if bad:
        raise UsageError("--rows", f"{', '.join(map(str, bad))} rows do not divide over {world_size} rank(s)")
    if "fused" in args.variants and not gpu:
        raise UsageError("--variant", "fused needs CUDA GPUs with symmetric memory (torch.ops.symm_mem); "
                                      "on the CPU use --variant unfused")
    if args.iters <= 0 or args.warmup < 0:
        raise UsageError("--iters", f"need --iters > 0 and --warmup >= 0, not {args.iters} and {args.warmup}")
    backends.check(args.backend, gpu)
    return args
