"""Wall time and peak resident memory of a command and all its processes together.

    python benchmarks/first_command.py --cwd /tmp/x -- tracelab run decode --ranks 2

`/usr/bin/time -v` reports one process's peak (not the sum over torchrun's ranks), so the
process tree's RSS is summed from /proc every 0.2 s; the command's output lines are shown
with the second they came at (the phases), and one line of JSON ends the output.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
SAMPLE_S = 0.2


def children_of() -> dict[int, list[int]]:
    """ppid -> pids, of every process now."""
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(name))
    return tree


def tree_rss_bytes(root: int) -> int:
    tree, todo, total = children_of(), [root], 0
    while todo:
        pid = todo.pop()
        todo += tree.get(pid, [])
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE_BYTES
        except OSError:
            pass
    return total


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--cwd", default=".")
    p.add_argument("command", nargs="+")
    args = p.parse_args()
    t0 = time.perf_counter()
    proc = subprocess.Popen(args.command, cwd=args.cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss_bytes(proc.pid))
            time.sleep(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    for line in proc.stdout:
        print(f"{time.perf_counter() - t0:7.1f}s  {line.rstrip()}", flush=True)
    status = proc.wait()
    sampler.join()
    print(json.dumps({"status": status, "wall_s": round(time.perf_counter() - t0, 1),
                      "peak_rss_mb": round(peak[0] / 1e6)}))
    return status


if __name__ == "__main__":
    sys.exit(main())
