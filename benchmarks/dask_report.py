#!/usr/bin/env python3
"""Run a tracelab command against a local Dask cluster started here, so that one process
tree holds the client and the cluster's workers (benchmarks/measure_tree.py measures it).

usage: dask_report.py --workers 2 -- report /tmp/ranks -o r.html --force

The cluster is a distributed.LocalCluster of worker processes (one thread each); the
command gets its address through TRACELAB_SCHEDULER, as a user's would.
"""
from __future__ import annotations

import argparse
import os
import sys


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    from distributed import LocalCluster

    from tracelab import cli

    from tracelab.core import options

    with LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        os.environ[options.SCHEDULER_ENV] = cluster.scheduler_address
        sys.argv = ["tracelab", *command]
        try:
            cli.main()
        except SystemExit as done:
            if done.code:
                raise


if __name__ == "__main__":
    main()
