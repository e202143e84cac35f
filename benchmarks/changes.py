"""Real changes made and measured without the profiler, against what `tracelab whatif` predicted
for them from the trace before: is a predicted saving the saving the user gets?

    python benchmarks/changes.py measure --out bench-out/changes [--gpu] [--only graph,scope]
    python benchmarks/changes.py predict bench-out/changes [--format table|json]

measure: per change (CHANGES), the BEFORE config under torch.profiler (`tracelab run train
--backend torch`: its results hold the same steps timed with the profiler off and on) and the
AFTER config under `--backend none` (its steps are the measured unprofiled step after); a change
predicted by scaling kernels runs their microbenchmark (change_factors.py) on the same device, bf16
times the trace's own products at their shapes (`tracelab factors`: DIR/bf16/factors.json).
Writes DIR/<change>/{before,after}/ (run folders) and DIR/changes.json (configs, commands, factors).

predict: per change, `tracelab whatif DIR/<change>/before --scenario S --format json`; the
scenario row's `predicted_unprofiled_ns` where whatif gives it, else its profiled `predicted_ns`
(said in the row); a table of the before step measured unprofiled, the predicted and the measured
after, and the error; DIR/predictions.json. A step is the slowest rank's median step.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from change_table import predict_rows, render_table, summary  # noqa: E402

from tracelab.reports.whatif.scenarios import PRODUCTS  # noqa: E402


@dataclass(frozen=True)
class Change:
    """One change: the workload options before and after it, and the whatif scenario that
    predicts it ({factor}: the microbenchmark's F; None: no scenario models it)."""

    name: str
    what: str
    before: tuple[str, ...]
    after: tuple[str, ...]
    scenario: str | None
    devices: tuple[str, ...] = ("cpu", "gpu")
    ranks: int = 1
    factor: str | None = None  # change_factors.factor's name
    note: str = ""


# Train configs small enough for the 2-core CPU (one thread per rank: under load, two threads
# per rank spin-wait; 20 timed steps) and, on a GPU, CS336's small model (12 timed steps: a steady
# median there, and traces small enough to bring back from a device machine)
BASE = {"cpu": ("--size", "tiny", "--vocab-size", "1000", "--batch-size", "2", "--context-length", "128",
                "--steps", "20", "--warmup", "5"),
        "gpu": ("--size", "small", "--batch-size", "4", "--context-length", "256", "--steps", "12", "--warmup", "5")}
LATE_WORK = {"cpu": "1", "gpu": "4"}  # products of two 1024x1024 (CPU) or 4096x4096 (GPU) fp32 matrices
# A held-out check varies what the rules were worked out on (measure's --late-work, --stall-ms,
# --base-args): the amounts the changes' configs take, and extra workload options on both sides.
VARY = {"late": None, "stall": None, "stall_ddp": None, "base": ()}
# the weight products: GPU GEMM kernels (not attention's fused ones) and CPU ops, forward and backward
GEMMS = PRODUCTS
FACTORS_FILE = "factors.json"  # a change's factors file (autocast:bf16=@FILE), beside its runs

CHANGES = [
    Change("graph", "eager step -> the whole step as one CUDA graph", ("--phase", "step", "--capturable"),
           ("--phase", "step", "--cuda-graph"), "cuda-graph", devices=("gpu",)),
    Change("compile", "eager -> torch.compile (default mode)", (), ("--compile",), "compile",
           note="a model: the ops between extern ones (products, attention, collectives, the optimizer) fused, one "
                "kernel per reduction of its largest member's time and one launch (the scenario's note says what "
                "it leaves out)"),
    Change("scope", "a named scope of extra work (extra_work) removed", ("--late", "rank0", "--late-work", "{late}"),
           (), "remove:extra_work"),
    Change("stall", "a 20 ms host stall after a sync (no region) removed, one rank",
           ("--host-stall-ms", "0:{stall}", "--host-stall-unmarked"), (), "no-host-stalls"),
    Change("stall-ddp", "a 15 ms host stall on rank 1 of a 2-rank DDP job removed",
           ("--host-stall-ms", "1:{stall_ddp}", "--host-stall-unmarked"), (), "no-host-stalls", ranks=2),
    Change("balance", "2-rank DDP, rank 1 does extra work -> ranks balanced", ("--late", "rank1", "--late-work", "{late}"),
           (), "balance", ranks=2),
    Change("ddp-overlap", "DDP: per-parameter all-reduces after the backward -> bucketed, overlapped",
           ("--ddp", "naive"), ("--ddp", "bucketed"), "overlap-comm", ranks=2),
    Change("attention", "attention's kernel: unfused math -> torch's fused SDPA (forward)",
           ("--phase", "forward", "--context-length", "512", "--attention", "math"),
           ("--phase", "forward", "--context-length", "512", "--attention", "auto"), "scale:sdpa={factor}",
           factor="sdpa"),
    Change("bf16", "fp32 -> bf16 autocast", (), ("--dtype", "bf16"), "autocast:bf16=@{factors_file}",
           factor="bf16-shapes",
           note="a model: each matrix product at its own shapes timed fp32 against bf16 here (tracelab factors), "
                "the casts autocast adds at the trace's own host and device time per op, autocast's dispatch per "
                "CPU operator measured here (the scenario's note says what it leaves out)"),
    Change("tf32", "fp32 -> TF32 matrix products", (), ("--tf32",), f"scale:{GEMMS}={{factor}}", devices=("gpu",),
           factor="gemm-tf32", note="a model: the weight products scaled by their microbenchmark"),
]


def _args(change: Change, side: str, device: str) -> list[str]:
    extra = change.before if side == "before" else change.after
    amounts = {"late": VARY["late"] or LATE_WORK[device], "stall": VARY["stall"] or "20",
               "stall_ddp": VARY["stall_ddp"] or "15"}
    return [*BASE[device], *VARY["base"], *(a.format(**amounts) for a in extra)]


def _command(change: Change, side: str, device: str, backend: str) -> list[str]:
    return ["tracelab", "run", "train", "--ranks", str(change.ranks), "--backend", backend, "--",
            *_args(change, side, device)]


def _run(change: Change, side: str, device: str, folder: Path, backend: str) -> dict:
    """One run into folder (run.json and the traces); what it was and how it ended."""
    from tracelab.core.errors import TracelabError
    from tracelab.run.runner import RunSpec, run

    cmd = _command(change, side, device, backend)
    staging = folder.with_name(folder.name + ".running")
    shutil.rmtree(staging, ignore_errors=True)
    spec = RunSpec("train", ranks=change.ranks, backend=backend, out_root=staging,
                   workload_args=_args(change, side, device), argv=cmd)
    t0 = time.perf_counter()
    try:
        made = run(spec).run_dir
    except TracelabError as e:
        return {"command": cmd, "status": "failed", "error": str(e).strip().splitlines()[0], "wall_s": _since(t0)}
    shutil.rmtree(folder, ignore_errors=True)
    made.rename(folder)
    shutil.rmtree(staging, ignore_errors=True)
    return {"command": cmd, "status": "ok", "run_dir": folder.name, "wall_s": _since(t0)}


def runs_of(repeats: int) -> list[tuple[str, str, str]]:
    """(side, folder name, backend) of a change's runs in order: the BEFORE config profiled, then
    AFTER and BEFORE unprofiled in turn, `repeats` of each: on a loaded machine whose speed drifts
    over minutes, each side's median over runs taken close together in time."""
    out = [("before", "before", "torch"), ("after", "after", "none")]
    for k in range(2, repeats + 1):
        out += [("before", f"before-{k}", "none"), ("after", f"after-{k}", "none")]
    return out


def measure_change(c: Change, device: str, out: Path, repeats: int) -> dict:
    """A change's runs (runs_of) and its microbenchmark: its entry in changes.json."""
    entry = {**asdict(c), "runs": []}
    for side, name, backend in runs_of(repeats):
        done = {"side": side, "run_dir": name, **_run(c, side, device, out / c.name / name, backend)}
        entry["runs"].append(done)
        failed = done["status"] != "ok"
        print(f"{c.name} {name}: {done['status']} ({done['wall_s']} s){': ' + done['error'] if failed else ''}", flush=True)
        if failed and name == "before":
            break  # the trace before is what everything else is compared with
    entry["factor"] = _factor(c, device, out) if entry["runs"][0]["status"] == "ok" else None
    return entry


def _since(t0: float) -> float:
    return round(time.perf_counter() - t0, 1)


def _factor(change: Change, device: str, out: Path) -> dict | None:
    if change.factor is None:
        return None
    import torch

    from change_factors import factor
    from tracelab.workloads import train

    where = torch.device("cuda" if device == "gpu" else "cpu")
    if change.factor == "bf16-shapes":  # the trace's own products, and the dispatch, on this device
        return shape_factors_of(out / change.name, where)
    args = train.parse(_args(change, "before", device))
    return factor(change.factor, args, where)


def shape_factors_of(folder: Path, device) -> dict:
    """The factors file of the change's run before (`tracelab factors`, every rank: shapes the ranks
    share are timed once) written as FACTORS_FILE beside its runs, on this process's threads; its summary."""
    import torch

    cmd = [sys.executable, "-m", "tracelab", "factors", str(folder / "before"), "--out", str(folder / FACTORS_FILE),
           "--force", "--device", device.type, "--threads", str(torch.get_num_threads())]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"changes.py: {' '.join(cmd)}: {done.stderr.strip().splitlines()[-1:]}")
    doc = json.loads((folder / FACTORS_FILE).read_text())
    return {"name": "bf16-shapes", "file": FACTORS_FILE, "default": doc["default"], "shapes": len(doc["shapes"]),
            "dispatch_ns_per_op": doc["dispatch_ns_per_op"], "machine": doc["machine"]}


def chosen(only: str | None, device: str, gpus: int) -> tuple[list[Change], list[dict]]:
    """The changes to measure here, and those skipped (with why)."""
    names = None if only is None else set(only.split(","))
    unknown = (names or set()) - {c.name for c in CHANGES}
    if unknown:
        raise SystemExit(f"changes.py: unknown change(s) {', '.join(sorted(unknown))}; "
                         f"choose from {', '.join(c.name for c in CHANGES)}")
    picked, skipped = [], []
    for c in CHANGES:
        if names is not None and c.name not in names:
            continue
        why = (f"a {'GPU' if device == 'cpu' else 'CPU'}-only change" if device not in c.devices
               else f"needs {c.ranks} GPUs, {gpus} visible" if device == "gpu" and c.ranks > gpus else None)
        (skipped.append({"name": c.name, "skipped": why}) if why else picked.append(c))
    return picked, skipped


def measure(out: Path, gpu: bool, only: str | None, repeats: int, vary: dict | None = None) -> None:
    """Each chosen change's runs into `out`; changes.json keeps the changes measured before in
    `out` that this call does not measure again (--only re-runs some). `vary`: VARY's entries to set."""
    import torch

    VARY.update(vary or {})
    device = "gpu" if gpu else "cpu"
    if gpu and not torch.cuda.is_available():
        raise SystemExit("changes.py: --gpu but torch sees no GPU")
    if not gpu:  # one thread per rank (see BASE), and so for the microbenchmarks in this process
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
    picked, skipped = chosen(only, device, torch.cuda.device_count() if gpu else 0)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "changes.json"
    doc = {"host": platform.node(), "device": device, "torch": torch.__version__,
           "device_name": torch.cuda.get_device_name() if gpu else platform.processor() or "cpu",
           "changes": json.loads(path.read_text())["changes"] if path.is_file() else [],
           "vary": {k: list(v) if isinstance(v, tuple) else v for k, v in VARY.items()}}
    for entry in skipped:
        _replace(doc, entry)
    for c in picked:
        load, t0 = os.getloadavg()[0], time.strftime("%Y-%m-%dT%H:%M:%S%z")
        entry = measure_change(c, device, out, repeats)
        _replace(doc, {**entry, "measured_at": t0, "load_avg_1m": [load, os.getloadavg()[0]], "repeats": repeats})
        path.write_text(json.dumps(doc, indent=1))  # after each: a stopped run keeps its changes
    path.write_text(json.dumps(doc, indent=1))


def _replace(doc: dict, entry: dict) -> None:
    doc["changes"] = [e for e in doc["changes"] if e["name"] != entry["name"]] + [entry]


def whatif_doc(before: Path, scenario: str) -> dict:
    """`tracelab whatif BEFORE --scenario S --format json`, or {"error": its one line}."""
    done = subprocess.run([sys.executable, "-m", "tracelab", "whatif", str(before), "--scenario", scenario,
                           "--format", "json"], capture_output=True, text=True)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {done.returncode}"}
    return json.loads(done.stdout)


def predict(folder: Path, fmt: str) -> None:
    doc = json.loads((folder / "changes.json").read_text())
    rows = predict_rows(doc, folder, whatif_doc)
    result = {"measured": {k: doc.get(k) for k in ("host", "device", "device_name", "torch")},
              "rows": rows, "summary": summary(rows)}
    (folder / "predictions.json").write_text(json.dumps(result, indent=1, allow_nan=False))
    print(json.dumps(result, indent=1, allow_nan=False) if fmt == "json" else render_table(rows, result["summary"]))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="run each change's before (torch.profiler) and after (no profiler)")
    m.add_argument("--out", type=Path, required=True, help="folder for the run folders and changes.json")
    m.add_argument("--gpu", action="store_true", help="GPU-sized configs and the GPU-only changes")
    m.add_argument("--repeats", type=int, default=1,
                   help="runs of each side per change, alternating (more: steadier medians on a loaded machine)")
    m.add_argument("--only", help=f"comma list of changes (default: all that apply): "
                                  f"{', '.join(c.name for c in CHANGES)}")
    m.add_argument("--late-work", help=f"the scope's and balance's extra products (default {LATE_WORK})")
    m.add_argument("--stall-ms", help="the stall's ms, one rank alone and on DDP's rank 1 (default 20 and 15)")
    m.add_argument("--base-args", default="", help="workload options added to both sides, e.g. '--batch-size 8'")
    pr = sub.add_parser("predict", help="the what-if's prediction of each change against its measured after")
    pr.add_argument("folder", type=Path)
    pr.add_argument("--format", choices=("table", "json"), default="table")
    a = p.parse_args(argv)
    if a.command == "measure":
        vary = {"late": a.late_work, "stall": a.stall_ms, "stall_ddp": a.stall_ms, "base": tuple(a.base_args.split())}
        measure(a.out, a.gpu, a.only, a.repeats, vary)
    else:
        predict(a.folder, a.format)


if __name__ == "__main__":
    main()
