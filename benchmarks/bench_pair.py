"""bench_stages.py for two checkouts side by side: RUNS runs of each, alternating (the load on a
shared machine moves), the least CPU per stage kept; one markdown table, before and after.

    python benchmarks/bench_pair.py TRACE --base /tmp/base [--after /tmp/after] [--ranks N] [--runs 3]

Per stage: CPU seconds per rank before and after, and each over the floor (gunzip by the
stdlib's zlib + msgspec's raw split; the floor with isal's gunzip is printed beside it).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_stages import ORDER, totals  # noqa: E402


def _run(trace: Path, repo: Path, ranks: int | None) -> dict:
    cmd = [sys.executable, str(REPO / "benchmarks/bench_stages.py"), str(trace), "--json", "--repo", str(repo)]
    done = subprocess.run(cmd + (["--ranks", str(ranks)] if ranks else []), capture_output=True, text=True, check=True)
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))


def _least(runs: list[dict]) -> dict:
    out = dict(runs[0])
    for key in ("floor_s", "floor_isal_s", "total_s", "peak_rss_mb"):
        values = [r[key] for r in runs if r.get(key) is not None]
        out[key] = min(values) if values else None
    out["seconds"] = {s: min(r["seconds"].get(s, 0.0) for r in runs) for s in runs[0]["seconds"]}
    out["load"] = [round(r["load_avg_1m"], 1) for r in runs]
    return out


def table(before: dict, after: dict) -> str:
    n = after["ranks"]
    floor = min(before["floor_s"], after["floor_s"])
    isal = [r["floor_isal_s"] for r in (before, after) if r.get("floor_isal_s")]
    rows = [("floor: gunzip (zlib) + raw split", floor, floor)]
    if isal:
        rows.append(("floor, isal's gunzip + raw split", min(isal), min(isal)))
    stages = [s for s in ORDER if s in before["seconds"] or s in after["seconds"]]
    rows += [(s, before["seconds"].get(s, 0.0), after["seconds"].get(s, 0.0)) for s in stages]
    (parse_b, digests_b), (parse_a, digests_a) = totals(before["seconds"]), totals(after["seconds"])
    rows += [("= parse (gunzip .. classify)", parse_b, parse_a), ("= digests", digests_b, digests_a),
             ("= command (all stages)", before["total_s"], after["total_s"])]
    lines = [f"{n:,} rank{'s' if n > 1 else ''}, `tracelab {after['argv'][0]}`, one process, cache off; before "
             f"{before['repo']} (gunzip by {before.get('gunzip_by', 'zlib')}), after {after['repo']} (gunzip by "
             f"{after.get('gunzip_by', 'zlib')}); least of {len(after['load'])} alternating runs each; load average "
             f"{before['load']} / {after['load']}; peak RSS {before['peak_rss_mb']:,.0f} / {after['peak_rss_mb']:,.0f} MB",
             "", "| stage | before s/rank | after s/rank | before / floor | after / floor |", "|---|---:|---:|---:|---:|"]
    for name, b, a in rows:
        lines.append(f"| {name} | {b / n:.4f} | {a / n:.4f} | {b / floor:.2f}x | {a / floor:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace", type=Path)
    p.add_argument("--base", type=Path, required=True)
    p.add_argument("--after", type=Path, default=REPO, help="the checkout after (default: this one)")
    p.add_argument("--ranks", type=int)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for _ in range(a.runs):
        runs["before"].append(_run(a.trace, a.base, a.ranks))
        runs["after"].append(_run(a.trace, a.after, a.ranks))
    print(f"load average now {os.getloadavg()[0]:.1f}")
    print(table(_least(runs["before"]), _least(runs["after"])))


if __name__ == "__main__":
    main()
