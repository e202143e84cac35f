"""User patterns (classify.add_pattern) apply to every load: classification happens in
tracelab.load, in the caller's process, after the Parquet cache, never in a parser."""
from __future__ import annotations

import importlib
import multiprocessing
import re
from pathlib import Path

import pytest

import tracelab
from tracelab.ingest import cache
from tracelab.core import classify, schema
from tracelab.parsers import chrome, hatchet

DATA = Path(__file__).resolve().parent / "data"
RANKS = [DATA / "decode-2gpu-torch" / f"rank{r}.pt.trace.json.gz" for r in (0, 1)]


@pytest.fixture(autouse=True)
def _patterns():
    classify.reset_patterns()
    yield
    classify.reset_patterns()


def _most_common(path: Path) -> tuple[str, str, int]:
    """(canonical kernel, its built-in class, rows), from the parser's names alone."""
    names = chrome.read(path).events["name"]
    counts = names.map(classify.canonical).value_counts()
    kernel = str(counts.index[0])
    return kernel, classify.classify_one(kernel), int(counts.iloc[0])


def _other_class(cls: str) -> str:
    return next(c for c in schema.OP_CLASSES if c not in (cls, "memory"))


def test_parsers_return_names_and_raw_facts() -> None:
    for df in (chrome.read(RANKS[0]).events, hatchet.read(DATA / "decode-1gpu-proton" / "rank0.hatchet").events):
        assert list(df.columns) == list(schema.PARSED)
        assert "kernel" not in df.columns and "op_class" not in df.columns


def test_a_pattern_added_after_caching_applies_to_the_cached_trace(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    kernel, cls, rows = _most_common(RANKS[0])
    before = tracelab.load(RANKS[0]).events  # parsed, and stored in the cache
    assert (before.loc[before["kernel"] == kernel, "op_class"] == cls).all()
    new = _other_class(cls)
    classify.add_pattern(f"^{re.escape(kernel)}$", new)
    monkeypatch.setattr(chrome, "read", lambda *_: pytest.fail("parsed again instead of reading the cache"))
    after = tracelab.load(RANKS[0]).events
    assert int((after["op_class"] == new).sum()) == rows + int((before["op_class"] == new).sum())
    assert (after.loc[after["kernel"] == kernel, "op_class"] == new).all()


@pytest.mark.slow  # about 1 s of CPU here: the default run stays under 90 s
def test_a_pattern_applies_in_load_many_with_spawned_workers(monkeypatch) -> None:
    monkeypatch.setattr(importlib.import_module("tracelab.ingest.loading"), "pool_context",
                        lambda: multiprocessing.get_context("spawn"))
    monkeypatch.setenv("TRACELAB_CACHE", "0")
    kernel, cls, _ = _most_common(RANKS[0])
    new = _other_class(cls)
    classify.add_pattern(f"^{re.escape(kernel)}$", new)
    profiles = tracelab.load_many(RANKS, workers=2)
    for p in profiles:
        names = chrome.read(p.meta.path).events["name"].map(classify.canonical)
        df = p.events
        assert int((df["kernel"] == kernel).sum()) == int((names == kernel).sum()) > 0
        assert (df.loc[df["kernel"] == kernel, "op_class"] == new).all()
