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

from .options.late import stall_of

def extra(args: argparse.Namespace, rank: int, device: torch.device) -> Callable[[int], None]:
    """A function of the step's index doing this rank's extra work (late_work) and host stall
    (--host-stall-ms), in that order; the stall left to stall_before_sync where it comes before the
    gradient sync (train's --host-stall-before-sync)."""
    work = late_work(args.late, args.late_work, rank, device)
    every = getattr(args, "late_every", 1)
    stall = host_stall(args, rank, device) if not getattr(args, "host_stall_before_sync", False) else None

    def both(i: int) -> None:
        if i % every:
            return
        work(i)
        if stall is not None:
            stall()

    return both


def stall_before_sync(args: argparse.Namespace, rank: int, device: torch.device) -> Callable[[int], None] | None:
    """A function of the step's index doing this rank's host stall after the backward, before the
    gradient sync waits (train's --host-stall-before-sync, every --late-every-th step); None where
    there is none."""
    stall = host_stall(args, rank, device) if getattr(args, "host_stall_before_sync", False) else None
    every = getattr(args, "late_every", 1)
    return None if stall is None else lambda i: None if i % every else stall()


def host_stall(args: argparse.Namespace, rank: int, device: torch.device) -> Callable[[], None] | None:
    """This rank's --host-stall-ms: its device synchronised, then its host asleep MS ms, in a
    `host_stall` region or in none (--host-stall-unmarked); None where it is not this rank's."""
    stall = stall_of(getattr(args, "host_stall_ms", None))
    unmarked = getattr(args, "host_stall_unmarked", False)
    if stall is None or stall[0] != rank:
        return None

    def sleep() -> None:
        with contextlib.nullcontext() if unmarked else backends.region("host_stall"):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            time.sleep(stall[1] / 1e3)

    return sleep


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
