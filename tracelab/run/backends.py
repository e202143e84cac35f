"""Profiling backends: the one interface between a workload and the profiler it runs under.

A workload (a program started by the runner, one process per rank) imports
only this module of tracelab's profiling side, and reads like this:

    from tracelab.run import backends

    parser = argparse.ArgumentParser()
    backends.add_arguments(parser)                 # --backend proton|torch|nsys|none, --out DIR
    args = parser.parse_args()
    with backends.session(args.backend, args.out, rank) as prof:
        warm_up()                                  # compiles, graph captures: outside the window
        with prof.window():                        # or prof.start() ... prof.stop(), once
            for _ in range(steps):
                with backends.region("decode_one_token"):
                    step()
    results.write(args.out, rank, {"workload": ..., ...})  # -> rank{r}.results.json (tracelab/results.py)

`region(name)` is backend-neutral: it opens a proton scope (while a proton
session is active), a torch.profiler.record_function (while any torch profiler
records) and an NVTX range (when CUDA is available and proton is not running: proton makes scopes of NVTX ranges itself), so the same scope names
appear whichever profiler ran. With nothing profiling it costs a few flag
checks (plus an NVTX push/pop on a GPU, which is nanoseconds without a tool).

What each backend leaves in `out` per rank r (BACKENDS[name].trace_name(r)):
  proton -> rank{r}.hatchet            triton.profiler, hook="triton"; started inactive when the
                                       session opens (so it sees CUDA graphs captured in warm-up),
                                       active in the window, finalized on session exit
  torch  -> rank{r}.pt.trace.json.gz   torch.profiler, CPU (+CUDA) activities, exported on exit
  nsys   -> rank{r}.sqlite             the workload only marks the capture range
                                       (cudaProfilerStart/Stop); the runner starts each rank
                                       under `nsys profile` and exports the report to SQLite
  none   -> nothing                    the workload's results only
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import statistics
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tracelab.core.errors import RunError, ToolMissingError, UsageError

NSYS_ENV = "TRACELAB_NSYS"  # the nsys to run, when it is not the one on the PATH
MEMORY_ENV = "TRACELAB_PROFILE_MEMORY"  # "0": the torch session records no memory events (tracelab run --no-memory)
# "0": the torch session records no shapes (the profiler's cost without them: benchmarks/profiler_cost.py)
RECORD_SHAPES_ENV = "TRACELAB_RECORD_SHAPES"
# how each backend records memory, said in run.json's "memory" so a reader knows what the trace's memory rows count
MEMORY_HOW = {"torch": "torch.profiler(profile_memory=True): [memory] events of every allocation and free",
              "nsys": "nsys profile --cuda-memory-usage=true: CUDA_GPU_MEMORY_USAGE_EVENTS (CUDA's allocations)",
              "proton": "proton records no memory", "none": "no profiler"}


def memory_recording(backend: str, wanted: bool) -> dict:
    """run.json's "memory": whether the run records memory events, and how."""
    recorded = wanted and backend in ("torch", "nsys")
    how = MEMORY_HOW.get(backend, "") if recorded or backend in ("proton", "none") else "off (--no-memory)"
    return {"recorded": recorded, "how": how}


def profile_memory() -> bool:
    """Whether a torch session records memory events: yes unless MEMORY_ENV is "0"."""
    return os.environ.get(MEMORY_ENV, "1") != "0"


def record_shapes() -> bool:
    """Whether a torch session records the operators' shapes: yes unless RECORD_SHAPES_ENV is "0"."""
    return os.environ.get(RECORD_SHAPES_ENV, "1") != "0"


@dataclass(frozen=True)
class Backend:
    """A profiler tracelab can run a workload under."""

    name: str
    trace_pattern: str | None  # file name per rank, "{rank}" filled in; None: no trace
    needs_gpu: bool
    help: str

    def trace_name(self, rank: int) -> str | None:
        return None if self.trace_pattern is None else self.trace_pattern.format(rank=rank)


BACKENDS: dict[str, Backend] = {
    "proton": Backend("proton", "rank{rank}.hatchet", True, "triton.profiler (proton): one .hatchet tree per rank"),
    "torch": Backend("torch", "rank{rank}.pt.trace.json.gz", False, "torch.profiler: one Kineto trace per rank"),
    "nsys": Backend("nsys", "rank{rank}.sqlite", True, "Nsight Systems: each rank under nsys, exported to SQLite"),
    "none": Backend("none", None, False, "no profiler: the workload's results only"),
}

# which profilers are recording now, in this process (set by the sessions below)
_active = {"proton": False}


def _torch():
    import torch  # workloads have torch; the trace-reading side of tracelab does not need it
    return torch


@functools.lru_cache(maxsize=1)
def _cuda_available() -> bool:
    return _torch().cuda.is_available()


class RegionClock:
    """The host's wall time (perf_counter, no profiler) of each region directly inside a step,
    per step: a step is the outermost region (`step N`), its direct regions its phases. Timed
    with and without the profiler alike, it gives each phase's own slowdown under the profiler
    (tracelab whatif scales each phase's operators by it: reports/whatif/regions.py)."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []  # per step: region name -> ns, "" the step outside them
        self._open: list[float] = []  # the start (ns) of each region open now, outermost first

    def enter(self) -> None:
        self._open.append(time.perf_counter_ns())
        if len(self._open) == 1:
            self.steps.append({})

    def leave(self, name: str) -> None:
        took = time.perf_counter_ns() - self._open.pop()
        step = self.steps[-1]
        if len(self._open) == 1:
            step[name] = step.get(name, 0) + took
        elif not self._open:
            step[""] = took - sum(v for k, v in step.items() if k)

    def medians_ns(self) -> dict[str, int] | None:
        """Per region, its median time over the steps that entered it ("": outside every region)."""
        names = {k for s in self.steps for k in s}
        return {k: round(statistics.median(s[k] for s in self.steps if k in s)) for k in sorted(names)} or None


_clock: list[RegionClock] = []  # the clock timing regions now (clocked), if any


@contextlib.contextmanager
def clocked() -> Iterator[RegionClock]:
    """Regions opened inside it are timed on a RegionClock."""
    _clock.append(RegionClock())
    try:
        yield _clock[-1]
    finally:
        _clock.pop()


@contextlib.contextmanager
def region(name: str, work: dict[str, float] | None = None) -> Iterator[None]:
    """Mark a phase of a workload for every profiler at once (see the module docstring).
    Use it around compiled code, not inside it: a proton scope would break the graph.
    `work`: proton's metrics of ONE entry of the region (flops8/16/32/64, bytes), which
    proton adds per entry and tracelab roofline spreads over the region's kernels; the
    other profilers get FLOPs and bytes from the ops' shapes instead."""
    torch = _torch()
    with contextlib.ExitStack() as stack:
        if _active["proton"]:
            import triton.profiler as proton
            stack.enter_context(proton.scope(name, work) if work else proton.scope(name))
        if torch._C._autograd._profiler_enabled():
            stack.enter_context(torch.profiler.record_function(name))
        if _cuda_available() and not _active["proton"]:
            # proton (Triton 3.6) turns NVTX ranges into scopes itself: with both, every
            # scope would come out doubled ("a/a")
            stack.enter_context(torch.cuda.nvtx.range(name))
        clock = _clock[-1] if _clock else None
        if clock is not None:
            clock.enter()
            stack.callback(clock.leave, name)
        yield


def _align_ranks() -> None:
    """Every rank of a process group leaves start() together: each rank's profiler takes its own
    time to start (up to a second on a CPU), and a rank that entered its first step early would
    wait for the others at its first collective, a wait of the profiler's own making in the
    window's first step."""
    dist = getattr(_torch(), "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


class Session:
    """One rank's profiling session: one window, opened by start() and closed by stop()."""

    def __init__(self, backend: str, out_dir: Path, rank: int):
        self.backend, self.out_dir, self.rank = backend, out_dir, rank
        self.started = self.stopped = False

    @property
    def trace_path(self) -> Path | None:
        name = BACKENDS[self.backend].trace_name(self.rank)
        return None if name is None else self.out_dir / name

    def start(self) -> None:
        if self.started:
            raise RunError(self.backend, "a session has one profiled window; start() was called twice")
        self.started = True
        self._start()
        _align_ranks()

    def stop(self) -> None:
        if self.started and not self.stopped:
            if _cuda_available():
                _torch().cuda.synchronize()  # the window's kernels finish inside it
            self.stopped = True
            self._stop()

    @contextlib.contextmanager
    def window(self) -> Iterator[None]:
        self.start()
        try:
            yield
        finally:
            self.stop()

    def close(self) -> None:
        """Stop if still recording, then write the trace file, saying how long that took (a
        torch.profiler export of a 7B model's decode takes minutes, silent but for this line)."""
        self.stop()
        if self.started:
            from tracelab.reports.fmt import binary_size  # no pandas: fmt imports math only
            began = time.perf_counter()
            self._write()
            path = self.trace_path
            if path is not None and path.is_file():
                print(f"rank {self.rank}: {self.backend} wrote {path.name} ({binary_size(path.stat().st_size)}) in "
                      f"{time.perf_counter() - began:.1f} s", flush=True)

    def _open(self) -> None: ...
    def _start(self) -> None: ...
    def _stop(self) -> None: ...
    def _write(self) -> None: ...


class ProtonSession(Session):
    """Started (inactive) when the session opens: proton must see CUDA graphs being created
    to attribute their kernels later, and warm-up is where torch.compile captures them."""

    def _open(self) -> None:
        import triton.profiler as proton
        self._id = proton.start(str(self.out_dir / f"rank{self.rank}"), hook="triton")
        proton.deactivate(self._id)

    def _start(self) -> None:
        import triton.profiler as proton
        proton.activate(self._id)
        _active["proton"] = True

    def _stop(self) -> None:
        import triton.profiler as proton
        proton.deactivate(self._id)
        _active["proton"] = False

    def _write(self) -> None:
        import triton.profiler as proton
        proton.finalize()  # writes rank{r}.hatchet


# torch.profiler's warning of a schedule's cycles, given by some releases without a schedule
SPURIOUS_CYCLE_WARNING = r"Warning: Profiler clears events at the end of each cycle"


class TorchSession(Session):
    def _start(self) -> None:
        torch = _torch()
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        # record_shapes: the aten ops' Input Dims and types, from which `tracelab roofline`
        # computes each kernel's FLOPs and bytes
        # profile_memory: a [memory] event per allocation and free, what `tracelab memory` reads
        self._prof = torch.profiler.profile(activities=activities, record_shapes=record_shapes(),
                                            profile_memory=profile_memory())
        with warnings.catch_warnings():  # torch 2.10-2.11 say so of one start and no schedule (pytorch#180387): untrue here
            warnings.filterwarnings("ignore", message=SPURIOUS_CYCLE_WARNING, category=UserWarning)
            self._prof.start()

    def _stop(self) -> None:
        self._prof.stop()

    def _write(self) -> None:
        self._prof.export_chrome_trace(str(self.trace_path))  # .gz: torch writes gzip


class NsysSession(Session):
    """The capture range of `nsys profile --capture-range=cudaProfilerApi` (the runner's)."""

    def _start(self) -> None:
        _torch().cuda.profiler.start()

    def _stop(self) -> None:
        _torch().cuda.profiler.stop()


_SESSIONS: dict[str, type[Session]] = {
    "proton": ProtonSession, "torch": TorchSession, "nsys": NsysSession, "none": Session,
}


def check(backend: str, gpu: bool) -> Backend:
    """The Backend named, or UsageError when unknown or when it needs a GPU that is not there."""
    if backend not in BACKENDS:
        raise UsageError("--backend", f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    chosen = BACKENDS[backend]
    if chosen.needs_gpu and not gpu:
        raise UsageError("--backend", f"{backend} needs a CUDA GPU and none is visible; "
                                      "use --backend torch or none on the CPU")
    return chosen


@contextlib.contextmanager
def session(backend: str, out_dir: str | os.PathLike, rank: int) -> Iterator[Session]:
    """This rank's profiling session; the trace is written to out_dir when the block ends."""
    check(backend, _cuda_available())
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prof = _SESSIONS[backend](backend, out, rank)
    prof._open()
    try:
        yield prof
    finally:
        prof.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every workload takes: --backend and --out."""
    parser.add_argument("--backend", choices=list(BACKENDS), default="none",
                        help="profiler to run under (default: none)")
    parser.add_argument("--out", type=Path, default=Path("."),
                        help="folder for this rank's trace and results (default: .)")


def find_nsys() -> Path:
    """The nsys named by $TRACELAB_NSYS, else the one on the PATH; ToolMissingError if neither.
    A copy that needs its own libraries needs them on LD_LIBRARY_PATH as well."""
    named = os.environ.get(NSYS_ENV)
    if named:
        path = Path(named).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ToolMissingError(NSYS_ENV, f"{named} is not an executable file")
        return path
    on_path = shutil.which("nsys")
    if on_path is None:
        raise ToolMissingError("nsys", f"Nsight Systems (nsys) is not on the PATH; install it, put it on the "
                                       f"PATH or set {NSYS_ENV}=/path/to/nsys")
    return Path(on_path)
