#!/usr/bin/env python3
"""A tracelab command of one checkout, run in this process, with its CPU split between the parent
and the pool workers it waited for: at exit, one JSON line on stderr (getrusage of the process
itself and of its children, user + sys; its peak RSS; wall; the load average). Under
measure_tree.py, the tree's figures and this split come from one run.

usage: cpu_split.py ROOT COMMAND [ARGS ...]   e.g. cpu_split.py /tmp/base report DIR -o r.html --force

ROOT: the checkout whose tracelab runs (its root goes first on sys.path).
"""
from __future__ import annotations

import atexit
import json
import os
import resource
import sys
import time


def _report(t0_s: float) -> None:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"parent_cpu_s": round(own.ru_utime + own.ru_stime, 2),
                      "children_cpu_s": round(kids.ru_utime + kids.ru_stime, 2),
                      "parent_maxrss_mb": own.ru_maxrss // 1024,  # KiB on Linux
                      "wall_s": round(time.monotonic() - t0_s, 1), "load_avg_1m": os.getloadavg()[0]}),
          file=sys.stderr)


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    root, args = sys.argv[1], sys.argv[2:]
    sys.path.insert(0, root)
    sys.argv = ["tracelab", *args]
    atexit.register(_report, time.monotonic())  # after the command's own exit, pool shut down
    from tracelab.cli.program import main as tracelab_main
    tracelab_main()


if __name__ == "__main__":
    main()
