"""Issue 30's parse goal, like for like: one Kineto trace parsed in one warm process against the
floor measured in the same process with the same malloc settings.

    python benchmarks/warm_parse.py TRACE [--runs 9] [--heap] [--repo DIR]

floor = the stdlib's zlib gunzip of the file + msgspec's raw split of `traceEvents`; parse =
parsers.chrome.read + classify.classified (what `tracelab.load` does with its cache off). Each is
the least CPU time (process_time) of --runs, after one untimed run of each. --heap first applies
the CLI's setting (limits.reuse_freed_memory: freed blocks reused, not mapped afresh), which makes
both cheaper. --repo DIR measures another checkout (bench_stages.use_checkout).
"""
from __future__ import annotations

import argparse
import sys
import zlib
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stages import use_checkout  # noqa: E402
from kineto_floor import least  # noqa: E402


class _Split(msgspec.Struct):
    traceEvents: list[msgspec.Raw] = []


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
    floor_s = warm_least(lambda: split.decode(zlib.decompress(raw, 31)), a.runs)
    parse_s = warm_least(lambda: classify.classified(chrome.read(a.trace).events), a.runs)
    print(f"{a.trace.name}: {Path(chrome.__file__).parents[1]}: floor {floor_s:.4f} s, parse {parse_s:.4f} s, "
          f"{parse_s / floor_s:.2f}x (least of {a.runs}{', heap reused' if a.heap else ''})")


if __name__ == "__main__":
    main()
