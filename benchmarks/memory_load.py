"""What reading memory events costs a Kineto load (issue 32): CPU seconds of tracelab.load (a
rank's load: parse, classify; the Parquet cache off) and of parsers.chrome.read alone, on a trace, reading its `[memory]` events into Profile.memory and not (the category left to the
union's skipped ones, as before issue 32), the best of N runs each; and the same on the trace
with its `[memory]` events taken out (the cost on traces without any).

    python benchmarks/memory_load.py TRACE.json[.gz] [--repeats 5]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
import time
from pathlib import Path

import tracelab
from tracelab.parsers import chrome


def cpu_s(path: Path, repeats: int, read=tracelab.load) -> tuple[float, float]:
    """The least CPU time (user+sys of this process) of `repeats` reads reading the memory
    events and as many not reading them, interleaved (the machine's load moves both alike)."""
    saved, best = chrome.MEMORY, {True: float("inf"), False: float("inf")}
    try:
        for _ in range(repeats):
            for memory in (True, False):
                chrome.MEMORY = saved if memory else "(memory events not read)"  # a category no trace has
                t0 = time.process_time()
                read(path)
                best[memory] = min(best[memory], time.process_time() - t0)
    finally:
        chrome.MEMORY = saved
    return best[True], best[False]


def without_memory(path: Path, folder: Path) -> Path:
    opened = gzip.open if path.suffix == ".gz" else open
    with opened(path, "rt") as f:
        doc = json.load(f)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "[memory]"]
    out = folder / "no-memory.json"
    out.write_text(json.dumps(doc))
    return out


def main() -> None:
    os.environ["TRACELAB_CACHE"] = "0"
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", type=Path)
    p.add_argument("--repeats", type=int, default=10)
    args = p.parse_args()
    rows = chrome.read(args.trace).memory
    print(f"{args.trace}: {0 if rows is None else len(rows):,} memory events")
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in (("with [memory] events", args.trace), ("without", without_memory(args.trace, Path(tmp)))):
            for what, read in (("tracelab.load", tracelab.load), ("chrome.read", chrome.read)):
                on, off = cpu_s(path, args.repeats, read)
                print(f"{name:>22}, {what}: memory read {on:.3f} s CPU, not read {off:.3f} s CPU: "
                      f"{100 * (on / off - 1):+.1f}%")


if __name__ == "__main__":
    main()
