"""What every workload's options share: --backend, --out, --timeout-s and --no-unprofiled, the
world torchrun set, and size and choice lists. No torch."""
from __future__ import annotations

import argparse
import os
import re

from tracelab.core.errors import UsageError
from tracelab.run import backends

DEFAULT_TIMEOUT_S = 180.0
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "G": 1 << 30, "GB": 1 << 30}


def env_rank() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) as torchrun set them; (0, 1, 0) when run alone."""
    get = os.environ.get
    return int(get("RANK", 0)), int(get("WORLD_SIZE", 1)), int(get("LOCAL_RANK", 0))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every workload takes: --backend, --out (tracelab run sets them) and --timeout-s."""
    backends.add_arguments(parser)
    parser.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S,
                        help="a collective waiting longer fails (default: %(default)s)")
    parser.add_argument("--no-unprofiled", dest="unprofiled", action="store_false",
                        help="skip timing the profiled steps once more with the profiler off (by default the "
                             "results hold both, unprofiled_step_ns and profiled_step_ns: the profiler's cost)")


def parse_bytes(text: str) -> int:
    """'4K', '64KB', '1M', '1G', '4096' -> bytes (powers of 1024)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?B?)\s*", text.upper())
    if not m or int(m.group(1)) <= 0:
        raise UsageError("--sizes", f"{text!r} is not a size (say 4096, 4K, 64KB, 1M or 1G)")
    return int(m.group(1)) * _UNITS[m.group(2)]


def parse_sizes(text: str) -> list[int]:
    """A comma list of sizes, each a size or a range LO-HI (powers of 2 from LO to HI)."""
    sizes: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = (parse_bytes(p) for p in part.split("-", 1))
            if hi < lo:
                raise UsageError("--sizes", f"range {part!r} runs backwards")
            while lo <= hi:
                sizes.append(lo)
                lo *= 2
        else:
            sizes.append(parse_bytes(part))
    return sorted(set(sizes))


def parse_choices(option: str, text: str, choices: tuple[str, ...] | list[str]) -> list[str]:
    """A comma list, each item one of choices."""
    picked = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in picked if t not in choices]
    if unknown or not picked:
        raise UsageError(option, f"unknown {', '.join(unknown) or 'empty list'}; "
                                 f"choose from {', '.join(choices)}")
    return picked


def human_bytes(n: int) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)
