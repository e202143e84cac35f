from __future__ import annotations

import os
import shutil

import pandas as pd
import pytest
from conftest import shared_trace

import tracelab
from tracelab import cache

FILES = ["hta/trace_filter/sampled_rank-0.json.gz", "nsys-ai/mfu_2gpu_before.sqlite", "proton/cuda.json"]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    return tmp_path / "cache"


@pytest.mark.parametrize("name", FILES)
def test_cached_load_equals_parsed_load(name, cache_dir, monkeypatch):
    path = shared_trace(name)
    first = tracelab.load_many(path)  # the nsys file holds two processes: two ranks
    assert len(list(cache_dir.iterdir())) == 1
    # a second load must come from the cache: make the parsers unusable
    for parser in ("chrome", "nsys", "hatchet"):
        monkeypatch.setattr(f"tracelab.parsers.{parser}.read",
                            lambda *_: pytest.fail("parsed again instead of reading the cache"))
    second = tracelab.load_many(path)
    assert [p.rank for p in second] == [p.rank for p in first]
    for a, b in zip(first, second):
        pd.testing.assert_frame_equal(a.events, b.events)


def test_changed_file_is_parsed_again(cache_dir, tmp_path):
    path = tmp_path / "rank0.json.gz"
    shutil.copy(shared_trace(FILES[0]), path)
    tracelab.load(path)
    os.utime(path, ns=(1, 1))
    tracelab.load(path)
    assert len(list(cache_dir.iterdir())) == 2


def test_cache_off(cache_dir, monkeypatch):
    monkeypatch.setenv("TRACELAB_CACHE", "0")
    tracelab.load(shared_trace(FILES[2]))
    assert not cache_dir.exists()
