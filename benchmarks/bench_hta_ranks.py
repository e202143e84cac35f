#!/usr/bin/env python3
"""tracelab report against HolisticTraceAnalysis 0.5.0 on the same N ranks, side by side in
one run on this machine: each command measured for its whole process tree (measure_tree.py:
wall, CPU of the tree, peak of the summed resident sets), tracelab and HTA alternating.

usage: bench_hta_ranks.py --hta-python /path/to/hta-venv/bin/python [--tracelab report breakdown] [--base DIR] DIR [DIR ...]

DIR: rank folders made by make_ranks.py (HTA reads every trace in its folder). tracelab runs
with TRACELAB_CACHE=0 (every rank parsed); HTA runs benchmarks/hta_report.py (its temporal,
idle, overlap and kernel breakdowns). --tracelab: which tracelab commands are measured per
folder (`report DIR -o FILE`, `breakdown DIR`), each before HTA. Prints one JSON line per
measurement, then a table and, for each folder given (a folder given three times: three pairs),
HTA's ratio to each tracelab command of the same turn. --base: another checkout (e.g. `git archive
main | tar -x -C /tmp/base`) whose tracelab commands are measured too, in each turn before this
one's: a before/after under the same load. Each checkout runs from its own root (`python -m
tracelab` imports the tracelab it finds there).

Both tools run from bytecode, as installed: pip compiled HTA's modules when it installed them,
and tracelab's are compiled here first (compileall): an editable checkout run under
PYTHONDONTWRITEBYTECODE=1 would compile ~150 modules from source in every command (~0.4 s
of CPU each time, none of it the work measured).
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
HTA = "HTA 0.5.0 (hta_report.py)"


def measure(command: list[str], cwd: Path | None = None) -> dict:
    out = subprocess.run([sys.executable, str(HERE / "measure_tree.py"), "--", *command], capture_output=True,
                         text=True, env={**os.environ, "TRACELAB_CACHE": "0"}, check=True, cwd=cwd)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hta-python", required=True)
    p.add_argument("--tracelab", nargs="+", choices=["report", "breakdown"], default=["report"])
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()), help="folder of the reports written")
    p.add_argument("--base", type=Path, help="another checkout's root, measured too (module docstring)")
    p.add_argument("dirs", nargs="+", type=Path)
    a = p.parse_args()
    checkouts = [*([(" (base)", a.base.resolve())] if a.base else []), ("", HERE.parent)]
    for _, root in checkouts:
        compileall.compile_dir(root / "tracelab", quiet=1)  # module docstring: both tools from bytecode
    rows = []  # (pair: the folder's turn, ranks, tool, measurement)
    for pair, folder in enumerate(d.resolve() for d in a.dirs):
        ranks = len(list(folder.glob("*.json.gz")))
        for suffix, root in checkouts:
            report = a.out.resolve() / f"{folder.name}-report{'-base' if suffix else ''}.html"
            commands = {"report": ["report", str(folder), "-o", str(report), "--force"], "breakdown": ["breakdown", str(folder)]}
            for command in a.tracelab:
                rows.append((pair, ranks, f"tracelab {command}{suffix}",
                             measure([sys.executable, "-m", "tracelab", *commands[command]], cwd=root)))
                print(json.dumps({"tool": rows[-1][2], "ranks": ranks, **rows[-1][3]}), flush=True)
        rows.append((pair, ranks, HTA, measure([a.hta_python, str(HERE / "hta_report.py"), str(folder)])))
        print(json.dumps({"tool": HTA, "ranks": ranks, **rows[-1][3]}), flush=True)
    print("\n| ranks | tool | wall (s) | CPU (s) | peak tree (MB) | largest process (MB) | load avg |")
    print("|---|---|---|---|---|---|---|")
    for _, ranks, tool, m in rows:
        print(f"| {ranks:,} | {tool} | {m['wall_s']:.1f} | {m['cpu_s']:.1f} | {m['peak_tree_rss_mb']:,} | "
              f"{m['largest_process_maxrss_mb']:,} | {m['load_avg_1m']:.1f} |")
    for pair in dict.fromkeys(p for p, _, _, _ in rows):  # each folder's turn: its tracelab runs against its HTA run
        ranks, hta = next((r, m) for p, r, tool, m in rows if p == pair and tool == HTA)
        for tool, tl in ((tool, m) for p, _, tool, m in rows if p == pair and tool != HTA):
            print(f"{ranks:,} ranks, pair {pair + 1}: HTA / {tool}: CPU {hta['cpu_s'] / tl['cpu_s']:.1f}x, peak memory "
                  f"{hta['peak_tree_rss_mb'] / tl['peak_tree_rss_mb']:.1f}x, wall {hta['wall_s'] / tl['wall_s']:.1f}x")

if __name__ == "__main__":
    main()
