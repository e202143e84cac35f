"""The gate's false alarms and detections, measured: runs small workloads on this machine (the
same config several times: A/A pairs; a changed config beside its base: A/B pairs), then gates
them with `tracelab gate --format json` as CI would, and prints one Markdown table.

    python benchmarks/gate_pairs.py make bench-out/gate [--runs 8] [--only train-torch,ab-late] [--threads 1]
    python benchmarks/gate_pairs.py make bench-out/gate-gpu --gpu [--runs 3] [--budget-s 230]
    python benchmarks/gate_pairs.py judge bench-out/gate [--gpu] [--json pairs.json] [-- GATE OPTIONS]
    python benchmarks/gate_pairs.py judge bench-out/gate --history 5    # single pairs against a store's history

`make` is resumable: a config's runs already there (run.json status ok) are kept, so a second
call only adds what is missing; with --budget-s it starts no run past that many seconds. Each
run goes through tracelab's runner (tracelab.run.runner), without the report `tracelab run`
writes after it. The CPU suite: train and decode under torch and none on 1 rank, train DDP on
2 ranks, and its changes (the issue's): extra work in a scope on rank 1, bf16 autocast, DDP
naive against bucketed, twice the batch, 16 MiB more held on rank 1. The GPU suite (--gpu,
one GPU, a few MiB a run folder): train small fp32 and bf16 and decode tiny, and the fp32
train's changes: extra work, twice the batch, 2 GiB more held, and bf16 against fp32.

Pairs: A/A, consecutive runs of one config (run i against run i+1); with repeats, runs i..i+2
against i+3..i+5 (every i: CI's baseline of 3 runs made at another time than the candidate's
3), and a single run against the 3 before it. A/B: the base's run i against the change's run i,
and the base's runs 1-3, 4-6, ... against the change's same rounds. With --history K, instead:
single pairs gated as CI gates against a baseline store that kept the last K accepted runs
(`baseline:main`, its latest the baseline, the earlier its history): A/A run i+1 against run i
with runs i-K+1..i accepted one after another (from i = 2: a history of 3 versions at least),
and A/B the change's run j against the base's run K-1+j with the runs before it accepted.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

TRAIN = ["--size", "tiny", "--steps", "10", "--warmup", "2", "--context-length", "64", "--batch-size", "2"]
DECODE = ["--new-tokens", "12", "--samples", "2", "--warmup", "1", "--profile-tokens", "8"]
DDP = ["--size", "tiny", "--steps", "10", "--warmup", "2", "--context-length", "64", "--batch-size", "4"]
# a CS336-small-ish model (12 layers of 768) for a few steps: a trace of a few MiB
GPU_TRAIN = ["--size", "small", "--steps", "8", "--warmup", "3", "--context-length", "256", "--batch-size", "4"]
GPU_DECODE = ["--model", "tiny", "--new-tokens", "16", "--samples", "2", "--warmup", "1", "--profile-tokens", "8"]

Config = tuple[str, int, str, list[str]]  # (workload, ranks, backend, workload options)


@dataclass(frozen=True)
class Suite:
    """A/A configs; changes: name -> (its base config, options added to the base's, the metric
    that must fail); across: (baseline config, candidate config, metric) A/B pairs of two A/A configs."""

    aa: dict[str, Config]
    changes: dict[str, tuple[str, list[str], str]]
    across: tuple[tuple[str, str, str], ...] = field(default=())

    def configs(self) -> dict[str, Config]:
        return {**self.aa, **{name: (*self.aa[base][:3], self.aa[base][3] + extra)
                              for name, (base, extra, _) in self.changes.items()}}


CPU = Suite(
    aa={"train-torch": ("train", 1, "torch", TRAIN), "train-none": ("train", 1, "none", TRAIN),
        "decode-torch": ("decode", 1, "torch", DECODE), "decode-none": ("decode", 1, "none", DECODE),
        "ddp-torch": ("train", 2, "torch", DDP)},
    changes={"ab-late": ("ddp-torch", ["--late", "rank1", "--late-work", "4"], "step_time"),
             "ab-bf16": ("ddp-torch", ["--dtype", "bf16"], "step_time"),
             "ab-naive": ("ddp-torch", ["--ddp", "naive"], "launches"),
             "ab-batch": ("ddp-torch", ["--batch-size", "8"], "step_time"),
             "ab-memory": ("ddp-torch", ["--extra-memory-mb", "1:16"], "peak_above_start")})
GPU = Suite(
    aa={"gpu-train": ("train", 1, "torch", GPU_TRAIN), "gpu-train-bf16": ("train", 1, "torch", GPU_TRAIN + ["--dtype", "bf16"]),
        "gpu-decode": ("decode", 1, "torch", GPU_DECODE)},
    changes={"gpu-late": ("gpu-train", ["--late", "rank0", "--late-work", "12"], "step_time"),
             "gpu-batch": ("gpu-train", ["--batch-size", "8"], "gpu_time:gemm"),  # a small model's step: launch-bound
             "gpu-memory": ("gpu-train", ["--extra-memory-mb", "0:2048"], "peak_above_start")},
    across=(("gpu-train-bf16", "gpu-train", "gpu_time:gemm"),))  # fp32 matrix products against bf16's
REPEATS = 3  # runs a side in the repeats pairs, as docs/gate.md's recipe makes them


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


def make(root: Path, suite: Suite, runs: int, only: list[str] | None, threads: int, budget_s: float | None) -> None:
    """Rounds of one run of every config, so that a pair's two runs are made minutes apart at most
    and the machine's load drifts over every config alike; no run started past budget_s."""
    from tracelab.run.runner import RunSpec, run

    # each rank's OpenMP threads (the runner's default is the cores over the ranks): on a machine
    # shared with other jobs, threads that spin waiting on each other's time slices make a step 100x slower
    os.environ["OMP_NUM_THREADS"] = str(threads)
    began = time.perf_counter()
    chosen = {name: c for name, c in suite.configs().items() if not only or name in only}
    for round_ in range(runs):
        for name, (workload, ranks, backend, args) in chosen.items():
            folder = root / name
            if len(done_runs(folder)) > round_:
                continue
            if budget_s is not None and time.perf_counter() - began > budget_s:
                print(f"budget of {budget_s:.0f} s spent: {name} round {round_ + 1} and later not made", flush=True)
                return
            t0 = time.perf_counter()
            result = run(RunSpec(workload, ranks, backend, folder, list(args), argv=[workload, *args]))
            print(f"{name}: {result.run_dir.name} in {time.perf_counter() - t0:.1f} s "
                  f"(load average {os.getloadavg()[0]:.1f})", flush=True)


def gate(baseline: list[Path], candidate: list[Path], options: list[str]) -> dict:
    """`tracelab gate --format json` of the two sides, with its exit status."""
    cmd = ["tracelab", "gate", *(x for p in baseline for x in ("-b", str(p))),
           *(x for p in candidate for x in ("-c", str(p))), "--format", "json", *options]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr.strip()}")
    return {"exit": done.returncode, **json.loads(done.stdout)}


def gate_history(versions: list[Path], candidate: Path, options: list[str], keep: int) -> dict:
    """`tracelab gate baseline:main CANDIDATE` against a fresh store where `versions` were accepted
    one after another (the last the current baseline, the others its history)."""
    import tempfile

    from tracelab.ingest.baselines import save

    with tempfile.TemporaryDirectory(prefix="gate-store-") as store:
        for run in versions:
            save("main", [run], store, keep)
        cmd = ["tracelab", "gate", "baseline:main", str(candidate), "--baseline-store", store, "--format", "json",
               *options]
        done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr.strip()}")
    return {"exit": done.returncode, **json.loads(done.stdout)}


MIN_HISTORY = 3  # versions (the baseline among them) that measure the spread between times (reports/gate/noise.py)


def history_pairs(root: Path, suite: Suite, keep: int) -> list[tuple[str, str, list[Path], list[Path], str | None]]:
    """(kind, config, the versions accepted oldest first, [the candidate run], the metric that must fail or None)."""
    runs = {name: done_runs(root / name) for name in suite.configs()}
    out = []
    for name in suite.aa:
        r = runs[name]
        out += [("A/A history", name, r[max(0, i - keep + 1):i + 1], [r[i + 1]], None)
                for i in range(MIN_HISTORY - 1, len(r) - 1)]
    for name, (base, _, metric) in suite.changes.items():
        a, b = runs[base], runs[name]
        out += [("A/B history", name, a[max(0, i - keep + 1):i + 1], [y], metric)
                for i, y in zip(range(keep - 1, len(a)), b)]
    return out


def failed(doc: dict) -> list[str]:
    return [f"{m['metric']} {m['relative']:+.1%}" for m in doc["metrics"] if m["regression"]]


def pairs(root: Path, suite: Suite) -> list[tuple[str, str, list[Path], list[Path], str | None]]:
    """(kind, config, baseline runs, candidate runs, the metric that must fail or None)."""
    runs = {name: done_runs(root / name) for name in suite.configs()}
    out = []
    for name in suite.aa:
        r = runs[name]
        out += [("A/A", name, [a], [b], None) for a, b in zip(r, r[1:])]
        out += [("A/A repeats", name, r[i:i + REPEATS], r[i + REPEATS:i + 2 * REPEATS], None)
                for i in range(len(r) - 2 * REPEATS + 1)]
        out += [("A/A 3:1", name, r[i - REPEATS:i], [r[i]], None) for i in range(REPEATS, len(r))]
    ab = [(name, base, name, metric) for name, (base, _, metric) in suite.changes.items()]
    for name, base, changed, metric in ab + [(f"{b}:{c}", b, c, m) for b, c, m in suite.across]:
        a, b = runs[base], runs[changed]
        out += [("A/B", name, [x], [y], metric) for x, y in zip(a, b)]
        out += [("A/B repeats", name, a[i:i + REPEATS], b[i:i + REPEATS], metric)
                for i in range(0, min(len(a), len(b)) - REPEATS + 1, REPEATS)]
    return out


def _share(x: float | None) -> str:
    return "-" if x is None else f"{x:+.0%}"


def judge(root: Path, suite: Suite, options: list[str], json_out: Path | None, keep: int | None = None,
          only: list[str] | None = None) -> None:
    """Right: an A/A pair passes; an A/B pair fails (exit 1). `named`: the change's own metric is
    among the regressions (the step time for late work, a bigger batch; launches for naive DDP;
    the peak above the step's start for the memory), its change and the smallest change the gate
    says it could have detected beside."""
    rows, record, detectable = [], [], {}
    chosen = pairs(root, suite) if keep is None else history_pairs(root, suite, keep)
    chosen = [p for p in chosen if not only or p[1] in only]
    for kind, name, a, b, metric in chosen:
        doc = gate(a, b, options) if keep is None else gate_history(a, b[0], options, keep)
        by = {m["metric"]: m for m in doc["metrics"]}
        step, own = by.get("step_time"), by.get(metric)
        right = doc["passed"] if metric is None else not doc["passed"]
        named = own is not None and own["regression"]
        causes = [f"{m['metric']}: {c['by']} {c['name']} {c['share']:.0%}" for m in doc["metrics"] if m["regression"]
                  for c in m["why"][:1] if c["share"] is not None]
        if step and step["detectable"] is not None:
            detectable.setdefault(kind, []).append(step["detectable"])
        noise = (step or {}).get("noise_source") or "-"
        rows.append([kind, name, f"{len(a)}:{len(b)}", "ok" if right else "WRONG",
                     "-" if metric is None else f"{'yes' if named else 'no'}: {metric} {_share(own and own['relative'])} "
                                                f"(detectable {_share(own and own['detectable'])})",
                     ", ".join(failed(doc)) or "pass",
                     "-" if not step or step["detectable"] is None else f"{step['detectable']:.0%} ({noise})",
                     "; ".join(causes[:2])])
        record.append({"kind": kind, "config": name, "baseline": [str(p) for p in a],
                       "candidate": [str(p) for p in b], "expected": metric, "right": right, "gate": doc})
        print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    print("| pair | config | runs | right | its metric named | regressions | step time detectable | why (top) |")
    print("|---|---|---|---|---|---|---:|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    for kind in dict.fromkeys(r[0] for r in rows):
        mine, d = [r for r in rows if r[0] == kind], sorted(detectable.get(kind, []))
        spread = f"; step time detectable {d[0]:.0%} to {d[-1]:.0%} (median {d[len(d) // 2]:.0%})" if d else ""
        print(f"\n{kind}: {sum(r[3] == 'ok' for r in mine)} of {len(mine)} right{spread}")
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
    parser.add_argument("--gpu", action="store_true", help="the GPU suite (one GPU) instead of the CPU's")
    parser.add_argument("--budget-s", type=float, help="make: start no run past this many seconds")
    parser.add_argument("--only", help="comma list of configs to make or judge (default: all)")
    parser.add_argument("--threads", type=int, default=1, help="make: OMP_NUM_THREADS of each rank (default 1)")
    parser.add_argument("--json", type=Path, help="judge: every gate's JSON to this file")
    parser.add_argument("--history", type=int, help="judge: single pairs against a store keeping this many versions")
    args = parser.parse_args(argv)
    suite = GPU if args.gpu else CPU
    if args.phase == "make":
        make(args.root, suite, args.runs, args.only.split(",") if args.only else None, args.threads, args.budget_s)
    else:
        judge(args.root, suite, gate_options, args.json, args.history, args.only.split(",") if args.only else None)


if __name__ == "__main__":
    main()
