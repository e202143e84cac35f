#!/usr/bin/env python3
"""Run a command and measure its whole process tree: wall time, CPU time, peak memory.

usage: measure_tree.py [--label TEXT] -- COMMAND ...

CPU time is user + system of the command and every descendant it waited for
(getrusage(RUSAGE_CHILDREN), as /usr/bin/time counts). Peak memory is the largest sum of
the resident sets (/proc/PID/status VmRSS) of the command and all its descendants,
sampled every SAMPLE_S: `/usr/bin/time -v` reports only the largest single process, and
a report of 1,024 ranks runs in a parent and a pool of workers. Shared pages count once
per process, so the sum is an upper bound. stderr lines are counted (warnings) and kept
in the last 5 lines. One line of JSON on stdout. Linux only.

Where the wall time went besides the CPU, from each thread's /proc/PID/task/TID/schedstat (its ns
on a CPU and its ns runnable but waiting for one), sampled with the memory: `runqueue_s`, the
threads' time waiting for a CPU that other processes held (on a shared machine, the load: a
worker pool's wall above its CPU over the cores is this), and `blocked_s`, the wall time in which
no thread of the tree ran or waited to run (a pipe, a lock, a file, a timer: a pool waiting on
itself). None where the kernel keeps no schedstat.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time

SAMPLE_S = 0.05
BLOCKED_SHARE = 0.05  # an interval in which the tree ran or queued for less than this share of it is blocked


def _children(pid: int) -> list[int]:
    """Children started by any thread of pid (a Dask cluster starts its workers from its own
    thread: /proc/PID/task/PID/children lists only the main thread's)."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_pids(root: int) -> list[int]:
    """root and its descendants."""
    todo, found = [root], []
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += _children(pid)
    return found


def tree_rss_bytes(root: int) -> tuple[int, int]:
    """(summed RSS of root and its descendants, how many processes)."""
    pids = tree_pids(root)
    return sum(map(_rss_bytes, pids)), len(pids)


def _thread_sched_ns(pid: int) -> dict[tuple[int, int], tuple[int, int]]:
    """(pid, tid) -> (ns on a CPU, ns runnable and waiting for one) of each thread of pid."""
    out = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                on_cpu_ns, queued_ns = map(int, f.read().split()[:2])
        except (OSError, ValueError):
            continue
        out[(pid, int(tid))] = (on_cpu_ns, queued_ns)
    return out


class Waits:
    """The tree's run-queue wait and blocked wall time (module docstring), from samples of its
    threads' schedstat: a thread's last sample stands for it once it has ended."""

    def __init__(self) -> None:
        self.threads: dict[tuple[int, int], tuple[int, int]] = {}
        self.blocked_s, self.seen = 0.0, False
        self._last: tuple[float, int] | None = None  # (when, the threads' CPU + queued ns then)

    def sample(self, pids: list[int], now_s: float) -> None:
        for pid in pids:
            found = _thread_sched_ns(pid)
            self.seen |= bool(found)
            self.threads.update(found)
        ran_ns = sum(cpu + queued for cpu, queued in self.threads.values())
        if self._last is not None and ran_ns - self._last[1] < BLOCKED_SHARE * (now_s - self._last[0]) * 1e9:
            self.blocked_s += now_s - self._last[0]
        self._last = (now_s, ran_ns)

    def figures(self) -> dict:
        if not self.seen:
            return {"runqueue_s": None, "blocked_s": None}
        return {"runqueue_s": round(sum(q for _, q in self.threads.values()) / 1e9, 2), "blocked_s": round(self.blocked_s, 2)}


def measure(command: list[str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, errors="replace")
    peak, waits = {"bytes": 0, "procs": 0}, Waits()

    def sample() -> None:
        while proc.poll() is None:
            pids = tree_pids(proc.pid)
            waits.sample(pids, time.perf_counter())
            peak["bytes"], peak["procs"] = max(peak["bytes"], sum(map(_rss_bytes, pids))), max(peak["procs"], len(pids))
            time.sleep(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    err = proc.stderr.read().splitlines()
    proc.wait()
    wall_s = time.perf_counter() - began
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"rc": proc.returncode, "wall_s": round(wall_s, 2), "cpu_s": round(cpu_s, 2),
            "peak_tree_rss_mb": round(peak["bytes"] / 1e6), "max_procs": peak["procs"],
            "largest_process_maxrss_mb": round(after.ru_maxrss / 1e3),  # kB: the largest child's, ever
            **waits.figures(),
            "stderr_lines": len(err), "performance_warnings": sum("PerformanceWarning" in e for e in err),
            "stderr_tail": err[-5:], "load_avg_1m": os.getloadavg()[0]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--label", default="")
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        p.error("no command given")
    result = {"label": a.label, "command": " ".join(command), **measure(command)}
    print(json.dumps(result))
    sys.exit(0 if result["rc"] == 0 else 1)


if __name__ == "__main__":
    main()
