"""Kineto parse time against its floor: the file's bytes (gunzipped when gzip) plus
msgspec's raw split of `traceEvents`, the least any msgspec reader of the trace pays.

    python benchmarks/kineto_floor.py TRACE.json[.gz] [TRACE ...] [--repeat 3] [--repo DIR]

Each figure is the least CPU time (process_time) of --repeat runs in this one process,
the Parquet cache not involved (parsers/chrome.read is called directly). --repo DIR
measures another checkout's parser (e.g. a git worktree of an older commit) the same
way. Prints one markdown row per trace.
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path


def least(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        result = fn()
        best = min(best, time.process_time() - start)
        del result
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="+", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    sys.path.insert(0, str(args.repo.resolve()))
    import msgspec

    from tracelab import limits
    from tracelab.parsers import chrome

    Split = msgspec.defstruct("Split", [("traceEvents", list[msgspec.Raw])])

    print("| trace | MB read | bytes (s) | raw split (s) | floor (s) | parse (s) | parse / floor |")
    print("|---|---|---|---|---|---|---|")
    for path in args.traces:
        data = limits.read_trace_bytes(path)
        size_mb = len(data) / 1e6
        del data
        read_s = least(lambda: limits.read_trace_bytes(path), args.repeat)
        data = limits.read_trace_bytes(path)
        split_s = least(lambda: msgspec.json.decode(data, type=Split), args.repeat)
        del data
        parse_s = least(lambda: chrome.read(path), args.repeat)
        floor_s = read_s + split_s
        print(f"| {path.name} | {size_mb:.0f} | {read_s:.3f} | {split_s:.3f} | {floor_s:.3f} | {parse_s:.3f} | "
              f"{parse_s / floor_s:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
