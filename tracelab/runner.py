"""Launch a workload on N ranks through torchrun under one profiler, into a new run folder.

    spec = RunSpec("decode", ranks=2, backend="torch", workload_args=["--new-tokens", "8"])
    result = runner.run(spec, on_line=print)       # on_line gets progress lines as they come
    result.run_dir                                 # runs/decode-torch-20261121-221530/

Everything that can be checked is checked before anything starts (plan()): the
workload, the backend, the rank count against the GPUs, the workload's own
options (its build_parser() and check(args, world_size, gpu)), nsys. A workload is
a module with those two functions and a main that takes --backend and --out; it
writes rank{r}.figures.json (backends.write_figures), which run.json gathers.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import backends, machine
from .errors import RunError, ToolMissingError, UsageError
from .workload_options import parse_workload_args

# workload name -> module (a program: python -m MODULE --help)
WORKLOADS: dict[str, str] = {
    "decode": "tracelab.workloads.decode",
    "train": "tracelab.workloads.train",
    "allreduce": "tracelab.workloads.allreduce",
    "overlap": "tracelab.workloads.overlap",
}

# always set for the ranks: NVLink multicast stays off (see ../shared/device/README.md)
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
            "PYTHONUNBUFFERED": "1"}
NSYS_PROFILE = ["profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none",
                "--capture-range=cudaProfilerApi", "--capture-range-end=stop", "--cuda-graph-trace=node"]
TAIL_LINES = 20

OnLine = Callable[[str], None]


@dataclass
class RunSpec:
    """What the user asked for."""

    workload: str
    ranks: int = 1  # processes per node
    backend: str | None = None  # None: proton on a GPU with triton, else torch
    out_root: Path = Path("runs")
    workload_args: list[str] = field(default_factory=list)
    nnodes: str | None = None  # torchrun --nnodes, e.g. "2"; with rdzv_endpoint
    rdzv_endpoint: str | None = None
    argv: list[str] = field(default_factory=list)  # the user's command line, for run.json


@dataclass
class Plan:
    """A checked spec: the command to run and what run.json will record."""

    spec: RunSpec
    backend: str
    module: str
    config: dict
    gpus: int
    nsys: Path | None = None


@dataclass
class RunResult:
    run_dir: Path
    record: dict  # what run.json holds
    traces: list[Path]


def available_workloads() -> list[str]:
    return [name for name, module in WORKLOADS.items() if importlib.util.find_spec(module) is not None]


def plan(spec: RunSpec) -> Plan:
    """Check everything that can be checked before launching; UsageError/ToolMissingError otherwise."""
    module = _workload_module(spec.workload)
    gpus = machine.gpu_count()
    backend = spec.backend or machine.default_backend(gpus)
    backends.check(backend, gpus > 0)
    _check_ranks(spec, gpus)
    world_size = spec.ranks * _nnodes(spec)
    config = parse_workload_args(spec.workload, module, [*spec.workload_args, "--backend", backend],
                                 world_size, gpus > 0)
    config.pop("out", None)  # the run folder, not known yet; run.json lies in it
    nsys = backends.find_nsys() if backend == "nsys" else None
    return Plan(spec, backend, module.__name__, config, gpus, nsys)


def _workload_module(name: str):
    if name not in WORKLOADS:
        raise UsageError("WORKLOAD", f"unknown workload {name!r}; choose one of {', '.join(available_workloads())}")
    if importlib.util.find_spec(WORKLOADS[name]) is None:
        raise UsageError("WORKLOAD", f"workload {name!r} is not installed ({WORKLOADS[name]} is missing)")
    return importlib.import_module(WORKLOADS[name])


def _check_ranks(spec: RunSpec, gpus: int) -> None:
    if spec.ranks < 1:
        raise UsageError("--ranks", f"must be at least 1, not {spec.ranks}")
    if gpus and spec.ranks > gpus:
        raise UsageError("--ranks", f"{spec.ranks} ranks per node but only {gpus} GPU(s) are visible")
    if spec.nnodes not in (None, "1") and not spec.rdzv_endpoint:
        raise UsageError("--nnodes", "several nodes need --rdzv-endpoint HOST:PORT (the same on every node)")


def _nnodes(spec: RunSpec) -> int:
    if spec.nnodes is None:
        return 1
    try:
        return int(spec.nnodes.split(":")[-1])
    except ValueError:
        raise UsageError("--nnodes", f"expected a number or MIN:MAX, not {spec.nnodes!r}") from None


def new_run_dir(out_root: Path, workload: str, backend: str) -> Path:
    """runs/{workload}-{backend}-{YYYYmmdd-HHMMSS}, with -2, -3 ... when taken; never reused."""
    stem = f"{workload}-{backend}-{time.strftime('%Y%m%d-%H%M%S')}"
    out_root.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        run_dir = out_root / (stem if n == 1 else f"{stem}-{n}")
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            continue
    raise RunError(out_root, f"could not make a new folder for {stem}")


def torchrun_command(p: Plan, run_dir: Path) -> list[str]:
    """python -m torch.distributed.run ... [nsys profile ...] python -m WORKLOAD ARGS --backend B --out DIR."""
    spec = p.spec
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(spec.ranks)]
    if spec.rdzv_endpoint:
        cmd += ["--nnodes", spec.nnodes or "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", spec.rdzv_endpoint,
                "--rdzv-id", f"tracelab-{spec.workload}"]
    else:
        cmd += ["--standalone"]
    cmd += ["--log-dir", str(run_dir / "logs"), "--tee", "3"]
    program = ["-m", p.module, *spec.workload_args, "--backend", p.backend, "--out", str(run_dir)]
    if p.nsys is None:
        return cmd + program
    return cmd + ["--no-python", str(p.nsys), *NSYS_PROFILE, "-o", str(run_dir / "rank%q{RANK}"),
                  sys.executable, *program]


def rank_env(p: Plan) -> dict[str, str]:
    env = {**os.environ, **SAFE_ENV}
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // p.spec.ranks)))
    return backends.nsys_env(p.nsys, env) if p.nsys else env


def run(spec: RunSpec, on_line: OnLine = lambda line: None) -> RunResult:
    """Plan, launch, gather: the whole of `tracelab run`."""
    return execute(plan(spec), on_line)


def execute(p: Plan, on_line: OnLine = lambda line: None) -> RunResult:
    """Launch the planned run into a new folder; RunError (naming the failing rank and
    showing its last lines) when a rank fails. Files already written stay."""
    run_dir = new_run_dir(p.spec.out_root, p.spec.workload, p.backend)
    cmd = torchrun_command(p, run_dir)
    record = machine.record(p, cmd)
    _write_record(run_dir, record)
    on_line(f"run folder {run_dir}")
    t0 = time.perf_counter()
    status, output = _launch(cmd, rank_env(p), on_line)
    record["wall_s"] = round(time.perf_counter() - t0, 3)
    record["figures"] = gather_figures(run_dir)
    if status != 0:
        record["status"] = "failed"
        _write_record(run_dir, record)
        raise RunError(run_dir, failure_message(run_dir, status, output))
    if p.nsys is not None:
        export_nsys(p.nsys, run_dir, rank_env(p), on_line)
    traces = find_traces(p, run_dir, record["figures"])
    record.update(status="ok", traces=[t.name for t in traces])
    _write_record(run_dir, record)
    return RunResult(run_dir, record, traces)


DRAIN_S = 10  # after torchrun exits, how long to keep reading what its leftover children print


def _launch(cmd: list[str], env: dict[str, str], on_line: OnLine) -> tuple[int, list[str]]:
    """Run torchrun, passing its output on line by line. The run ends when torchrun does: a
    worker's own children (inductor's compile pool, say) can outlive it holding the pipe open."""
    import subprocess
    import threading

    output: list[str] = []

    def pump(stream) -> None:
        for line in stream:
            output.append(line.rstrip("\n"))
            on_line(output[-1])

    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    reader = threading.Thread(target=pump, args=(proc.stdout,), daemon=True)
    reader.start()
    status = proc.wait()
    reader.join(DRAIN_S)
    return status, list(output)


def _write_record(run_dir: Path, record: dict) -> None:
    (run_dir / "run.json").write_text(json.dumps(record, indent=1, default=str))


def gather_figures(run_dir: Path) -> dict[str, dict]:
    """rank -> the figures that rank wrote (rank{r}.figures.json)."""
    found = {}
    for path in sorted(run_dir.glob(backends.FIGURES_FILE.format(rank="*"))):
        rank = path.name.split(".")[0].removeprefix("rank")
        found[rank] = json.loads(path.read_text())
    return dict(sorted(found.items(), key=lambda kv: int(kv[0])))


def find_traces(p: Plan, run_dir: Path, figures: dict[str, dict]) -> list[Path]:
    """This node's trace files, one per rank that reported; RunError when one is missing."""
    backend = backends.BACKENDS[p.backend]
    if backend.trace_pattern is None:
        return []
    paths = [run_dir / backend.trace_name(int(r)) for r in figures]
    missing = [path.name for path in paths if not path.is_file()]
    if missing or not paths:
        raise RunError(run_dir, f"the {p.backend} backend wrote no {', '.join(missing) or 'traces'}")
    return paths


def export_nsys(nsys: Path, run_dir: Path, env: dict[str, str], on_line: OnLine) -> None:
    """rank{r}.nsys-rep -> rank{r}.sqlite, with nsys's own exporter."""
    import subprocess

    reports = sorted(run_dir.glob("rank*.nsys-rep"))
    if not reports:
        raise RunError(run_dir, "nsys wrote no rank*.nsys-rep (did the workload open its capture range?)")
    for rep in reports:
        out = rep.with_suffix(".sqlite")
        on_line(f"exporting {rep.name} -> {out.name}")
        done = subprocess.run([str(nsys), "export", "--type", "sqlite", "-o", str(out), str(rep)],
                              env=env, capture_output=True, text=True)
        if done.returncode != 0 or not out.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise RunError(rep, "nsys export failed: " + " | ".join(tail))


def failure_message(run_dir: Path, status: int, output: list[str]) -> str:
    """Which rank failed first (torchrun's root cause) and the last lines of its stderr."""
    rank, local_rank = failed_rank(output)
    log = _rank_log(run_dir, local_rank)
    lines = log.read_text(errors="replace").splitlines() if log else output
    tail = [ln for ln in lines if ln.strip()][-TAIL_LINES:]
    who = f"rank {rank}" if rank is not None else "the launcher"
    where = f" (log: {log})" if log else ""
    return f"{who} failed, torchrun exit status {status}{where}; its last lines:\n" + "\n".join(tail)


def failed_rank(output: list[str]) -> tuple[int | None, int | None]:
    """(rank, local_rank) from torchrun's 'Root Cause' block, or (None, None)."""
    import re

    in_root = False
    for line in output:
        in_root = in_root or "Root Cause" in line
        match = re.search(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)", line)
        if in_root and match:
            return int(match.group(1)), int(match.group(2))
    return None, None


def _rank_log(run_dir: Path, local_rank: int | None) -> Path | None:
    if local_rank is None:
        return None
    for name in ("stderr.log", "stdout.log"):
        logs = sorted((run_dir / "logs").glob(f"**/attempt_*/{local_rank}/{name}"))
        if logs and logs[-1].stat().st_size:
            return logs[-1]
    return None
