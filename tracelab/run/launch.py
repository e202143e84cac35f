"""Running torchrun for the runner: its output passed on line by line (profiler noise left
in the rank logs), SIGINT/SIGTERM passed on to every rank, and the failing rank found.

    with stop_on_signals():                       # SIGINT/SIGTERM -> Stopped, not a dead tracelab
        status, output = launch(cmd, env, on_line, gpu=False)
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
from pathlib import Path
from typing import Callable, Iterator

OnLine = Callable[[str], None]
DRAIN_S = 10  # after torchrun exits, how long to keep reading what its leftover children print
GRACE_S = 30  # after passing a signal on, how long the ranks get to write their traces
TAIL_LINES = 20

# Lines the profiler prints on every run that tell the user nothing; the rank logs keep them.
# Kineto marks each profiling window ("USDT:<date> <time> <pid>:<tid> <file>.cpp:<line>] profiler_start").
_KINETO_MARK = re.compile(r"USDT:\S+ \S+ \d+:\d+ \S+\.cpp:\d+\] profiler_(start|stop)")
# The profiler started after the model's memory was allocated (a window of a few steps, late in the run)
# cannot see those blocks freed: expected, and said once per rank.
_KINETO_UNKNOWN_BLOCK = re.compile(r"CPUAllocator\.cpp:\d+\] Memory block of unknown size was allocated before the "
                                   r"profiling started")
# A CUDA build of torch without a driver (35: insufficient driver) or device (100): on a CPU run, expected.
_NO_CUDA_DEVICE = re.compile(r"gpuGetDeviceCount failed with code (35|100)")
_RANK_PREFIX = re.compile(r"^\[default\d+\]:")


class Stopped(Exception):
    """SIGINT or SIGTERM arrived while the ranks ran."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def is_noise(line: str, gpu: bool) -> bool:
    """Whether a line of rank output is profiler chatter to keep off the terminal."""
    text = _RANK_PREFIX.sub("", line).strip()
    if _KINETO_MARK.search(text) or _KINETO_UNKNOWN_BLOCK.search(text):
        return True
    return not gpu and _NO_CUDA_DEVICE.search(text) is not None


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise Stopped in the main thread for as long as the block runs
    (outputs.raising_on_signals)."""
    from tracelab.ingest.outputs import raising_on_signals

    with raising_on_signals(Stopped):
        yield


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM ignored for the block: the run record gets written whatever comes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def launch(cmd: list[str], env: dict[str, str], on_line: OnLine, gpu: bool) -> tuple[int, list[str]]:
    """Run torchrun in its own process group, passing its output on line by line. The run
    ends when torchrun does: a worker's own children (inductor's compile pool, say) can
    outlive it holding the pipe open. On Stopped the signal goes to the whole group first,
    and what the ranks print from then on (each its KeyboardInterrupt traceback, torchrun its
    own) stays in `output` and the rank logs: the user sees one line for the interrupt."""
    output: list[str] = []
    stopping = threading.Event()

    def pump(stream) -> None:
        with stream:  # closed at the end of the output, whenever that comes
            for line in stream:
                output.append(line.rstrip("\n"))
                if not stopping.is_set() and not is_noise(output[-1], gpu):
                    on_line(output[-1])

    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            start_new_session=True)
    reader = threading.Thread(target=pump, args=(proc.stdout,), daemon=True)
    reader.start()
    try:
        status = proc.wait()
    except Stopped as stop:
        stopping.set()
        end_group(proc, stop.signum)
        raise
    reader.join(DRAIN_S)
    return status, list(output)


def end_group(proc: subprocess.Popen, signum: int) -> None:
    """Pass the signal on to torchrun and its ranks; kill what is left after GRACE_S, or
    at once on a second signal."""
    _signal_group(proc, signum)
    try:
        proc.wait(GRACE_S)
    except (Stopped, subprocess.TimeoutExpired):
        pass
    _signal_group(proc, signal.SIGKILL)
    proc.wait()


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signum)


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
