"""The profiler's own host cost per recorded event, fitted on pairs of the same job run with
the profiler and without it (reports/whatif/profiler_cost.py holds the constants it prints).

`tracelab run` times the profiled steps once more with the profiler off in the same processes
(results: unprofiled_step_ns, profiled_step_ns per rank), so each profiled run folder is a pair.
Per rank, the profiler's cost per step is profiled_step_ns - unprofiled_step_ns, and the trace
says what it recorded per step (CPU operators, launch calls, ranges: nodes.step_counts).
Per profiler configuration (torch with and without record_shapes and profile_memory, nsys,
proton; cpu or gpu), the per-event costs are the non-negative least squares fit
(numpy's least squares over each subset of the kinds, the best with no negative cost:
exact for three unknowns, and no scipy on the GPU machines) of cost = ops x c_op + launches x c_launch + ranges x c_range over jobs
of different op mixes; each job's error is that of the step it predicts, profiled - counts x c,
against the measured unprofiled step, with the costs fitted on the other jobs (leave one out).

    python benchmarks/profiler_cost.py measure [--gpu] [--out bench-out/profiler_cost]
    python benchmarks/profiler_cost.py fit RUN_FOLDER [RUN_FOLDER ...]

`measure` runs the jobs (JOBS, or GPU_JOBS with --gpu) under each configuration (torch's four;
with --gpu nsys and proton too, where present), then fits what it made; `fit` fits run folders
already made (any folder holding run.json whose results have both step times, or a folder of the
same job under backend none beside it: runs made before tracelab run timed both). Prints JSON.
"""
from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import tracelab
from tracelab.ingest.results import of_run
from tracelab.reports.whatif.nodes import step_counts
from tracelab.reports.whatif.profiler_cost import COUNTED, config_of
from tracelab.run.backends import BACKENDS, RECORD_SHAPES_ENV

_TRAIN = ["train", "--ranks", "1"]
_TRAIN_CPU = ["--size", "tiny", "--context-length", "64", "--steps", "8", "--warmup", "2"]
# CPU jobs of different mixes: operators per step (batch changes their time, not their number),
# ranges per step (--module-scopes: one per module), decode's small steps
JOBS = {
    "train-tiny": [*_TRAIN, "--", *_TRAIN_CPU],
    "train-tiny-b16": [*_TRAIN, "--", *_TRAIN_CPU, "--batch-size", "16"],
    "train-tiny-scopes": [*_TRAIN, "--", *_TRAIN_CPU, "--module-scopes"],
    "decode-tiny": ["decode", "--ranks", "1", "--", "--new-tokens", "12", "--samples", "2", "--profile-tokens", "8"],
}
_TRAIN_GPU = ["--phase", "step", "--steps", "8", "--warmup", "2"]
GPU_JOBS = {
    "train-tiny": [*_TRAIN, "--", "--size", "tiny", "--context-length", "64", *_TRAIN_GPU],
    "train-small": [*_TRAIN, "--", "--size", "small", *_TRAIN_GPU],
    "train-small-scopes": [*_TRAIN, "--", "--size", "small", *_TRAIN_GPU, "--module-scopes"],
    "decode-7b": ["decode", "--ranks", "1", "--", "--new-tokens", "40", "--samples", "2", "--profile-tokens", "20"],
    "decode-tiny": ["decode", "--ranks", "1", "--", "--model", "tiny", "--new-tokens", "40", "--samples", "2",
                    "--profile-tokens", "20"],
}
# configuration -> (backend, environment, tracelab run's options): memory through --memory / --no-memory
TORCH_CONFIGS = {f"torch-{s}-{m}": ("torch", {RECORD_SHAPES_ENV: "1" if s == "shapes" else "0"},
                                     ["--memory" if m == "memory" else "--no-memory"])
                 for s in ("shapes", "noshapes") for m in ("memory", "nomemory")}
PER = {"cpu_ops": "per_op_ns", "launches": "per_launch_ns", "ranges": "per_range_ns"}  # COUNTED -> Costs' field
GPU_CONFIGS = {"nsys": ("nsys", {}, []), "proton": ("proton", {}, [])}


def run_jobs(out: Path, gpu: bool, only_jobs: list[str] | None, only_configs: list[str] | None) -> list[Path]:
    """Every job under every configuration (or those named), one run folder each, under `out/CONFIG/JOB`."""
    jobs = {k: v for k, v in (GPU_JOBS if gpu else JOBS).items() if not only_jobs or k in only_jobs}
    configs = dict(TORCH_CONFIGS)
    if gpu:
        configs.update({k: v for k, v in GPU_CONFIGS.items() if k != "nsys" or _has_nsys()})
    configs = {k: v for k, v in configs.items() if not only_configs or k in only_configs}
    folders = []
    for config, (backend, env, options) in configs.items():
        for job, argv in jobs.items():
            where = out / config / job
            shutil.rmtree(where, ignore_errors=True)
            cmd = [sys.executable, "-m", "tracelab", "run", argv[0], "--backend", backend, "--out", str(where), *options, *argv[1:]]
            print(f"# {config} {job}: {' '.join(cmd)}", file=sys.stderr, flush=True)
            done = subprocess.run(cmd, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
            if done.returncode:
                print(f"# {config} {job} failed: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                continue
            folders += [Path(p).parent for p in glob.glob(str(where / "*" / "run.json"))]
    return folders


def _has_nsys() -> bool:
    return bool(os.environ.get("TRACELAB_NSYS") or shutil.which("nsys"))


def pair_rows(folder: Path, twins: dict | None = None) -> list[dict]:
    """One row per rank of a profiled run folder that is a pair: its configuration, the profiler's
    cost per step and the events recorded per step (medians over the steps); none where it is no
    pair. Its results hold both step times, or (runs made before tracelab run timed both) the run
    of the same job under backend none among `twins` (none_twins) gives the unprofiled step."""
    run = json.loads((folder / "run.json").read_text())
    if run.get("backend") in (None, "none"):
        return []
    rows = []
    for rank, record in of_run(run).items():
        times = _step_times(record, (twins or {}).get(_job_key(run), {}).get(rank))
        backend = BACKENDS.get(run.get("backend"))
        trace = folder / backend.trace_name(int(rank)) if backend and backend.trace_pattern else None
        if times is None or trace is None or not trace.is_file():  # a trace too big to bring back: no counts
            continue
        p = tracelab.load(trace)
        counts = step_counts(p.events, p.host, p.meta)
        if p.meta.source == "proton":  # its launches are of every profiled step together
            counts[list(COUNTED)] /= max(run.get("profiled_steps") or _steps_of(record) or 1, 1)
        gpu = str(record.get("device", "cpu")) != "cpu"
        rows.append({"folder": str(folder), "job": _job_name(run), "rank": int(rank),
                     "config": config_of(p.meta, p.memory, gpu).key, **times,
                     **{k: float(counts[k].median()) if len(counts) else 0.0 for k in COUNTED}})
    return rows


def _step_times(record: dict, twin: dict | None) -> dict | None:
    """unprofiled_step_ns and profiled_step_ns of one rank: its results' (one timed row; several
    sizes in one trace cannot be told apart), else its own median step against its none twin's."""
    timed = [t for t in (record, *record.get("rows", [])) if t.get("unprofiled_step_ns") and t.get("profiled_step_ns")]
    if len(timed) == 1:
        return {k: float(timed[0][k]) for k in ("unprofiled_step_ns", "profiled_step_ns")}
    mine, theirs = _median_step_ns(record), _median_step_ns(twin) if twin else None
    return {"unprofiled_step_ns": theirs, "profiled_step_ns": mine} if mine and theirs else None


def _median_step_ns(record: dict) -> float | None:
    """A run's median step from results made before step times were recorded: train's lone row's
    step_ms (decode's samples hold its prefill and compilation guards: no step of its own)."""
    rows = record.get("rows") or []
    return 1e6 * float(np.median(rows[0]["step_ms"])) if len(rows) == 1 and rows[0].get("step_ms") else None


def _steps_of(record: dict) -> int | None:
    rows = record.get("rows") or []
    return rows[0].get("steps") if len(rows) == 1 else record.get("profiled_tokens")


def _job_key(run: dict) -> str:
    """The job whatever its profiler: workload and configuration but the backend."""
    config = {k: v for k, v in (run.get("config") or {}).items() if k not in ("backend", "timeout_s", "unprofiled")}
    return json.dumps([run.get("workload"), config, (run.get("devices") or [None])[0]], sort_keys=True, default=str)


def none_twins(folders: list[Path]) -> dict[str, dict]:
    """Job key -> rank -> results of the run folders under backend none."""
    out = {}
    for folder in folders:
        run = json.loads((folder / "run.json").read_text())
        if run.get("backend") == "none":
            out[_job_key(run)] = of_run(run)
    return out


def _job_name(run: dict) -> str:
    """The workload and its options, as run: 'train --size tiny --steps 4'."""
    argv = [str(a) for a in run.get("argv") or []]
    return " ".join([str(run.get("workload", "")), *(argv[argv.index("--") + 1:] if "--" in argv else [])])


def fit(rows: pd.DataFrame) -> dict:
    """Per configuration: the per-event costs (nnls over its pairs), each pair's residual and
    its leave-one-out error of the predicted unprofiled step."""
    out = {}
    for config, part in rows.groupby("config", sort=True):
        a = part[list(COUNTED)].to_numpy(np.float64)
        b = (part["profiled_step_ns"] - part["unprofiled_step_ns"]).to_numpy(np.float64)
        used = a.any(axis=0)  # an event kind this profiler never recorded here is not fitted
        coef = np.zeros(len(COUNTED))
        if used.any():
            coef[used] = nnls(a[:, used], b)[0]
        out[config] = {
            **{PER[k]: (float(c) if u else None) for k, c, u in zip(COUNTED, coef, used)},
            "pairs": [{"job": r.job, "rank": int(r.rank), "folder": r.folder, "unprofiled_step_ns": r.unprofiled_step_ns,
                       "profiled_step_ns": r.profiled_step_ns, **{k: getattr(r, k) for k in COUNTED},
                       "residual_ns": float(b[i] - a[i] @ coef), "loo_error_frac": _loo_error(a, b, used, i, r)}
                      for i, r in enumerate(part.itertuples(index=False))],
        }
        errors = [p["loo_error_frac"] for p in out[config]["pairs"] if p["loo_error_frac"] is not None]
        out[config]["loo_error_frac"] = [min(errors), max(errors)] if errors else None
    return out


def nnls(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, float]:
    """Non-negative least squares of a few columns: the least-squares fit on each subset of the
    columns (the rest 0), the one of least residual whose costs are all >= 0."""
    best, best_res = np.zeros(a.shape[1]), float(b @ b)
    for k in range(1, a.shape[1] + 1):
        for cols in itertools.combinations(range(a.shape[1]), k):
            coef = np.linalg.lstsq(a[:, cols], b, rcond=None)[0]
            res = float(np.sum((b - a[:, cols] @ coef) ** 2))
            if (coef >= 0).all() and res < best_res - 1e-9 * max(best_res, 1.0):
                best, best_res = np.zeros(a.shape[1]), res
                best[list(cols)] = coef
    return best, best_res


def _loo_error(a: np.ndarray, b: np.ndarray, used: np.ndarray, i: int, r) -> float | None:
    """The error of pair i's predicted unprofiled step, (predicted - measured) / measured, with
    the costs fitted on the other pairs (None: fewer than two others)."""
    keep = np.arange(len(b)) != i
    if keep.sum() < 2 or not used.any():
        return None
    coef = np.zeros(a.shape[1])
    coef[used] = nnls(a[keep][:, used], b[keep])[0]
    predicted = r.profiled_step_ns - float(a[i] @ coef)
    return (predicted - r.unprofiled_step_ns) / r.unprofiled_step_ns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    m = sub.add_parser("measure", help="run the jobs under each configuration, then fit")
    m.add_argument("--gpu", action="store_true", help="GPU-sized jobs; nsys and proton where present")
    m.add_argument("--out", type=Path, default=Path("bench-out/profiler_cost"))
    m.add_argument("--jobs", type=lambda t: t.split(","), default=None,
                   help=f"comma list of jobs (CPU: {', '.join(JOBS)}; GPU: {', '.join(GPU_JOBS)})")
    m.add_argument("--configs", type=lambda t: t.split(","), default=None,
                   help=f"comma list of {', '.join([*TORCH_CONFIGS, *GPU_CONFIGS])}")
    f = sub.add_parser("fit", help="fit run folders already made")
    f.add_argument("folders", nargs="+", type=Path, help="run folders, or folders holding them")
    args = parser.parse_args(argv)
    folders = run_jobs(args.out, args.gpu, args.jobs, args.configs) if args.mode == "measure" else _run_folders(args.folders)
    twins = none_twins(folders)
    rows = pd.DataFrame([r for folder in folders for r in pair_rows(folder, twins)])
    if not len(rows):
        print("no pairs: no profiled run folder whose results hold unprofiled_step_ns and profiled_step_ns",
              file=sys.stderr)
        return 1
    print(json.dumps({"pairs": len(rows), "fits": fit(rows)}, indent=1))
    return 0


def _run_folders(paths: list[Path]) -> list[Path]:
    """The run folders (holding run.json) at or under each path."""
    return sorted({p.parent for path in paths for p in ([path / "run.json"] if (path / "run.json").is_file()
                                                        else path.rglob("run.json"))})


if __name__ == "__main__":
    sys.exit(main())
