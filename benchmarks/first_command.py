"""Wall time and peak resident memory of a command and all its processes together.

    python benchmarks/first_command.py --cwd /tmp/x -- tracelab run decode --ranks 2

`/usr/bin/time -v` reports one process's peak (not the sum over torchrun's ranks), so the
process tree's RSS is summed from /proc every 0.2 s; the command's output lines are shown
with the second they came at (the phases), and one line of JSON ends the output: the tree's
peak, each process's share of it at that moment and each one's own peak (by its command
line, shortened), and the load average at the start and the end. The RSS sum counts a shared
library's pages once per process that maps them (torch's, in each of the launcher, torchrun and
the ranks); the tree's peak proportional set size (PSS, /proc/PID/smaps_rollup: a shared page
split between the processes that share it) is the memory the tree really took.
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
LABEL_CHARS = 60


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


def label(pid: int) -> str:
    """The process's command line, its interpreter's path left out, cut to LABEL_CHARS."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode(errors="replace").split("\0")
    except OSError:
        return "?"
    argv = [os.path.basename(argv[0]), *argv[1:]] if argv else []
    return f"{pid} " + " ".join(a for a in argv if a)[:LABEL_CHARS]


def pss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next((int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:")), 0)
    except OSError:
        return 0


def tree_rss_bytes(root: int) -> dict[int, int]:
    """pid -> resident bytes, of root and every descendant now."""
    tree, todo, rss = children_of(), [root], {}
    while todo:
        pid = todo.pop()
        todo += tree.get(pid, [])
        try:
            with open(f"/proc/{pid}/statm") as f:
                rss[pid] = int(f.read().split()[1]) * PAGE_BYTES
        except OSError:
            pass
    return rss


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--cwd", default=".")
    p.add_argument("command", nargs="+")
    args = p.parse_args()
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    proc = subprocess.Popen(args.command, cwd=args.cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = {"bytes": 0, "at_s": 0.0, "processes": {}, "pss_bytes": 0}
    own_peak_bytes: dict[str, int] = {}

    def sample() -> None:
        while proc.poll() is None:
            rss = tree_rss_bytes(proc.pid)
            names = {pid: label(pid) for pid in rss}
            for pid, n in rss.items():
                own_peak_bytes[names[pid]] = max(own_peak_bytes.get(names[pid], 0), n)
            peak["pss_bytes"] = max(peak["pss_bytes"], sum(pss_bytes(pid) for pid in rss))
            if sum(rss.values()) > peak["bytes"]:
                peak.update(bytes=sum(rss.values()), at_s=time.perf_counter() - t0,
                            processes={names[pid]: n for pid, n in rss.items()})
            time.sleep(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    for line in proc.stdout:
        print(f"{time.perf_counter() - t0:7.1f}s  {line.rstrip()}", flush=True)
    status = proc.wait()
    sampler.join()
    mb = lambda n: round(n / 1e6)  # noqa: E731
    print(json.dumps({"status": status, "wall_s": round(time.perf_counter() - t0, 1),
                      "peak_rss_mb": mb(peak["bytes"]), "peak_at_s": round(peak["at_s"], 1),
                      "at_peak_mb": {k: mb(v) for k, v in peak["processes"].items()},
                      "peak_pss_mb": mb(peak["pss_bytes"]),
                      "own_peak_mb": {k: mb(v) for k, v in own_peak_bytes.items() if v >= 20e6},
                      "load_avg_start_end": [round(load_start[0], 2), round(os.getloadavg()[0], 2)]}))
    return status


if __name__ == "__main__":
    sys.exit(main())
