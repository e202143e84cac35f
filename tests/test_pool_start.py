"""How the parse pool starts its workers (loading.pool_context): by fork where the platform has it
and nothing makes it unsafe, whatever multiprocessing's default (Python 3.14 makes forkserver the
Linux default, whose workers would import pandas and the parsers again); the default otherwise."""
from __future__ import annotations

import multiprocessing
import sys
import threading
from pathlib import Path

import pytest

import tracelab
from tracelab.ingest import loading

RUN = Path(__file__).parent / "data" / "allreduce-2gpu-torch"
FORK = "fork" in multiprocessing.get_all_start_methods() and sys.platform != "darwin"


@pytest.fixture
def forkserver_default(monkeypatch):
    """multiprocessing's default made forkserver, as Python 3.14's on Linux."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("no forkserver on this platform")
    default = multiprocessing.context._default_context
    multiprocessing.get_start_method()  # the default settled before it is replaced (restored after the test)
    monkeypatch.setattr(default, "_actual_context", multiprocessing.get_context("forkserver"))
    assert multiprocessing.get_start_method() == "forkserver"


@pytest.mark.skipif(not FORK, reason="fork is neither available nor safe here")
def test_the_pool_forks_its_workers_whatever_the_default(forkserver_default, monkeypatch):
    monkeypatch.setenv("TRACELAB_CACHE", "0")
    monkeypatch.setattr(threading, "active_count", lambda: 1)  # pytest-xdist's own threads aside
    made, pool = [], loading.ProcessPoolExecutor
    monkeypatch.setattr(loading, "ProcessPoolExecutor", lambda *a, **k: made.append(k["mp_context"]) or pool(*a, **k))
    profiles = tracelab.load_many(RUN, workers=2)
    assert [c.get_start_method() for c in made] == ["fork"]
    assert [p.rank for p in profiles] == [0, 1] and all(len(p.events) for p in profiles)


def test_the_pool_takes_the_default_while_another_thread_runs(forkserver_default):
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert loading.pool_context().get_start_method() == "forkserver"
    finally:
        stop.set()
        other.join()


def test_the_pool_takes_the_default_on_macos(forkserver_default, monkeypatch):
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert loading.pool_context().get_start_method() == "forkserver"
