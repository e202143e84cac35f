"""A rank made late on purpose, to test straggler verdicts on real collectives: the late
rank does extra matrix products, in an `extra_work` region, before the step's collectives
(train: before the backward and its gradient all-reduce; decode: before each token's step
and its tensor-parallel all-reduces)."""
from __future__ import annotations

import argparse
from typing import Callable

import torch

from tracelab import backends
from tracelab.errors import UsageError

LATE = ("none", "rank1", "alternating")  # who does the extra work


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--late", default="none", choices=LATE,
                   help="make a rank late on purpose, to test straggler verdicts: rank1 does --late-work before "
                        "every step's collectives, alternating gives it to the rank of the step's parity "
                        "(default: none)")
    p.add_argument("--late-work", type=int, default=4,
                   help="the extra work: this many products of two 4096x4096 fp32 matrices on a GPU "
                        "(1024x1024 on the CPU), in an `extra_work` region (default: 4)")


def check(args: argparse.Namespace) -> None:
    if args.late_work < 0:
        raise UsageError("--late-work", f"must be 0 or more, not {args.late_work}")


def late_work(late: str, n_products: int, rank: int, device: torch.device) -> Callable[[int], None]:
    """A function of the step's index that does the extra work when this rank is the late
    one: products of two square fp32 matrices, [N, N] @ [N, N]."""
    size = 4096 if device.type == "cuda" else 1024
    a = torch.randn(size, size, device=device) / size**0.5 if late != "none" and n_products else None

    def maybe(i: int) -> None:
        if a is None or rank != (1 if late == "rank1" else i % 2):
            return
        with backends.region("extra_work"):
            b = a
            for _ in range(n_products):
                b = b @ a

    return maybe
