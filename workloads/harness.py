"""The one convention every workload program (decode, train, allreduce, overlap) follows:
arguments checked before the process group exists (so every rank fails the same way, and
none waits for a rank that already left), joining the job with a timeout, one line on
failure; and what they share for timing.

A workload module offers:

    def parse(argv=None) -> argparse.Namespace   # its options module's parse (workloads/options/,
                                                 # no torch: tracelab run calls it first) with gpu
                                                 # as torch sees it; UsageError on bad input, the
                                                 # world read from torchrun's environment
    def run(args, d: Dist) -> None               # the work; writes this rank's results
    def main(argv=None) -> int:
        return harness.main("allreduce", parse, run, argv)
"""
from __future__ import annotations

import contextlib
import statistics
import sys
import time
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from tracelab.core.errors import RunError, TracelabError, UsageError

from .common import Dist, env_rank, join, leave

EXIT_FAILED = 2
RANK0_GRACE_S = 2.0  # other ranks wait this long before failing on bad input


def enable_symm_mem(d: Dist) -> None:
    """Older torch (< 2.8) wants symmetric memory switched on per group; newer warns that
    it need not be, so the call is made quietly where it exists."""
    import warnings

    import torch.distributed._symmetric_memory as symm_mem
    enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
    if enable is not None and d.group is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            enable(d.group.group_name)


def main(name: str, parse: Callable[[list[str] | None], Any], run: Callable[[Any, Dist], None],
         argv: list[str] | None = None, needs_group: bool = False) -> int:
    """Parse (before any process group), run, and turn failures into one line on stderr.
    Bad input is the same on every rank, so only rank 0 says it; a failure at run time
    (out of memory, a wrong sum) is this rank's own and says which rank."""
    rank = env_rank()[0]
    try:
        args = parse(argv)
    except UsageError as e:
        if rank == 0:
            print(f"tracelab {name}: error: {e}", file=sys.stderr)
        else:  # let rank 0 say why before torchrun, seeing this rank fail, stops the group
            time.sleep(RANK0_GRACE_S)
        return EXIT_FAILED
    d = None
    try:
        d = join(args.timeout_s, needs_group)
        run(args, d)
        leave(d)  # only on success: a failed rank just exits, and torchrun stops the others
    except torch.OutOfMemoryError as e:
        print(f"tracelab {name}: error: rank {rank}: out of memory on {d.device if d else 'the device'}: "
              f"{_first_line(e)}; try smaller sizes", file=sys.stderr)
        return EXIT_FAILED
    except TracelabError as e:
        print(f"tracelab {name}: error: rank {rank}: {e}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepClock:
    """Each step's time in ns, measured one way with the profiler on or off: CUDA events
    around each step on a GPU (launches queue back to back, the host is never held back,
    one sync when the times are read), perf_counter around each on the CPU, whose ops and
    gloo collectives finish before they return.

        clock = StepClock(device)
        for i in range(n):
            with clock.step():
                work()
        clock.ns()  # [n] step times
    """

    def __init__(self, device: torch.device):
        self.device = device
        self._cpu_ns: list[int] = []
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        if self.device.type != "cuda":
            t0 = time.perf_counter_ns()
            yield
            self._cpu_ns.append(time.perf_counter_ns() - t0)
            return
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        yield
        end.record()
        self._events.append((start, end))

    def ns(self) -> list[int]:
        if self.device.type != "cuda":
            return list(self._cpu_ns)
        torch.cuda.synchronize(self.device)
        return [round(start.elapsed_time(end) * 1e6) for start, end in self._events]


def time_each_us(fn: Callable[[], Any], iters: int, device: torch.device) -> list[float]:
    """Per-call times in microseconds (StepClock)."""
    clock = StepClock(device)
    for _ in range(iters):
        with clock.step():
            fn()
    return [t / 1e3 for t in clock.ns()]


def window_step_times(bare: list[float] | None, window: list[float], profiled: bool,
                      unit_ns: float = 1) -> dict[str, Any]:
    """step_times of a window's steps and the same steps timed before it, bare (None: not
    timed); under no profiler the window's steps are the unprofiled ones."""
    return step_times(bare, window, unit_ns) if profiled else step_times(window, None, unit_ns)


def window_region_times(bare, window, profiled: bool) -> dict[str, Any]:
    """results.REGION_TIMES of a window's steps (backends.RegionClock) and of the same steps timed
    before it, bare (None: not timed), as window_step_times."""
    pair = (bare, window) if profiled else (window, None)
    return {f"{name}_region_ns": clock.medians_ns() if clock is not None else None
            for name, clock in zip(("unprofiled", "profiled"), pair)}


def step_times(unprofiled: list[float] | None, profiled: list[float] | None, unit_ns: float = 1) -> dict[str, Any]:
    """The results' step fields (results.STEP_TIMES): the median of the same steps timed the
    same way with the profiler off and on (in units of unit_ns), each with its samples in
    ns; None for a phase not run."""
    out: dict[str, Any] = {}
    for name, times in (("unprofiled", unprofiled), ("profiled", profiled)):
        ns = [round(t * unit_ns) for t in times] if times else None
        out[f"{name}_step_ns"] = round(statistics.median(ns)) if ns else None
        out[f"{name}_step_ns_samples"] = ns
    return out


def median(values: list[float]) -> float:
    return statistics.median(values)


def max_over_ranks(value: float, d: Dist) -> float:
    """The largest of every rank's value (the slowest rank sets a collective's time)."""
    if d.group is None:
        return value
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def check_close(what: str, got: torch.Tensor, want: torch.Tensor, rel_tol: float) -> float:
    """Relative error ||got - want|| / ||want|| (in float64); RunError past rel_tol or on NaN."""
    got64, want64 = got.detach().double(), want.detach().double()
    err = float((got64 - want64).norm() / want64.norm().clamp_min(1e-30))
    if not err <= rel_tol:  # NaN fails too
        raise RunError(what, f"result differs from the expected one: relative error {err:.3g} > {rel_tol:g}")
    return err
