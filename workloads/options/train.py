"""The train workload's options (workloads/train.py), with its speed options (workloads/train_speed.py)
and memory options (workloads/train_memory.py), parsed and checked without torch."""
from __future__ import annotations

import argparse
import os

from tracelab.core.errors import UsageError
from tracelab.run import backends

from ..configs import SIZES
from . import late, shared

DESCRIPTION = """Training steps of a transformer LM, benchmarked as Stanford CS336's assignment 2 does:
its sizes small..2.7B, forward / forward+backward / full step with AdamW, warm-up steps
(0 shows the cold start), fp32 or bf16 autocast, and data parallel over ranks
(naive, flat, overlap, bucketed: see ddp.py). Per step: mean and std of the time
(synchronised around each step on a GPU), peak memory, model FLOPs utilisation."""
PHASES = ("forward", "forward-backward", "step")
DTYPES = ("fp32", "bf16")
DDP_VARIANTS = ("naive", "flat", "overlap", "bucketed")  # ddp.py's gradient syncs
DDP = ("none",) + DDP_VARIANTS
ATTENTION = ("auto", "math")
SDPA_REGION = "sdpa"


def parse(argv: list[str] | None, gpu: bool) -> argparse.Namespace:
    """The options, checked (UsageError) for a machine with or without a GPU and the world torchrun set."""
    p = argparse.ArgumentParser(prog="python -m tracelab.workloads.train", description=DESCRIPTION)
    shared.add_arguments(p)
    p.add_argument("--size", default="small" if gpu else "tiny",
                   help=f"model size(s), comma list of {', '.join(SIZES)} (default: small on a GPU, tiny on the CPU)")
    p.add_argument("--context-length", type=int, default=256, help="tokens per sequence (default: 256)")
    p.add_argument("--batch-size", type=int, default=4,
                   help="sequences per step over all ranks; each rank takes batch/ranks (default: 4)")
    p.add_argument("--vocab-size", type=int, default=10000, help="vocabulary (default: %(default)s)")
    p.add_argument("--phase", default="forward-backward", help=f"comma list of {', '.join(PHASES)} "
                   "(step = forward, backward, AdamW; default: forward-backward)")
    p.add_argument("--dtype", default="fp32", help="fp32 or bf16 (autocast), comma list (default: fp32)")
    p.add_argument("--ddp", default=None, help=f"gradient sync over ranks, comma list of {', '.join(DDP)} "
                   "(none: each rank steps alone; default: bucketed, as torch's DistributedDataParallel, "
                   "on several ranks, none on one)")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="bucket size for --ddp bucketed (default: 25)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first; 0 shows the cold start (default: 5)")
    p.add_argument("--capturable", action="store_true",
                   help="AdamW(capturable=True), the optimizer a CUDA graph of the whole step needs (GPU only): "
                        "an eager trace of the same kernels that a CUDA graph of the whole step replays")
    add_speed_arguments(p)  # --cuda-graph, --compile, --tf32, --attention
    p.add_argument("--steps", type=int, default=10, help="timed steps (default: 10)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the device's peak for MFU (default: H100/H200 datasheet dense peak for the dtype)")
    late.add_arguments(p)  # before the backward, so before the gradient all-reduce
    p.add_argument("--host-stall-before-sync", action="store_true",
                   help="the --host-stall-ms sleep after the backward, before the gradient sync (grad_sync) waits "
                        "for its all-reduces, instead of before the backward: with --ddp overlap or bucketed they are "
                        "in flight meanwhile, so the host's wait on them returns at once and the stall sits between "
                        "their end and its next operator")
    add_memory_arguments(p)  # --extra-memory-mb, --memory-snapshot, --module-scopes
    p.add_argument("--seed", type=int, default=0)
    return _validate(p.parse_args(argv), gpu)


def needs_torch(args: argparse.Namespace) -> bool:
    return False


def _validate(args: argparse.Namespace, gpu: bool) -> argparse.Namespace:
    args.sizes = shared.parse_choices("--size", args.size, list(SIZES))
    args.phases = shared.parse_choices("--phase", args.phase, PHASES)
    args.dtypes = shared.parse_choices("--dtype", args.dtype, DTYPES)
    world_size = shared.env_rank()[1]
    args.ddp = args.ddp or ("bucketed" if world_size > 1 else "none")  # data parallel means synced gradients
    args.ddps = shared.parse_choices("--ddp", args.ddp, DDP)
    for option, value in (("--context-length", args.context_length), ("--batch-size", args.batch_size),
                          ("--vocab-size", args.vocab_size), ("--steps", args.steps), ("--bucket-mb", args.bucket_mb)):
        if value <= 0:
            raise UsageError(option, f"must be positive, not {value}")
    late.check(args)
    if args.host_stall_before_sync and args.host_stall_ms is None:
        raise UsageError("--host-stall-before-sync", "needs --host-stall-ms R:MS (whose sleep it places)")
    check_speed(args, gpu)
    if args.capturable and not gpu:
        raise UsageError("--capturable", "AdamW(capturable=True) needs a GPU")
    check_memory(args, gpu)
    if args.warmup < 0:
        raise UsageError("--warmup", f"must be 0 or more, not {args.warmup}")
    if args.batch_size % world_size:
        raise UsageError("--batch-size", f"{args.batch_size} sequences do not divide over {world_size} ranks")
    if args.ddps != ["none"] and "MASTER_ADDR" not in os.environ:
        raise UsageError("--ddp", "data parallel needs ranks: run through torchrun or `tracelab run train --ranks N`")
    configs = len(args.sizes) * len(args.phases) * len(args.dtypes) * len(args.ddps)
    if args.backend != "none" and configs > 1:
        raise UsageError("--backend", f"a profiled run takes one size, phase, dtype and ddp ({configs} given); "
                                      "sweep with --backend none")
    backends.check(args.backend, gpu)
    return args


def add_speed_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cuda-graph", action="store_true",
                   help="capture the whole step (forward, backward, the optimizer) in one CUDA graph after the "
                        "warm-up and replay it every step: one launch per step (GPU only; implies --capturable; "
                        "takes --ddp none, no --host-stall-ms and --late-every 1)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model, default mode (fused Triton kernels on a GPU, C++ on the CPU); "
                        "it compiles during the warm-up steps")
    p.add_argument("--tf32", action="store_true",
                   help="fp32 matrix products on TF32 tensor cores (torch.set_float32_matmul_precision('high'); "
                        "NVIDIA GPU only)")
    p.add_argument("--attention", choices=ATTENTION, default=None,
                   help=f"attention's product in an `{SDPA_REGION}` region (so its kernels can be named: whatif "
                        f"--scenario scale:{SDPA_REGION}=F), on torch's choice of kernel (auto: a fused one where "
                        "one fits) or the unfused math (matmul, softmax, matmul) (default: torch's choice, no region)")


def check_speed(args: argparse.Namespace, gpu: bool) -> None:
    """UsageError for a speed option this machine or these other options cannot honour."""
    if args.cuda_graph:
        _check_graph(args, gpu)
        args.capturable = True  # AdamW's step counts on the device: what a captured step needs
    if args.tf32 and not gpu:
        raise UsageError("--tf32", "TF32 is an NVIDIA GPU's tensor-core format: it needs a GPU")


def _check_graph(args: argparse.Namespace, gpu: bool) -> None:
    if not gpu:
        raise UsageError("--cuda-graph", "a CUDA graph needs a GPU")
    refused = {"--ddp": args.ddps != ["none"], "--host-stall-ms": args.host_stall_ms is not None,
               "--late-every": args.late_every != 1, "--compile": args.compile}
    why = {"--ddp": "this workload's gradient syncs wait on the host: take --ddp none",
           "--host-stall-ms": "a host's sleep is not replayed by a graph", "--late-every": "a graph replays one step",
           "--compile": "choose one of the two"}
    for option, bad in refused.items():
        if bad:
            raise UsageError("--cuda-graph", f"not with {option}: {why[option]}")


def add_memory_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--extra-memory-mb", default="", metavar="R:MB[,R:MB]",
                   help="rank R holds MB MiB more through each step (a rank that holds more, on purpose; default: none)")
    p.add_argument("--memory-snapshot", action="store_true",
                   help="write a PyTorch memory snapshot of the last timed step to rank{r}.memory.pickle (GPU only)")
    p.add_argument("--module-scopes", action="store_true",
                   help="a region per top-level module in the forward (activations grouped by module)")


def check_memory(args: argparse.Namespace, gpu: bool) -> None:
    """Parse --extra-memory-mb into args.extra_memory ({rank: MiB}); UsageError on bad input."""
    args.extra_memory = {}
    for part in filter(None, (s.strip() for s in args.extra_memory_mb.split(","))):
        rank, sep, mib = part.partition(":")
        try:
            r, n = int(rank), float(mib)
        except ValueError:
            raise UsageError("--extra-memory-mb", f"{part!r} is not RANK:MB") from None
        if not sep or r < 0 or n <= 0:
            raise UsageError("--extra-memory-mb", f"{part!r}: the rank must be 0 or more and the MB positive")
        args.extra_memory[r] = n
    if args.memory_snapshot and not gpu:
        raise UsageError("--memory-snapshot", "a memory snapshot records the CUDA caching allocator: it needs a GPU")
