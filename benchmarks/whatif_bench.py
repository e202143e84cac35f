#!/usr/bin/env python3
"""tracelab whatif: the unchanged replay against every capture in tests/data, and its cost.

    python benchmarks/whatif_bench.py repro                 # per capture: steps, median and largest error
    python benchmarks/whatif_bench.py cost DIR [--repeat N] # CPU s of graphs + default replays of DIR's ranks

`cost` parses first (not counted: `tracelab breakdown` pays it too), then times in this process,
as CPU seconds (user+sys, the machine is shared): the ranks' graphs (nodes.rank_graph, made per
rank), their join, the unchanged replay with its critical paths, and the default scenarios.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import tracelab
from tracelab.reports.roofline.roofline import trace_device
from tracelab.reports.whatif import rank_graph, whatif

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def graphs_of(profiles):
    return ({p.rank: rank_graph(p.events, p.host, p.rank, trace_device(p.meta)) for p in profiles},
            {p.rank: p.meta.get("trace_start_epoch_ns") for p in profiles})


def repro() -> None:
    errors, flagged, n_steps = [], [], 0
    for folder in sorted(d for d in DATA.iterdir() if d.is_dir() and d.name not in ("public", "proton-legacy")
                         and not d.name.endswith(("-proton", "-none"))):
        profiles = [p for p in tracelab.load_many(folder) if p.meta.get("source") != "proton"]
        if not profiles:
            continue
        w = whatif(*graphs_of(profiles), ["no-host-gaps"])
        if not len(w.steps):
            continue
        err = w.steps["error_frac"].to_numpy(dtype=float)
        errors += err.tolist()
        n_steps += len(err)
        flagged += [f"{folder.name} step {s}" for s in w.steps.loc[~w.steps["claimed"], "step"]]
        print(f"{folder.name:36s} steps {len(err):3d}  max error {np.nanmax(err):.2e}  "
              f"unexplained {int(w.steps['unexplained_ns'].sum()) / 1e6:.3f} ms  rounds {w.rounds}")
    print(f"{n_steps} steps: median error {statistics.median(errors):.2e}, largest {max(errors):.2e}; "
          f"not claimed: {flagged or 'none'}")


def cost(folder: str, repeat: int) -> None:
    profiles = tracelab.load_many(folder)
    rows = sum(len(p.events) for p in profiles)
    host_rows = sum(len(p.host) for p in profiles if p.host is not None)
    best = None
    for _ in range(repeat):
        t0 = cpu_s()
        graphs, epochs = graphs_of(profiles)
        t1 = cpu_s()
        w = whatif(graphs, epochs)
        t2 = cpu_s()
        best = (t1 - t0, t2 - t1) if best is None or t2 - t0 < sum(best) else best
    n = len(profiles)
    print(f"{n} ranks, {rows} GPU rows, {host_rows} host rows; graphs {best[0]:.2f} s, join + replay + paths + "
          f"{len(w.scenarios)} scenarios {best[1]:.2f} s CPU; {sum(best) / n:.3f} s CPU per rank; rounds {w.rounds}")
    print(w.scenarios.to_string())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("repro", "cost"))
    p.add_argument("folder", nargs="?")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    if args.what == "repro":
        repro()
    else:
        cost(args.folder, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
