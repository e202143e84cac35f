"""The options of a rank made late on purpose (workloads/late.py): who does the extra work, how
much, how often, and a host stall. No torch."""
from __future__ import annotations

import argparse

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
