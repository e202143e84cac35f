"""The gate's false alarms and detections, measured: runs tiny workloads on this machine (the
same config several times: A/A pairs; a changed config beside its base: A/B pairs), then gates
them with `tracelab gate --format json` as CI would, and prints one Markdown table.

    python benchmarks/gate_pairs.py make bench-out/gate [--runs 6] [--only train-torch,ab-late] [--threads 1]
    python benchmarks/gate_pairs.py judge bench-out/gate [--json pairs.json] [-- GATE OPTIONS]

`make` is resumable: a config's runs already there (run.json status ok) are kept, so a second
call only adds what is missing. Each run goes through tracelab's runner (tracelab.run.runner),
without the report `tracelab run` writes after it. A/A pairs: consecutive runs of one config
(run i against run i+1). A/B pairs: the base's run i against the change's run i, where each
change is the issue's: extra work in a scope on rank 1, bf16 autocast, DDP naive against
bucketed, twice the batch, 16 MiB more held on rank 1. With 6 runs of a config, its first 3
against its last 3 are gated as repeats (`-b .. -b .. -c .. -c ..`), and the base's first 3
against each change's first 3.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TRAIN = ["--size", "tiny", "--steps", "10", "--warmup", "2", "--context-length", "64", "--batch-size", "2"]
DECODE = ["--new-tokens", "12", "--samples", "2", "--warmup", "1", "--profile-tokens", "8"]
DDP = ["--size", "tiny", "--steps", "10", "--warmup", "2", "--context-length", "64", "--batch-size", "4"]

# config -> (workload, ranks, backend, workload options)
AA = {
    "train-torch": ("train", 1, "torch", TRAIN),
    "train-none": ("train", 1, "none", TRAIN),
    "decode-torch": ("decode", 1, "torch", DECODE),
    "decode-none": ("decode", 1, "none", DECODE),
    "ddp-torch": ("train", 2, "torch", DDP),
}
BASE = "ddp-torch"
REPEATS = 3  # runs a side in the repeats pairs, as docs/gate.md's recipe makes them
# change -> (the extra options on the base, the metric that must fail)
CHANGES = {
    "ab-late": (["--late", "rank1", "--late-work", "4"], "step_time"),
    "ab-bf16": (["--dtype", "bf16"], "step_time"),
    "ab-naive": (["--ddp", "naive"], "launches"),
    "ab-batch": (["--batch-size", "8"], "step_time"),
    "ab-memory": (["--extra-memory-mb", "1:16"], "peak_allocated"),
}


def configs() -> dict[str, tuple[str, int, str, list[str]]]:
    workload, ranks, backend, args = AA[BASE]
    return {**AA, **{name: (workload, ranks, backend, args + extra) for name, (extra, _) in CHANGES.items()}}


def done_runs(folder: Path) -> list[Path]:
    """The config's finished run folders, oldest first."""
    out = []
    for d in sorted(folder.glob("*/run.json")):
        try:
            if json.loads(d.read_text()).get("status") == "ok":
                out.append(d.parent)
        except ValueError:
            continue
    return out


def make(root: Path, runs: int, only: list[str] | None, threads: int) -> None:
    """Rounds of one run of every config, so that a pair's two runs are made minutes apart at most
    and the machine's load drifts over every config alike."""
    from tracelab.run.runner import RunSpec, run

    # each rank's OpenMP threads (the runner's default is the cores over the ranks): on a machine
    # shared with other jobs, threads that spin waiting on each other's time slices make a step 100x slower
    os.environ["OMP_NUM_THREADS"] = str(threads)
    chosen = {name: c for name, c in configs().items() if not only or name in only}
    for round_ in range(runs):
        for name, (workload, ranks, backend, args) in chosen.items():
            folder = root / name
            if len(done_runs(folder)) > round_:
                continue
            t0 = time.perf_counter()
            result = run(RunSpec(workload, ranks, backend, folder, list(args), argv=[workload, *args]))
            print(f"{name}: {result.run_dir.name} in {time.perf_counter() - t0:.1f} s", flush=True)


def gate(baseline: list[Path], candidate: list[Path], options: list[str]) -> dict:
    """`tracelab gate --format json` of the two sides, with its exit status."""
    cmd = ["tracelab", "gate", *(x for p in baseline for x in ("-b", str(p))),
           *(x for p in candidate for x in ("-c", str(p))), "--format", "json", *options]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr.strip()}")
    return {"exit": done.returncode, **json.loads(done.stdout)}


def failed(doc: dict) -> list[str]:
    return [f"{m['metric']} {m['relative']:+.1%}" for m in doc["metrics"] if m["regression"]]


def pairs(root: Path) -> list[tuple[str, str, list[Path], list[Path], str | None]]:
    """(kind, config, baseline runs, candidate runs, the metric that must fail or None)."""
    runs = {name: done_runs(root / name) for name in configs()}
    out = []
    for name in AA:
        r = runs[name]
        out += [("A/A", name, [a], [b], None) for a, b in zip(r, r[1:])]
        if len(r) >= 2 * REPEATS:
            out.append(("A/A repeats", name, r[:REPEATS], r[REPEATS:2 * REPEATS], None))
    for name, (_, metric) in CHANGES.items():
        base, changed = runs[BASE], runs[name]
        out += [("A/B", name, [a], [b], metric) for a, b in zip(base, changed)]
        if min(len(base), len(changed)) >= REPEATS:
            out.append(("A/B repeats", name, base[:REPEATS], changed[:REPEATS], metric))
    return out


def judge(root: Path, options: list[str], json_out: Path | None) -> None:
    """Right: an A/A pair passes; an A/B pair fails (exit 1). `named`: the change's own metric is
    among the regressions (the step time for late work, a slower dtype, a bigger batch; launches
    for naive DDP; peak allocated for the memory)."""
    rows, record = [], []
    for kind, name, a, b, metric in pairs(root):
        doc = gate(a, b, options)
        step = next((m for m in doc["metrics"] if m["metric"] == "step_time"), None)
        right = doc["passed"] if metric is None else not doc["passed"]
        named = metric is not None and any(m["metric"] == metric and m["regression"] for m in doc["metrics"])
        causes = [f"{m['metric']}: {c['by']} {c['name']} {c['share']:.0%}" for m in doc["metrics"] if m["regression"]
                  for c in m["why"][:1] if c["share"] is not None]
        rows.append([kind, name, f"{len(a)}:{len(b)}", "ok" if right else "WRONG",
                     "-" if metric is None else ("yes" if named else "no"), ", ".join(failed(doc)) or "pass",
                     "-" if not step or step["detectable"] is None else f"{step['detectable']:.0%}",
                     "; ".join(causes[:2])])
        record.append({"kind": kind, "config": name, "baseline": [str(p) for p in a],
                       "candidate": [str(p) for p in b], "expected": metric, "right": right, "gate": doc})
        print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    print("| pair | config | runs | right | its metric named | regressions | step time detectable | why (top) |")
    print("|---|---|---|---|---|---|---:|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    for kind in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == kind]
        print(f"\n{kind}: {sum(r[3] == 'ok' for r in mine)} of {len(mine)} right")
    if json_out:
        json_out.write_text(json.dumps(record, indent=1))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    gate_options = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=("make", "judge"))
    parser.add_argument("root", type=Path)
    parser.add_argument("--runs", type=int, default=6, help="runs per config (default 6)")
    parser.add_argument("--only", help="comma list of configs to make (default: all)")
    parser.add_argument("--threads", type=int, default=1, help="make: OMP_NUM_THREADS of each rank (default 1)")
    parser.add_argument("--json", type=Path, help="judge: every gate's JSON to this file")
    args = parser.parse_args(argv)
    if args.phase == "make":
        make(args.root, args.runs, args.only.split(",") if args.only else None, args.threads)
    else:
        judge(args.root, gate_options, args.json)


if __name__ == "__main__":
    main()
