#!/usr/bin/env python3
"""tracelab report against HolisticTraceAnalysis 0.5.0 on the same N ranks, side by side in
one run on this machine: each command measured for its whole process tree (measure_tree.py:
wall, CPU of the tree, peak of the summed resident sets), tracelab and HTA alternating.

usage: bench_hta_ranks.py --hta-python /path/to/hta-venv/bin/python DIR [DIR ...]

DIR: rank folders made by make_ranks.py (HTA reads every trace in its folder). tracelab runs
with TRACELAB_CACHE=0 (every rank parsed); HTA runs benchmarks/hta_report.py (its temporal,
idle, overlap and kernel breakdowns). Prints one JSON line per measurement, then a table.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def measure(command: list[str]) -> dict:
    out = subprocess.run([sys.executable, str(HERE / "measure_tree.py"), "--", *command], capture_output=True,
                         text=True, env={**os.environ, "TRACELAB_CACHE": "0"}, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hta-python", required=True)
    p.add_argument("dirs", nargs="+", type=Path)
    a = p.parse_args()
    rows = []
    for folder in a.dirs:
        ranks = len(list(folder.glob("*.json.gz")))
        report = folder.parent / f"{folder.name}-report.html"
        tl = measure([sys.executable, "-m", "tracelab", "report", str(folder), "-o", str(report), "--force"])
        hta = measure([a.hta_python, str(HERE / "hta_report.py"), str(folder)])
        for tool, m in (("tracelab report", tl), ("HTA 0.5.0 (hta_report.py)", hta)):
            print(json.dumps({"tool": tool, "ranks": ranks, **m}), flush=True)
            rows.append((ranks, tool, m))
    print("\n| ranks | tool | wall (s) | CPU (s) | peak tree (MB) | largest process (MB) | load avg |")
    print("|---|---|---|---|---|---|---|")
    for ranks, tool, m in rows:
        print(f"| {ranks:,} | {tool} | {m['wall_s']:.1f} | {m['cpu_s']:.1f} | {m['peak_tree_rss_mb']:,} | "
              f"{m['largest_process_maxrss_mb']:,} | {m['load_avg_1m']:.1f} |")
    for ranks in dict.fromkeys(r for r, _, _ in rows):
        tl, hta = (m for r, _, m in rows if r == ranks)
        print(f"\n{ranks:,} ranks: HTA / tracelab CPU {hta['cpu_s'] / tl['cpu_s']:.1f}x, peak memory "
              f"{hta['peak_tree_rss_mb'] / tl['peak_tree_rss_mb']:.1f}x, wall {hta['wall_s'] / tl['wall_s']:.1f}x")


if __name__ == "__main__":
    main()
