"""The test run's caching of small traces (conftest.py) never hands a test an entry its own patch
would not have made: a test that patches tracelab's code, or sets a limit the caches' key leaves
out, gets a fresh parse from that patch on; one that sets a variable the key holds keeps caching."""
from __future__ import annotations

from pathlib import Path

import pytest

import tracelab
from tracelab.core import options
from tracelab.ingest import cache
from tracelab.parsers import chrome

from helpers import DATA

TRACE = DATA / "decode-1gpu-torch" / "rank0.pt.trace.json.gz"  # 13 KB: tracelab alone caches none so small


def _cached_here(tmp_path: Path, monkeypatch) -> int:
    """The trace parsed once with the test's own cache folder; the files that parse left there."""
    monkeypatch.setenv(options.CACHE_DIR_ENV, str(tmp_path))  # a variable the caches' key holds: caching stays
    assert len(tracelab.load(TRACE).events)
    return sum(1 for f in tmp_path.rglob("*") if f.is_file())


def test_a_default_test_caches_small_traces(tmp_path, monkeypatch):
    assert cache.MIN_BYTES == 0 and _cached_here(tmp_path, monkeypatch) > 0


def test_a_patch_of_the_parser_is_what_the_next_parse_runs(tmp_path, monkeypatch):
    assert _cached_here(tmp_path, monkeypatch) > 0  # an entry a cached read would return

    def broken(*args, **kwargs):
        raise RuntimeError("the patched parser ran")

    monkeypatch.setattr(chrome, "_meta", broken)
    with pytest.raises(RuntimeError, match="the patched parser ran"):
        tracelab.load(TRACE)


@pytest.mark.parametrize("variable, value", [(options.MAX_TRACE_BYTES_ENV, "100"),
                                             (options.MAX_NAME_CHARS_ENV, "1")])
def test_a_limit_set_by_the_test_is_enforced_on_a_cached_trace(tmp_path, monkeypatch, variable, value):
    assert _cached_here(tmp_path, monkeypatch) > 0
    monkeypatch.setenv(variable, value)
    with pytest.raises(tracelab.TracelabError):
        tracelab.load(TRACE)


@pytest.mark.slow
def test_a_slow_test_caches_small_traces_too(tmp_path, monkeypatch):
    """CI's slow stage reads the same captures in hundreds of end-to-end tests: each parsed once per process."""
    assert cache.MIN_BYTES == 0 and _cached_here(tmp_path, monkeypatch) > 0
