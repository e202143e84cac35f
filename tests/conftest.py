from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
PUBLIC_TRACES = DATA / "public"  # the few public traces a plain clone's tests need
SHARED_TRACES = ROOT.parent / "shared" / "traces"  # the full collection, beside the checkout in CI
REQUIRE_SHARED = "TRACELAB_REQUIRE_SHARED"  # set (CI's full run): a missing trace fails instead of skipping


def shared_trace(relpath: str) -> Path:
    """A public trace by its path under shared/traces (e.g. "hta/cpu_only/rank-34...json.gz"):
    the copy in tests/data/public, else ../shared/traces. When neither holds it (a plain clone
    has no ../shared) the calling test skips, naming the file. Call it inside a test."""
    for root in (PUBLIC_TRACES, SHARED_TRACES):
        if (root / relpath).exists():
            return root / relpath
    reason = f"{relpath} is neither in tests/data/public nor in {SHARED_TRACES}"
    if os.environ.get(REQUIRE_SHARED):
        pytest.fail(f"{reason} ({REQUIRE_SHARED} is set)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def _worker_cache_dir(tmp_path_factory) -> Path:
    """This test process's own Parquet cache (one per xdist worker): never the user's
    ~/.cache/tracelab, never shared by two processes writing the same entry at once."""
    return tmp_path_factory.mktemp("tracelab-cache")


@pytest.fixture(autouse=True)
def _own_cache_dir(_worker_cache_dir, monkeypatch) -> None:
    """TRACELAB_CACHE_DIR is this worker's (a test that sets its own still wins)."""
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(_worker_cache_dir))


@pytest.fixture(autouse=True)
def _one_process(request, monkeypatch) -> None:
    """load_many with no `workers` given parses in the test's own process, as promise.one_process
    does for the corpus: a worker pool per call forks this process (pandas, torch) and costs
    ~0.17 s of CPU on a 2-file run, ~380 pools in the default run. A test that passes `workers=`
    keeps its pool; so do a test marked `pool`, every slow test (end to end, as a user's command
    runs) and a `tracelab` subprocess."""
    if request.node.get_closest_marker("pool") or request.node.get_closest_marker("slow"):
        return
    from tracelab import loading

    parse_all = loading._parse_all
    monkeypatch.setattr(loading, "_parse_all", lambda files, workers, *rest: parse_all(files, workers or 1, *rest))


@pytest.fixture(autouse=True, scope="session")
def _click_command_built_once():
    """typer builds the click command of an app on every call, from every command's signature
    (~14 ms: inspect evaluates each Annotated hint); the in-process CLI tests (~570 calls:
    malformed.run_cli, CliRunner) build each app's once. The app is fixed at import, so the
    command built is the same; what a command does is still looked up when it runs."""
    import typer.main
    import typer.testing

    build, built = typer.main.get_command, {}

    def once(app):
        if app not in built:
            built[app] = build(app)
        return built[app]

    patch = pytest.MonkeyPatch()
    patch.setattr(typer.main, "get_command", once)
    patch.setattr(typer.testing, "_get_command", once)
    yield
    patch.undo()


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (pyproject's addopts): a worker per core, at most 4 (each holds pandas and torch).
    None, this process alone, where the run selects the slow tests (`-m slow`): they run one
    after another as before, since their time and memory bounds assume nothing heavy beside them."""
    if "slow" in (config.option.markexpr or "").replace("not slow", ""):
        return 0
    return max(1, min(4, len(os.sched_getaffinity(0))))
