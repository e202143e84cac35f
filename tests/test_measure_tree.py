"""benchmarks/measure_tree.py's attribution of wall time that is not CPU: the threads' run-queue
wait (other processes held the CPU) against the wall time in which the tree was blocked (no thread
ran or waited to run), from schedstat samples: fed by hand, and read from a real sleeping process."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from helpers import benchmark

HAS_SCHEDSTAT = Path(f"/proc/{os.getpid()}/schedstat").exists()


@pytest.fixture(scope="module")
def tree():
    return benchmark("measure_tree")


def test_blocked_is_the_wall_in_which_no_thread_ran_or_queued_and_queued_is_summed(tree, monkeypatch) -> None:
    # (pid, tid) -> (ns on a CPU, ns queued) at each sample; thread (2, 3) ends after the second
    samples = [{(1, 1): (0, 0), (2, 3): (0, 0)},
               {(1, 1): (400_000_000, 100_000_000), (2, 3): (200_000_000, 300_000_000)},  # 1.0 s of work in 1 s
               {(1, 1): (420_000_000, 100_000_000)},  # 20 ms in 1 s: under 5%, blocked
               {(1, 1): (420_000_000, 160_000_000)}]  # 60 ms queued in 0.5 s: not blocked
    at_s = [0.0, 1.0, 2.0, 2.5]
    feed = iter(samples)
    monkeypatch.setattr(tree, "_thread_sched_ns", lambda pid: next(feed) if pid == 1 else {})
    waits = tree.Waits()
    for now in at_s:
        waits.sample([1, 2], now)
    assert waits.figures() == {"runqueue_s": round((160_000_000 + 300_000_000) / 1e9, 2), "blocked_s": 1.0}
    assert tree.Waits().figures() == {"runqueue_s": None, "blocked_s": None}  # nothing sampled: no figures


@pytest.mark.skipif(not HAS_SCHEDSTAT, reason="this kernel keeps no /proc/PID/schedstat")
def test_a_sleeping_process_is_blocked_not_queued(tree) -> None:
    child = subprocess.Popen(["sleep", "5"])
    try:
        time.sleep(0.05)  # past its start
        waits, began = tree.Waits(), time.perf_counter()
        waits.sample([child.pid], began)
        time.sleep(0.3)
        ended = time.perf_counter()
        waits.sample([child.pid], ended)
    finally:
        child.kill()
        child.wait()
    assert list(waits.threads) == [(child.pid, child.pid)]
    assert waits.figures()["blocked_s"] == pytest.approx(ended - began, abs=0.005)  # rounded to 10 ms
    assert waits.figures()["runqueue_s"] < 0.05  # asleep, it never waited for a CPU
