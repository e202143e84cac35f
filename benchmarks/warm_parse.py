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
from bench_stages import inflated, use_checkout  # noqa: E402


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
    inflaters = {"zlib": zlib}
    try:
        from isal import isal_zlib
        inflaters["isal"] = isal_zlib
    except ImportError:
        pass
    text_bytes = _same_text_bytes(a.trace, raw, inflaters, len(limits.read_trace_bytes(a.trace)))
    floors = {name: warm_least(lambda z=z: split.decode(inflated(raw, z)), a.runs) for name, z in inflaters.items()}
    parse_s = warm_least(lambda: classify.classified(chrome.read(a.trace).events), a.runs)
    against = ", ".join(f"floor ({name}) {s:.4f} s: {parse_s / s:.2f}x" for name, s in floors.items())
    print(f"{a.trace.name}: {Path(chrome.__file__).parents[1]}: parse {parse_s:.4f} s (gunzip by "
          f"{'isal' if getattr(limits, '_isal_zlib', None) is not None else 'zlib'}); {against} "
          f"(least of {a.runs}{', heap reused' if a.heap else ''}; {text_bytes:,} bytes of JSON; "
          f"load {os.getloadavg()[0]:.1f})")


def _same_text_bytes(path: Path, raw: bytes, inflaters: dict, parsed_bytes: int) -> int:
    """The bytes each floor's gunzip makes of the file, which must all be the parse's own
    (`parsed_bytes`, every gzip member), else the floor measures another text; exits naming them."""
    made = {name: len(inflated(raw, z)) for name, z in inflaters.items()}
    if set(made.values()) != {parsed_bytes}:
        sys.exit(f"{path}: the floors' gunzips make {made} bytes, the parse reads {parsed_bytes:,}")
    return parsed_bytes


if __name__ == "__main__":
    main()
