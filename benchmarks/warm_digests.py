"""The per-rank digests of a report (reports/ranks.RANK_DIGESTS but the gate's) on traces already
parsed, in one warm process: what a pool worker pays per rank after its first.

    python benchmarks/warm_digests.py TRACE [TRACE ...] [--runs 8] [--repo DIR]

Each trace is parsed once (cache off); then, --runs times, every digest is made from a fresh
RankData (nothing shared between runs, as between ranks). Prints, per trace, the least and the
median CPU time (process_time) of a run and the least of each digest, in seconds. --repo DIR
measures another checkout (bench_stages.use_checkout): alternate the two on a shared machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stages import use_checkout  # noqa: E402


def digest_seconds(path: Path, runs: int) -> tuple[list[float], dict[str, float]]:
    """Per run the CPU seconds of all digests, and per digest its least."""
    import tracelab
    from tracelab.core.schema import RankData
    from tracelab.reports.ranks import RANK_DIGESTS

    profile = tracelab.load(path)
    names = [n for n in RANK_DIGESTS if n != "gate"]  # the gate's: a report of two runs or more
    totals, least = [], dict.fromkeys(names, float("inf"))
    for _ in range(runs + 1):  # the first run warms the process (patterns compiled, modules imported)
        rank = RankData(profile.events, profile.meta, profile.host, profile.memory)
        total = 0.0
        for name in names:
            start = time.process_time()
            RANK_DIGESTS[name](rank)
            took = time.process_time() - start
            total, least[name] = total + took, min(least[name], took)
        totals.append(total)
    return totals[1:], least


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+", type=Path)
    p.add_argument("--runs", type=int, default=8)
    p.add_argument("--repo", type=Path)
    a = p.parse_args()
    if a.repo:
        use_checkout(a.repo)
    os.environ["TRACELAB_CACHE"] = "0"
    from tracelab.reports import ranks

    for path in a.traces:
        totals, least = digest_seconds(path, a.runs)
        top = sorted(least.items(), key=lambda kv: -kv[1])[:6]
        print(f"{path.name}: {Path(ranks.__file__).parents[1]}: digests least {min(totals):.4f} s, median "
              f"{statistics.median(totals):.4f} s of {a.runs}; " + ", ".join(f"{n} {s:.4f}" for n, s in top)
              + f" (load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
