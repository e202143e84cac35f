"""Fixtures for every test module; what modules share besides fixtures is in helpers.py."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def _session_cache_dir(tmp_path_factory) -> Path:
    """The run's own Parquet and digest caches, never the user's ~/.cache/tracelab: one folder
    for every xdist worker of the run (the parent of their base folders), so that a trace two
    test files read is parsed once. Two workers writing one entry is what tracelab allows
    (tracelab/ingest/cachedir.staging: the first rename wins, the other is as good)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "tracelab-cache"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


@pytest.fixture(autouse=True)
def _own_cache_dir(_session_cache_dir, monkeypatch) -> None:
    """TRACELAB_CACHE_DIR is the run's (a test that sets its own still wins)."""
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(_session_cache_dir))


@pytest.fixture(autouse=True)
def _small_traces_cached(request, monkeypatch) -> None:
    """Every trace's digests and events go through the run's caches, small ones too (tracelab
    caches only files of at least cache.MIN_BYTES, where a parse costs more than a cache read):
    the default run reads the same few dozen captures in hundreds of tests, each parse and
    digest made once per run instead of once per test. The caches are never stale (keyed on the
    file and tracelab's code), but a test that patches tracelab's code or its environment
    (requests monkeypatch, itself or through a fixture) could make entries its patch decided,
    or read entries made without it: such a test keeps tracelab's own threshold, and so does
    every slow test (end to end, as a user's command runs)."""
    if _patches(request) or request.node.get_closest_marker("slow"):
        return
    from tracelab.ingest import cache

    monkeypatch.setattr(cache, "MIN_BYTES", 0)


_OWN = {"_own_cache_dir", "_one_process", "_small_traces_cached"}  # this file's autouse fixtures


def _patches(request) -> bool:
    """Whether the test or a fixture it uses (other than this file's) requests monkeypatch; True
    where pytest no longer keeps the fixture closure where it did (a private attribute): the
    test then keeps tracelab's own threshold, as a patching one does."""
    info = getattr(request.node, "_fixtureinfo", None)
    if info is None or not hasattr(info, "name2fixturedefs"):
        return True
    return any("monkeypatch" in d.argnames for name, defs in info.name2fixturedefs.items() if name not in _OWN
               for d in defs) or "monkeypatch" in info.argnames


@pytest.fixture(autouse=True)
def _one_process(request, monkeypatch) -> None:
    """load_many with no `workers` given parses in the test's own process, as promise.one_process
    does for the corpus: a worker pool per call forks this process (pandas, torch) and costs
    ~0.17 s of CPU on a 2-file run, ~380 pools in the default run. A test that passes `workers=`
    keeps its pool; so do a test marked `pool`, every slow test (end to end, as a user's command
    runs) and a `tracelab` subprocess."""
    if request.node.get_closest_marker("pool") or request.node.get_closest_marker("slow"):
        return
    from tracelab.ingest import loading

    parse_all = loading._parse_all
    monkeypatch.setattr(loading, "_parse_all", lambda files, workers, *rest: parse_all(files, workers or 1, *rest))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    """helpers.shared_trace reads the running test's marks (before its fixtures, which may call it)."""
    import helpers

    helpers.RUNNING_MARKS = {mark.name for mark in item.iter_markers()}


@pytest.fixture(scope="session")
def chromium() -> str:
    """The headless browser the HTML tests open reports in; the test skips, saying so, without one."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    return found


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (pyproject's addopts): a worker per core, at most 4 (each holds pandas and torch).
    None, this process alone, where the run selects the tests marked `alone` (slow tests whose
    bound is the machine's wall time, e.g. a browser's render: nothing heavy may run beside them),
    as `-m slow` does; `-m "slow and not alone"` runs the other slow tests in a worker per core."""
    markexpr = config.option.markexpr
    if not markexpr or _selects_alone(markexpr):
        return 0
    return max(1, min(4, len(os.sched_getaffinity(0))))


def _selects_alone(markexpr: str) -> bool:
    """Whether `-m markexpr` selects a test marked both slow and alone, by pytest's own parser of
    -m (a private module: where a pytest release moves it, by the words, erring towards one process)."""
    try:
        from _pytest.mark.expression import Expression
    except ImportError:
        return "not alone" not in markexpr and "not slow" not in markexpr
    return bool(Expression.compile(markexpr).evaluate(lambda name, **_: name in ("slow", "alone")))
