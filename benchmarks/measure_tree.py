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


def tree_rss_bytes(root: int) -> tuple[int, int]:
    """(summed RSS of root and its descendants, how many processes)."""
    todo, total, n = [root], 0, 0
    while todo:
        pid = todo.pop()
        total += _rss_bytes(pid)
        n += 1
        todo += _children(pid)
    return total, n


def measure(command: list[str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, errors="replace")
    peak = {"bytes": 0, "procs": 0}

    def sample() -> None:
        while proc.poll() is None:
            rss, n = tree_rss_bytes(proc.pid)
            peak["bytes"], peak["procs"] = max(peak["bytes"], rss), max(peak["procs"], n)
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
