"""Issue 30's parse goal, like for like: one Kineto trace parsed in one warm process against the
floor measured in the same process with the same malloc settings.

    python benchmarks/warm_parse.py TRACE [--runs 9] [--heap] [--repo DIR]

floor = a gunzip of the file + msgspec's raw split of `traceEvents`, measured twice: with the
stdlib's zlib and with ISA-L's (isal, the `fast` extra: what tracelab's own gunzip uses where it is
installed, so the like-for-like floor); parse = parsers.chrome.read + classify.classified (what
`tracelab.load` does with its cache off). Each is the least CPU time (process_time) of --runs,
after one untimed run of each. --heap first applies
the CLI's setting (limits.reuse_freed_memory: freed blocks reused, not mapped afresh), which makes
both cheaper. --repo DIR measures another checkout (bench_stages.use_checkout).
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import zlib
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stages import use_checkout  # noqa: E402


class _Split(msgspec.Struct):
    traceEvents: list[msgspec.Raw] = []


def least(fn, runs: int) -> float:
    """The least CPU time (process_time) of `runs` calls of fn, each after a garbage collection."""
    best = float("inf")
    for _ in range(runs):
        gc.collect()
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def warm_least(fn, runs: int) -> float:
    """kineto_floor.least after one untimed call (the process warm)."""
    fn()
    return least(fn, runs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", type=Path)
    p.add_argument("--runs", type=int, default=9)
    p.add_argument("--heap", action="store_true")
    p.add_argument("--repo", type=Path)
    a = p.parse_args()
    if a.repo:
        use_checkout(a.repo)
    from tracelab.core import classify, limits
    from tracelab.parsers import chrome

    from tracelab.core.options import Options

    if a.heap and not limits.reuse_freed_memory(Options.from_environment()):
        sys.exit("--heap: this C library or environment declines the setting")
    raw, split = a.trace.read_bytes(), msgspec.json.Decoder(_Split)
    floors = {"zlib": warm_least(lambda: split.decode(zlib.decompress(raw, 31)), a.runs)}
    try:
        from isal import isal_zlib
        floors["isal"] = warm_least(lambda: split.decode(isal_zlib.decompress(raw, 31)), a.runs)
    except ImportError:
        pass
    parse_s = warm_least(lambda: classify.classified(chrome.read(a.trace).events), a.runs)
    against = ", ".join(f"floor ({name}) {s:.4f} s: {parse_s / s:.2f}x" for name, s in floors.items())
    print(f"{a.trace.name}: {Path(chrome.__file__).parents[1]}: parse {parse_s:.4f} s (gunzip by "
          f"{'isal' if getattr(limits, '_isal_zlib', None) is not None else 'zlib'}); {against} "
          f"(least of {a.runs}{', heap reused' if a.heap else ''}; load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
