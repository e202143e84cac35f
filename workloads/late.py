"""A rank made late on purpose, to test straggler verdicts and what-if replays on real
collectives: the late rank does extra matrix products, in an `extra_work` region, before the
step's collectives (train: before the backward and its gradient all-reduce; decode: before
each token's step and its tensor-parallel all-reduces); or, with --host-stall-ms R:MS, rank R's
host waits for its device and then sleeps MS ms in a `host_stall` region at that point (a
host stall after a sync: the GPU idles meanwhile), or with --host-stall-unmarked in no region,
untraced, as a real stall (a data loader, an `.item()`) is. --late-every N does either every N-th step
only: the steps between are the same job without it, measured under the same conditions."""
from __future__ import annotations

import argparse
import contextlib
import time
from typing import Callable

import torch

from tracelab.run import backends
from tracelab.core.errors import UsageError

LATE = ("none", "rank0", "rank1", "alternating")  # who does the extra work


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--late", default="none", choices=LATE,
                   help="make a rank late on purpose, to test straggler verdicts: rank0 or rank1 does --late-work "
                        "before every step's collectives (rank0 on one rank: a named scope of extra work to remove), "
                        "alternating gives it to the rank of the step's parity (default: none)")
    p.add_argument("--late-work", type=int, default=4,
                   help="the extra work: this many products of two 4096x4096 fp32 matrices on a GPU "
                        "(1024x1024 on the CPU), in an `extra_work` region (default: 4)")
    p.add_argument("--late-every", type=int, default=1, metavar="N",
                   help="the extra work and the host stall happen every N-th step (or token) only, from the "
                        "first: the steps between are the same job without them, under the same conditions "
                        "(default: 1, every step)")
    p.add_argument("--host-stall-ms", default=None, metavar="R:MS",
                   help="rank R synchronises its device, then its host sleeps MS milliseconds in a `host_stall` "
                        "region, at the same point of every step (default: none)")
    p.add_argument("--host-stall-unmarked", action="store_true",
                   help="the --host-stall-ms sleep in no region: untraced host time, as a real stall is")


def check(args: argparse.Namespace) -> None:
    if args.late_work < 0:
        raise UsageError("--late-work", f"must be 0 or more, not {args.late_work}")
    if args.late_every < 1:
        raise UsageError("--late-every", f"must be 1 or more, not {args.late_every}")
    stall_of(args.host_stall_ms)


def stall_of(spec: str | None) -> tuple[int, float] | None:
    """(rank, ms) of --host-stall-ms R:MS, None without; UsageError when malformed."""
    if spec is None:
        return None
    rank, _, ms = spec.partition(":")
    try:
        out = int(rank), float(ms)
    except ValueError:
        raise UsageError("--host-stall-ms", f"{spec!r} is not R:MS (a rank and milliseconds, e.g. 1:10)") from None
    if out[0] < 0 or not 0 <= out[1] < 3.6e6:
        raise UsageError("--host-stall-ms", f"{spec!r}: the rank must be 0 or more and MS from 0 to 3,600,000")
    return out


def extra(args: argparse.Namespace, rank: int, device: torch.device) -> Callable[[int], None]:
    """A function of the step's index doing this rank's extra work (late_work) and host stall
    (--host-stall-ms), in that order."""
    work = late_work(args.late, args.late_work, rank, device)
    stall = stall_of(getattr(args, "host_stall_ms", None))
    every = getattr(args, "late_every", 1)
    unmarked = getattr(args, "host_stall_unmarked", False)

    def both(i: int) -> None:
        if i % every:
            return
        work(i)
        if stall is not None and stall[0] == rank:
            with contextlib.nullcontext() if unmarked else backends.region("host_stall"):
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                time.sleep(stall[1] / 1e3)

    return both


def late_work(late: str, n_products: int, rank: int, device: torch.device) -> Callable[[int], None]:
    """A function of the step's index that does the extra work when this rank is the late
    one: products of two square fp32 matrices, [N, N] @ [N, N]."""
    size = 4096 if device.type == "cuda" else 1024
    a = torch.randn(size, size, device=device) / size**0.5 if late != "none" and n_products else None

    def maybe(i: int) -> None:
        if a is None or rank != (i % 2 if late == "alternating" else int(late.removeprefix("rank"))):
            return
        with backends.region("extra_work"):
            b = a
            for _ in range(n_products):
                b = b @ a

    return maybe
