"""Fixtures for every test module; what modules share besides fixtures is in helpers.py."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _session_cache_dir(tmp_path_factory) -> Iterator[Path]:
    """The run's own Parquet and digest caches, never the user's ~/.cache/tracelab: one folder
    for every xdist worker of the run (the parent of their base folders), so that a trace two
    test files read is parsed once. Two workers writing one entry is what tracelab allows
    (tracelab/ingest/cachedir.staging: the first rename wins, the other is as good).
    TRACELAB_CACHE_DIR names it for the whole session, so that a module's fixtures (made before
    any fixture of a test) use it too; a test that sets its own still wins, until its end."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "tracelab-cache"
    folder.mkdir(mode=0o700, exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRACELAB_CACHE_DIR", str(folder))
        yield folder


@pytest.fixture(scope="session", autouse=True)
def _one_process() -> Iterator[None]:
    """load_many with no `workers` given parses in the test's own process, as promise.one_process
    does for the corpus: a worker pool per call forks this process (pandas, torch) and costs
    ~0.17 s of CPU on a 2-file run, ~380 pools in the default run; for the whole session, so
    that a module's fixtures (made before any fixture of a test) parse in it too. A test that
    passes `workers=` keeps its pool; so do a test marked `pool`, every slow test (end to end, as
    a user's command runs; a module fixture made for one too) and a `tracelab` subprocess."""
    from tracelab.ingest import loading

    import helpers

    parse_all = loading._parse_all

    def in_this_process(files, workers, *rest):
        pooled = workers or helpers.RUNNING_MARKS & {"pool", "slow"}
        return parse_all(files, workers if pooled else 1, *rest)

    with pytest.MonkeyPatch.context() as patch:  # not _Patch: the parse it makes is the same, in this process
        patch.setattr(loading, "_parse_all", in_this_process)
        yield


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    """helpers.shared_trace reads the running test's marks (before its fixtures, which may call it);
    small traces go through the run's caches from here on (_cache_small_traces), in a module fixture
    that this test makes too."""
    import helpers

    helpers.RUNNING_MARKS = {mark.name for mark in item.iter_markers()}
    _cache_small_traces(True)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item) -> None:
    """tracelab's own threshold between tests, once the test's fixtures are gone."""
    _cache_small_traces(False)


_CACHING_SMALL: list[int] = []  # tracelab's own cache.MIN_BYTES while the running test caches small traces


def _cache_small_traces(small: bool) -> None:
    """Every trace's digests and events go through the run's caches, small ones too (tracelab
    caches only files of at least cache.MIN_BYTES, where a parse costs more than a cache read):
    the default run reads the same few dozen captures in hundreds of tests, each parse and
    digest made once per run instead of once per test. The caches are never stale (keyed on the
    file, tracelab's code and the options a parse's output depends on), but a test that patches
    tracelab's code could make entries its patch decided, or read entries made without it, and
    one that sets a limit (TRACELAB_MAX_*) asks for a parse a cache hit would skip: from its
    first such patch (monkeypatch, below) the test keeps tracelab's own threshold. Setting other
    variables (a step pattern, the cache's folder, the terminal's) changes no entry it reads or
    makes. Slow tests cache them too (CI's slow stage reads the same captures in hundreds of
    end-to-end tests): a capture's first read in a test process is the parse a user's command
    makes (in a worker pool where it has several ranks: _one_process), its later reads are cache
    hits, as a user's second command on a large trace is; tests/test_cache.py and
    test_digest_cache.py check that a hit gives what the parse gave."""
    from tracelab.ingest import cache

    default = _CACHING_SMALL.pop() if _CACHING_SMALL else cache.MIN_BYTES
    cache.MIN_BYTES = 0 if small else default
    _CACHING_SMALL[:] = [default] if small else []


def _patched_code() -> None:
    """The running test patches code or a limit: tracelab's own cache threshold from now on."""
    if _CACHING_SMALL:
        _cache_small_traces(False)


def _keyless(variable: object) -> bool:
    """Whether a variable changes a parse's outcome without being part of the caches' key: the
    limits and the scheduler (tracelab/core/options.py reads them; the key holds the step pattern)."""
    from tracelab.core import options

    return variable in (options.MAX_TRACE_BYTES_ENV, options.MAX_NAME_CHARS_ENV, options.MAX_MEMORY_BYTES_ENV,
                        options.SCHEDULER_ENV)


class _Patch(pytest.MonkeyPatch):
    """pytest's monkeypatch, telling _cache_small_traces of a patch of code (an attribute, an item
    of anything but the environment, sys.path) or of a keyless variable before it is made."""

    def setattr(self, *args, **kwargs) -> None:
        _patched_code()
        super().setattr(*args, **kwargs)

    def delattr(self, *args, **kwargs) -> None:
        _patched_code()
        super().delattr(*args, **kwargs)

    def setitem(self, dic, name, value) -> None:
        if dic is not os.environ or _keyless(name):
            _patched_code()
        super().setitem(dic, name, value)

    def delitem(self, dic, name, raising: bool = True) -> None:
        if dic is not os.environ or _keyless(name):
            _patched_code()
        super().delitem(dic, name, raising)

    def syspath_prepend(self, path) -> None:
        _patched_code()
        super().syspath_prepend(path)


@pytest.fixture
def monkeypatch() -> Iterator[pytest.MonkeyPatch]:
    """pytest's own fixture, made of _Patch (setenv and delenv go through setitem and delitem)."""
    patch = _Patch()
    yield patch
    patch.undo()


@pytest.fixture(scope="session")
def twenty_late_ranks(tmp_path_factory) -> Path:
    """20 gz ranks of the late DDP capture, its late rank as rank 7 (benchmarks/make_ranks.py), made
    once per test process for the many-rank tests of every module, which only read it: a trace
    read again is read from the run's caches, as tracelab reads a large one again."""
    import helpers

    late = helpers.DATA / "ddp-2gpu-late-torch"
    run = tmp_path_factory.mktemp("twenty-late-ranks") / "run"
    helpers.benchmark("make_ranks").make(run, 20, [late / "rank0.pt.trace.json.gz"], {7: late / "rank1.pt.trace.json.gz"})
    return run


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


# the test modules whose tests import torch (the workloads, their options' checks, the model), run
# by one xdist worker: a module missing here only costs its worker torch's import, one here that
# needs none only runs beside these (tests/test_suite_layout.py checks the obvious importers are here)
TORCH_MODULES = frozenset({
    "test_decode.py", "test_imports_resolve.py", "test_launch_imports.py", "test_provenance.py",
    "test_provenance_work.py", "test_run.py", "test_run_lifecycle.py", "test_stalls.py", "test_stragglers_gpu.py",
    "test_train_speed.py", "test_user_text.py", "test_whatif.py", "test_workload_convention.py", "test_workloads.py"})


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile (pyproject's addopts), but TORCH_MODULES are one unit of work, run by one worker:
    every worker that imports torch and Inductor's settings pays ~3.3 s of CPU for them
    (~3% of the default run on 2 cores), whichever of its tests needs them. Another --dist is xdist's own."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class TorchTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return "torch" if module.rpartition("/")[2] in TORCH_MODULES else module

    return TorchTogether(config, log)
