"""The decode workload's options (workloads/decode.py), parsed and checked without torch: all but
--pdl, --inductor and --checkpoint, which need torch's inductor or torch.load (needs_torch)."""
from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path

from tracelab.core.errors import UsageError

from ..configs import CONFIGS, ModelArgs
from . import late, shared

DESCRIPTION = "Llama-style token-by-token decode, gpt-fast style, on one or many ranks (tensor parallel)."
MATVECS = ("inductor", "cublas", "triton")
DTYPES = ("bf16", "fp16", "fp32")
COMPILE_TIMEOUT_S = 1800.0
# A window of a few steps reads in seconds; every token of every sample (1,000 by default) was 402 MB of
# Kineto JSON per rank on the CPU, held by each rank while writing it, and minutes of writing on a GPU.
PROFILE_TOKENS = 20
TUNED_INDUCTOR = ("triton.mix_order_reduction=False", "split_reductions=False")
GROUP_ALLREDUCE = ("nccl", "gloo")  # the process group's own, by its backend
ALLREDUCE = (*GROUP_ALLREDUCE, "symm-one-shot", "symm-two-shot")  # workloads/tp.py


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tracelab.workloads.decode", description=DESCRIPTION)
    shared.add_arguments(p)
    # --compile compiles on every rank at once; a rank that finishes first waits in the first
    # all-reduce for the slowest one, which may take many minutes for a 7B model
    p.set_defaults(timeout_s=COMPILE_TIMEOUT_S)
    p.add_argument("--model", choices=list(CONFIGS), default=None,
                   help="shapes by name (default: llama-2-7b on a GPU, tiny on the CPU)")
    p.add_argument("--checkpoint", type=Path, help="gpt-fast model.pth (default: random weights)")
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="default: bf16 on a GPU, fp32 on the CPU")
    p.add_argument("--compile", action="store_true",
                   help="compile the decode step (mode=reduce-overhead: CUDA graphs, fullgraph)")
    p.add_argument("--compile-prefill", action="store_true", help="compile the prefill as well")
    p.add_argument("--no-provenance", dest="provenance", action="store_false",
                   help="with --compile: skip Inductor's kernel-to-module map (rank{r}.provenance.json, "
                        "workloads/provenance.py), which bypasses the FX graph cache while compiling")
    p.add_argument("--matvec", choices=MATVECS, default="inductor",
                   help="the weight products of a decode step: inductor (compiled into Triton reductions, "
                        "coordinate-descent tuned, as gpt-fast), cublas (torch's matmul), triton (tracelab's "
                        "kernel, workloads/gemv.py)")
    p.add_argument("--fuse-mlp", action="store_true",
                   help="one product for the feed-forward's gate and up projections (w1 and w3 stacked)")
    p.add_argument("--pdl", action="store_true",
                   help="with --compile on Hopper or newer: Triton kernels launched with programmatic "
                        "dependent launch, so each one starts while the previous one drains")
    p.add_argument("--attention", choices=("math", "auto"), default="math",
                   help="the decode step's attention: math (gpt-fast's: plain ops, which inductor "
                        "compiles into its own kernels) or auto (torch's fused SDPA kernel, one per layer)")
    p.add_argument("--tuned", action="store_true",
                   help="with --compile: the fastest set measured on an H100 (benchmarks/RESULTS.md; 179 "
                        "tokens/s for llama-2-7b against gpt-fast's 172.5): --fuse-mlp, --pdl on a GPU, and "
                        "inductor's mix-order and split reductions off")
    p.add_argument("--inductor", action="append", default=[], metavar="NAME=VALUE",
                   help="with --compile: set a torch._inductor.config option, e.g. split_reductions=False "
                        "(repeatable; recorded in run.json)")
    p.add_argument("--allreduce", choices=ALLREDUCE, default=None,
                   help="sum over ranks after attention and MLP: the process group's own, named by its "
                        "backend (default: nccl on GPUs, gloo on the CPU), or a symmetric-memory kernel")
    p.add_argument("--prompt-len", type=int, default=8, help="prompt tokens (random ids)")
    p.add_argument("--new-tokens", type=int, default=200, help="tokens to generate per sample")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--samples", type=int, default=None,
                   help="measured samples, the profiler off: tokens/s and the unprofiled step come from them "
                        "(default: 5 on a GPU, as gpt-fast; 3 on the CPU)")
    p.add_argument("--warmup", type=int, default=1, help="samples before them (compilation happens here)")
    p.add_argument("--profile-tokens", type=int, default=None,
                   help="decode steps the profiler records: tokens 1..N of one more sample, after the measured ones "
                        f"(default: {PROFILE_TOKENS}, or all of a shorter sample's)")
    late.add_arguments(p)  # before each token's step, so before its tensor-parallel all-reduces
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=200)
    return p


def parse(argv: list[str] | None, gpu: bool) -> argparse.Namespace:
    """The options, resolved and checked (UsageError) for a machine with or without a GPU and
    the world torchrun set: what run.json records."""
    args = resolve(build_parser().parse_args(argv), gpu)
    check(args, shared.env_rank()[1], gpu)
    return args


def needs_torch(args: argparse.Namespace) -> bool:
    """Whether the options hold what only the workload's own parse can check: --pdl and
    --inductor settings against torch's inductor (--tuned implies both), a --checkpoint's tensors."""
    return bool(args.tuned or args.pdl or args.inductor or args.checkpoint is not None)


def profiled_steps(config: dict) -> int:
    """The decode steps the profiled window holds (run.json's profiled_steps, for the runner)."""
    return config["profile_tokens"]


def group_backend(gpu: bool) -> str:
    """The process group's backend (workloads.common joins NCCL on GPUs, gloo on the CPU)."""
    return "nccl" if gpu else "gloo"


def resolve(args: argparse.Namespace, gpu: bool) -> argparse.Namespace:
    """Fill the defaults that depend on the machine, and spell out --tuned."""
    args.model = args.model or ("llama-2-7b" if gpu else "tiny")
    args.dtype = args.dtype or ("bf16" if gpu else "fp32")
    args.allreduce = args.allreduce or group_backend(gpu)  # run.json names the all-reduce that runs
    # on the CPU a tiny model's sample takes seconds (each token all-reduced through gloo): 3 keep the
    # README's first command within a minute on 2 shared cores, and give 60 unprofiled steps
    args.samples = args.samples if args.samples is not None else (5 if gpu else 3)
    if args.profile_tokens is None:
        args.profile_tokens = min(PROFILE_TOKENS, max(1, args.new_tokens - 1))
    if args.tuned:  # and --pdl where torch's inductor has it (workloads/decode.py)
        args.fuse_mlp = True
        args.inductor = [*(s for s in TUNED_INDUCTOR if s not in args.inductor), *args.inductor]
    return args


def check(args: argparse.Namespace, world_size: int, gpu: bool) -> None:
    """UsageError for resolved options that cannot work on this machine and world size, of
    those that torch is not needed to check (needs_torch)."""
    config = CONFIGS[args.model]
    for name in ("prompt_len", "new_tokens", "batch_size", "samples"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')}", f"must be at least 1, not {getattr(args, name)}")
    if args.warmup < 0:
        raise UsageError("--warmup", f"must be 0 or more, not {args.warmup}")
    check_window(args)
    if args.prompt_len + args.new_tokens > config.block_size:
        raise UsageError("--new-tokens", f"prompt + new tokens ({args.prompt_len + args.new_tokens}) exceed "
                                         f"{args.model}'s context of {config.block_size}")
    if (reason := unshardable(config, world_size)) is not None:
        raise UsageError("--ranks", f"{args.model}: {reason}")
    if args.allreduce.startswith("symm") and not gpu:
        raise UsageError("--allreduce", f"{args.allreduce} needs CUDA GPUs; use gloo on the CPU")
    if args.allreduce in GROUP_ALLREDUCE and args.allreduce != group_backend(gpu):
        raise UsageError("--allreduce", f"the ranks' process group here is {group_backend(gpu)}, not {args.allreduce}")
    check_kernel_options(args, gpu)
    late.check(args)


def check_kernel_options(args: argparse.Namespace, gpu: bool) -> None:
    """UsageError for --matvec, --tuned and --pdl settings this machine cannot honour."""
    if args.matvec == "triton" and importlib.util.find_spec("triton") is None:
        raise UsageError("--matvec", "triton is not installed")
    if args.matvec == "triton" and not gpu and os.environ.get("TRITON_INTERPRET") != "1":
        raise UsageError("--matvec", "the triton kernel needs a CUDA GPU (or TRITON_INTERPRET=1)")
    if args.tuned and not args.compile:
        raise UsageError("--tuned", "only applies with --compile")
    if args.pdl and not (args.compile and gpu):
        raise UsageError("--pdl", "needs --compile and a CUDA GPU")


def check_window(args: argparse.Namespace) -> None:
    """The profiled tokens lie in one sample's decode steps (token 0 comes from the prefill)."""
    if args.backend == "none":
        return
    if args.new_tokens < 2:
        raise UsageError("--new-tokens", f"at least 2 under a profiler, which records decode steps (token 1 on), "
                                         f"not {args.new_tokens}")
    if not 1 <= args.profile_tokens < args.new_tokens:
        raise UsageError("--profile-tokens", f"must be 1 to --new-tokens - 1 ({args.new_tokens - 1}), "
                                             f"not {args.profile_tokens}")


def unshardable(args: ModelArgs, world_size: int) -> str | None:
    """Why `args` cannot be split over `world_size` ranks, or None when it can."""
    sizes = {"heads": args.n_head, "key/value heads": args.kv_heads, "hidden size": args.hidden_dim}
    for what, n in sizes.items():
        if n % world_size:
            return f"{what} ({n}) do not divide over {world_size} ranks"
    return None
