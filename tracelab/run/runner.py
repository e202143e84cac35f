"""Launch a workload on N ranks through torchrun under one profiler, into a new run folder.

    spec = RunSpec("decode", ranks=2, backend="torch", workload_args=["--new-tokens", "8"])
    result = runner.run(spec, on_line=print)       # on_line gets progress lines as they come
    result.run_dir                                 # runs/decode-torch-20261121-221530/

Everything that can be checked is checked before anything starts (plan()), and none of
it imports torch (the ranks do): first the workload's name, ranks, nodes, the backend's
name, then that torch is there, the rank count against the GPUs (machine.gpu_count), the
workload's own options (its options module, workloads/options/), nsys. A workload is a
program with parse, run and a main that takes --backend and --out, and an options module
(parse(argv, gpu), needs_torch(args) and, where its window is not all its steps,
profiled_steps(config) -> int for run.json); it writes rank{r}.results.json (tracelab/results.py),
which run.json gathers under "results". The run ends
with run.json's status: ok, failed or interrupted (SIGINT/SIGTERM, passed on to the
ranks); a trace cut short is renamed *.partial.
"""
from __future__ import annotations

import dataclasses
import gzip
import importlib
import importlib.util
import json
import os
import platform
import sqlite3
import sys
import time
import zlib
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from tracelab.run import backends, machine

from tracelab.ingest import runfolder
from tracelab.core.errors import RunError, UsageError
from tracelab.run.launch import OnLine, Stopped, failure_message, launch, signals_held, stop_on_signals
from tracelab.run.workload_options import parse_workload_args, refuse_runner_options


class Workload(NamedTuple):
    program: str  # the module the ranks run: python -m PROGRAM --help
    options: str  # the module that parses its options without torch, for the launcher


# workload name -> its modules
WORKLOADS: dict[str, Workload] = {name: Workload(f"tracelab.workloads.{name}", f"tracelab.workloads.options.{name}")
                                  for name in ("decode", "train", "allreduce", "overlap")}

# always set for the ranks: NVLink multicast off (the machines we measure on must keep it off)
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
            "PYTHONUNBUFFERED": "1"}
NSYS_PROFILE = ["profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none",
                "--capture-range=cudaProfilerApi", "--capture-range-end=stop", "--cuda-graph-trace=node"]
REPEAT_FOLDER = "repeat-{k}"  # the K-th run of `tracelab run --repeat N`, inside the run's folder
MAX_REPEAT = 100
PARTIAL_SUFFIX = ".partial"  # a trace cut short: renamed so that no folder reader takes it for a trace


class RunInterrupted(RunError):
    """SIGINT or SIGTERM stopped the run; run.json says "interrupted"."""

    def __init__(self, run_dir: Path, signum: int, reason: str):
        super().__init__(run_dir, reason)
        self.signum = signum

    def __reduce__(self):
        return (type(self), (self.where, self.signum, self.reason))


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
    memory: bool = True  # record memory events where the backend can (run.json "memory" says how)
    ranks_asked: int | None = None  # --ranks as given, where fewer GPUs made it fewer (plan())
    repeat: int = 1  # runs of the one config, each a run folder repeat-K/ in one folder (run_repeats)


@dataclass
class Plan:
    """A checked spec: the command to run and what run.json will record."""

    spec: RunSpec
    backend: str
    module: str
    config: dict
    gpus: int
    nsys: Path | None = None
    notes: list[str] = field(default_factory=list)  # what plan() changed, for the user first
    profiled_steps: int | None = None  # steps in the profiled window, where the workload says (run.json)


@dataclass
class RunResult:
    run_dir: Path
    record: dict  # what run.json holds
    traces: list[Path]


def available_workloads() -> list[str]:
    return [name for name, w in WORKLOADS.items() if importlib.util.find_spec(w.program) is not None]


def plan(spec: RunSpec) -> Plan:
    """Check everything that can be checked before launching; UsageError/ToolMissingError
    otherwise. What needs no torch is checked first: a bad option is refused in an instant."""
    check_spec(spec)
    machine.require_torch()
    workload = _installed(spec.workload)
    gpus = machine.gpu_count()
    backend = spec.backend or machine.default_backend(gpus)
    backends.check(backend, gpus > 0)
    spec, notes = ranks_for_gpus(spec, gpus)
    world_size = spec.ranks * _nnodes(spec)
    try:
        config = parse_workload_args(spec.workload, workload, [*spec.workload_args, "--backend", backend],
                                     world_size, gpus > 0)
    except UsageError as e:
        if notes:  # the fallback's world does not suit the workload: the request cannot run here
            raise UsageError("--ranks", f"{too_few_gpus(spec.ranks_asked, gpus)}, and {spec.ranks} cannot run "
                                        f"either: {e.reason}") from None
        raise
    config.pop("out", None)  # the run folder, not known yet; run.json lies in it
    nsys = backends.find_nsys() if backend == "nsys" else None
    options = importlib.import_module(workload.options)
    steps = getattr(options, "profiled_steps", lambda config: None)(config) if backend != "none" else None
    return Plan(spec, backend, workload.program, config, gpus, nsys, notes, steps)


def ranks_for_gpus(spec: RunSpec, gpus: int) -> tuple[RunSpec, list[str]]:
    """One rank per visible GPU at most (NCCL takes no two ranks on one GPU): with fewer
    GPUs than --ranks on one node, as many ranks as GPUs, said in a note; across nodes,
    where every node must start the same count, UsageError. CPU ranks (gloo) any count."""
    if not gpus or spec.ranks <= gpus:
        return spec, []
    if _nnodes(spec) > 1:
        raise UsageError("--ranks", f"{too_few_gpus(spec.ranks, gpus)} (every node must run --ranks ranks)")
    note = f"note: {gpus} GPU(s) visible: running {gpus} rank(s) instead of {spec.ranks} (--ranks)"
    return dataclasses.replace(spec, ranks=gpus, ranks_asked=spec.ranks), [note]


def too_few_gpus(ranks: int, gpus: int) -> str:
    return f"{ranks} ranks per node but only {gpus} GPU(s) are visible"


def check_spec(spec: RunSpec) -> None:
    """The checks that need neither torch nor the workload: UsageError."""
    if spec.workload not in WORKLOADS:
        raise UsageError("WORKLOAD", f"unknown workload {spec.workload!r}; choose one of {', '.join(WORKLOADS)}")
    if spec.ranks < 1:
        raise UsageError("--ranks", f"must be at least 1, not {spec.ranks}")
    if not 1 <= spec.repeat <= MAX_REPEAT:
        raise UsageError("--repeat", f"must be 1 to {MAX_REPEAT}, not {spec.repeat}")
    if spec.nnodes not in (None, "1") and not spec.rdzv_endpoint:
        raise UsageError("--nnodes", "several nodes need --rdzv-endpoint HOST:PORT (the same on every node)")
    _nnodes(spec)
    if spec.backend is not None:
        backends.check(spec.backend, gpu=not machine.no_gpu_for_sure())
    refuse_runner_options(spec.workload_args)


def _installed(name: str) -> Workload:
    """The workload's modules, found (not imported: the program imports torch)."""
    for module in WORKLOADS[name]:
        if importlib.util.find_spec(module) is None:
            raise UsageError("WORKLOAD", f"workload {name!r} is not installed ({module} is missing)")
    return WORKLOADS[name]


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
    memory = ["--cuda-memory-usage=true"] if spec.memory else []  # CUDA_GPU_MEMORY_USAGE_EVENTS: tracelab memory
    return cmd + ["--no-python", str(p.nsys), *NSYS_PROFILE, *memory, "-o", str(run_dir / "rank%q{RANK}"),
                  sys.executable, *program]


def rank_env(p: Plan) -> dict[str, str]:
    env = {**os.environ, **SAFE_ENV, backends.MEMORY_ENV: "1" if p.spec.memory else "0"}
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // p.spec.ranks)))
    return env


def new_record(p: Plan, command: list[str]) -> dict:
    """run.json's content at launch; execute() adds status, wall_s, results and traces."""
    spec = p.spec
    return {"workload": spec.workload, "backend": p.backend, "ranks_per_node": spec.ranks,
            "nnodes": spec.nnodes or "1", "argv": spec.argv, "command": command, "config": p.config,
            "env": SAFE_ENV, "versions": machine.versions(p.nsys), "devices": machine.devices(p.gpus),
            "host": platform.node(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "status": "running",
            "memory": backends.memory_recording(p.backend, spec.memory), "ranks_asked": spec.ranks_asked or spec.ranks,
            "load_per_cpu": {"start": machine.load_per_cpu()},
            "notes": p.notes, **({"profiled_steps": p.profiled_steps} if p.profiled_steps is not None else {})}


def run(spec: RunSpec, on_line: OnLine = lambda line: None) -> RunResult:
    """Plan, launch, gather: the whole of `tracelab run` (one run; run_repeats for --repeat)."""
    return execute(plan(spec), on_line)


def run_repeats(spec: RunSpec, on_line: OnLine = lambda line: None) -> tuple[Path, list[RunResult]]:
    """spec.repeat runs of one config, one after another, into one new folder: each a whole run
    folder of its own (repeat-1/, repeat-2/, ...), so that every reader takes the folder for
    its runs (tracelab.ingest.session) and the gate for repeats: samples of how far runs of
    one job differ. Planned once: a bad option is refused before the first run. With one
    repeat, the run's own folder, as run() makes it."""
    p = plan(spec)
    if spec.repeat == 1:
        result = execute(p, on_line)
        return result.run_dir, [result]
    group = new_run_dir(p.spec.out_root, p.spec.workload, p.backend)
    results = []
    for k in range(1, spec.repeat + 1):
        on_line(f"repeat {k} of {spec.repeat}")
        results.append(execute(p, on_line, group / REPEAT_FOLDER.format(k=k)))
    return group, results


def execute(p: Plan, on_line: OnLine = lambda line: None, run_dir: Path | None = None) -> RunResult:
    """Launch the planned run into a new folder (`run_dir`, else a new one under the spec's
    out_root). RunError (naming the failing rank and showing its last lines) when a rank fails;
    RunInterrupted on SIGINT/SIGTERM, which go on to every rank. Either way run.json says so,
    and traces cut short are renamed *.partial."""
    if run_dir is None:
        run_dir = new_run_dir(p.spec.out_root, p.spec.workload, p.backend)
    else:
        run_dir.mkdir(parents=True)
    cmd = torchrun_command(p, run_dir)
    record = new_record(p, cmd)
    _write_record(run_dir, record)
    for note in p.notes:
        on_line(note)
    on_line(f"run folder {run_dir}")
    nodes = f" on each of {_nnodes(p.spec)} nodes" if _nnodes(p.spec) > 1 else ""
    on_line(f"starting {p.spec.ranks} rank(s){nodes} of {p.spec.workload} under {p.backend} (torchrun)")
    t0 = time.perf_counter()
    try:
        with stop_on_signals():
            status, output = launch(cmd, rank_env(p), on_line, gpu=p.gpus > 0)
    except Stopped as stop:
        with signals_held():
            _finish(p, run_dir, record, t0, "interrupted")
        raise RunInterrupted(run_dir, stop.signum, f"{stop}: run stopped, marked interrupted in run.json"
                                                    f"{_partial_note(record)}") from None
    if status != 0:
        _finish(p, run_dir, record, t0, "failed")
        raise RunError(run_dir, failure_message(run_dir, status, output) + _partial_note(record))
    if p.nsys is not None:
        export_nsys(p.nsys, run_dir, rank_env(p), on_line)
    _finish(p, run_dir, record, t0, "ok")
    return RunResult(run_dir, record, find_traces(p, run_dir, record["results"]))


def _finish(p: Plan, run_dir: Path, record: dict, t0: float, status: str) -> None:
    """run.json at the end: status, wall time, results, and the traces (complete and partial)."""
    record.update(status=status, wall_s=round(time.perf_counter() - t0, 3), results=runfolder.gather(run_dir))
    record.setdefault("load_per_cpu", {})["end"] = machine.load_per_cpu()
    complete, partial = set_aside_partial_traces(run_dir, p.backend)
    record.update(traces=[t.name for t in complete], partial_traces=[t.name for t in partial])
    _write_record(run_dir, record)


def _partial_note(record: dict) -> str:
    partial = record.get("partial_traces")
    return f"; cut short (renamed *{PARTIAL_SUFFIX}): {', '.join(partial)}" if partial else ""


def _write_record(run_dir: Path, record: dict) -> None:
    """run.json, replaced whole: a reader never sees half of it."""
    tmp = run_dir / "run.json.tmp"
    tmp.write_text(json.dumps(record, indent=1, default=str))
    os.replace(tmp, run_dir / "run.json")


def find_traces(p: Plan, run_dir: Path, per_rank: dict[str, dict]) -> list[Path]:
    """This node's trace files, one per rank that reported; RunError when one is missing."""
    backend = backends.BACKENDS[p.backend]
    if backend.trace_pattern is None:
        return []
    paths = [run_dir / backend.trace_name(int(r)) for r in per_rank]
    missing = [path.name for path in paths if not path.is_file()]
    if missing or not paths:
        raise RunError(run_dir, f"the {p.backend} backend wrote no {', '.join(missing) or 'traces'}")
    return paths


def set_aside_partial_traces(run_dir: Path, backend: str) -> tuple[list[Path], list[Path]]:
    """The backend's trace files in run_dir, complete ones and ones cut short; those are
    renamed NAME.partial so that a later breakdown or report of the folder skips them."""
    pattern = backends.BACKENDS[backend].trace_pattern
    if pattern is None:
        return [], []
    complete, partial = [], []
    for path in sorted(run_dir.glob(pattern.format(rank="*"))):
        if is_complete(path):
            complete.append(path)
        else:
            partial.append(path.rename(path.with_name(path.name + PARTIAL_SUFFIX)))
    return complete, partial


def is_complete(path: Path) -> bool:
    """Whether a trace file was written to its end: a gzip stream read through (its length
    and CRC checked), SQLite's quick_check, JSON parsed."""
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path) as stream:
                while stream.read(1 << 20):
                    pass
            return True
        if path.suffix == ".sqlite":
            with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
                return db.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        json.loads(path.read_bytes())
        return True
    except (OSError, EOFError, zlib.error, ValueError, sqlite3.DatabaseError):
        return False


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
