"""Time and memory of who-waits-on-whom (reports/waits.analyse: matching collectives across
ranks, the step table, gating, causes, verdict) on 8 and 64 ranks of a tiled real trace.

    python benchmarks/bench_waits.py [--copies 20] [--ranks 8,64]

Ranks are our 2-GPU decode (tests/data/decode-2gpu-torch) tiled in time with
../shared/bench/tile_trace.py (`--copies` tokens x 5 each) and then copied, rank r a copy
of rank r % 2 with its distributedInfo rank set to r. Not a test: it prints one Markdown
row per rank count for benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TILE = ROOT.parent / "shared" / "bench" / "tile_trace.py"
SOURCE = ROOT / "tests" / "data" / "decode-2gpu-torch"


def tiled_pair(folder: Path, copies: int) -> list[dict]:
    """The two ranks tiled `copies` times, as parsed JSON documents."""
    docs = []
    for rank in (0, 1):
        out = folder / f"tiled{rank}.json.gz"
        subprocess.run([sys.executable, str(TILE), str(SOURCE / f"rank{rank}.pt.trace.json.gz"), str(out),
                        "--copies", str(copies)], check=True)
        docs.append(json.loads(gzip.open(out).read()))
    return docs


def write_ranks(folder: Path, docs: list[dict], n_ranks: int) -> None:
    for r in range(n_ranks):
        doc = docs[r % 2]
        doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": r, "world_size": n_ranks}
        with gzip.open(folder / f"rank{r}.pt.trace.json.gz", "wt", compresslevel=1) as f:
            json.dump(doc, f)


def late_rank(events, n_ranks: int, late_ns: int = 200_000):
    """Rank 0's events on every rank, rank n-1 given late_ns of extra work before each
    collective (tests/shifted.py), so that every step is gated and explained."""
    sys.path.insert(0, str(ROOT / "tests"))
    from shifted import make_late, ranks_from_one

    base, _ = ranks_from_one(events, 0, n_ranks)
    late, _ = make_late(base, lambda c, step, rank: late_ns if rank == n_ranks - 1 else 0, seed=0, jitter_ns=2_000)
    return late


def measure(folder: Path, late: bool = False) -> dict:
    import tracelab
    from tracelab.reports.steps.waits import analyse

    from tracelab.options import Options

    t0 = time.perf_counter()
    profiles = tracelab.load_many(folder, options=Options(step_pattern="decode_one_token"))
    events = tracelab.events(profiles)
    epochs = {p.rank: p.meta["trace_start_epoch_ns"] for p in profiles}
    if late:
        events, epochs = late_rank(events, len(profiles)), {p.rank: None for p in profiles}
    t1 = time.perf_counter()
    gc.collect()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    w = analyse(events, epochs)
    t2 = time.perf_counter()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"ranks": len(profiles), "rows": len(events), "collectives": int(w.collectives["collective"].nunique()),
            "steps": int(w.steps["step"].nunique()), "load_s": t1 - t0, "analyse_s": t2 - t1,
            "peak_rss_mb": rss1 / 1024, "analyse_rss_growth_mb": (rss1 - rss0) / 1024, "line": w.line}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--copies", type=int, default=20)
    p.add_argument("--ranks", default="8,64")
    p.add_argument("--late", action="store_true", help="rank 0's work on every rank, the last rank late "
                                                       "before every collective (every step gated and explained; "
                                                       "load then includes making it)")
    args = p.parse_args()
    print(f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print("| ranks | rows | collectives | steps | load (s) | analyse (s) | peak RSS (MB) | analyse RSS growth (MB) |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        docs = tiled_pair(Path(tmp), args.copies)
        for n in map(int, args.ranks.split(",")):
            folder = Path(tmp) / f"r{n}"
            folder.mkdir()
            write_ranks(folder, docs, n)
            m = measure(folder, args.late)
            print(f"| {m['ranks']} | {m['rows']:,} | {m['collectives']:,} | {m['steps']} | {m['load_s']:.2f} | "
                  f"{m['analyse_s']:.2f} | {m['peak_rss_mb']:,.0f} | {m['analyse_rss_growth_mb']:,.0f} |")
            print(f"  verdict: {m['line']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
