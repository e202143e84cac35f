"""The per-rank digest cache (issue 30, tracelab/digest_cache.py): a report over ranks already
read takes each rank's digests from the cache instead of parsing its trace again. The cached
digests equal the ones made from the events (compared field by field, frames and arrays
exactly); an entry that is damaged, forged or of a file that changed since is never used."""
from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import tracelab
from tracelab.ingest import cache, digest_cache
from tracelab.cli import app
from tracelab.reports import ranks as session
from tracelab.core.options import Options
from tracelab.core.schema import RankData

DATA = Path(__file__).parent / "data"
RUN = DATA / "train-2gpu-torch"  # two real Kineto ranks of a DDP run, with steps and launches
RACY_S = 0.05


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A copy of the run folder, settled, every file cached whatever its size; and a parse counter."""
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRACELAB_CACHE", raising=False)
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    monkeypatch.setattr(cache, "RACY_S", RACY_S)
    folder = Path(shutil.copytree(RUN, tmp_path / "run"))
    time.sleep(3 * RACY_S)
    return folder


def _entries() -> list[Path]:
    """The digest entries in the cache folder of the environment (the fixture's TRACELAB_CACHE_DIR)."""
    return digest_cache.entries(Options.from_environment())


def _parses(monkeypatch) -> list[str]:
    """The files read and digested from here on, not taken from the digest cache
    (tracelab.ingest.loading._classified counted: the parse itself may come from the Parquet cache)."""
    from tracelab.ingest import loading

    seen, made = [], loading._classified
    monkeypatch.setattr(loading, "_classified", lambda path, *args: (seen.append(str(path)), made(path, *args))[1])
    return seen


CHEAP = ("sums", "timeline", "has_times")  # the tests of keys and damage need not make every digest


def _digests(folder: Path, names: tuple[str, ...] | None = None):
    return tracelab.load_many(folder, workers=1, reduce=session.rank_digests(names), keep_events=False)


def _same(a, b, where: str = "") -> None:
    """a equals b: frames and arrays exactly (NaN where NaN), dataclasses field by field."""
    assert type(a) is type(b), where
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b, obj=where)
    elif isinstance(a, pd.Series):
        pd.testing.assert_series_equal(a, b, obj=where)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        if a.dtype == object:
            assert all(pd.isna(x) and pd.isna(y) or x == y for x, y in zip(a.tolist(), b.tolist())), where
        else:
            np.testing.assert_array_equal(a, b, err_msg=where)
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b), where
    else:
        assert a == b, where


def _fresh(folder: Path) -> dict[int, dict]:
    """Every digest of every rank made from its events in this process (Input.digest's way)."""
    out = {}
    for p in tracelab.load_many(folder, workers=1):
        rank = RankData(p.events, p.meta, p.host, p.memory)
        out[p.rank] = {name: fn(rank) for name, fn in session.RANK_DIGESTS.items()}
    return out


@pytest.mark.slow
def test_a_hit_parses_nothing_and_its_digests_equal_fresh_ones(run, monkeypatch):
    first = _digests(run)
    assert len(_entries()) == 2
    parsed = _parses(monkeypatch)
    again = _digests(run)
    assert parsed == []
    fresh = _fresh(run)
    assert [p.rank for p in again] == [p.rank for p in first] == sorted(fresh)
    for p in again:
        assert list(p.summary) == list(session.RANK_DIGESTS)
        _same(p.summary, fresh[p.rank], f"rank {p.rank}")
        assert p.meta.path == str(run / f"rank{p.rank}.pt.trace.json.gz")
        assert not len(p.events) and p.host is None


@pytest.mark.parametrize("damage", ["one byte flipped", "truncated", "empty", "a digest of no rank",
                                    "a meta of a wrong type", "a meta as a dict (the old entries)",
                                    "writable by others"])
def test_a_damaged_entry_is_a_miss_and_the_trace_is_parsed(damage, run, monkeypatch):
    import hashlib
    import pickle

    fresh = _digests(run, CHEAP)
    entry = _entries()[0] / digest_cache.FILE
    blob = entry.read_bytes()
    if damage == "one byte flipped":
        at = len(blob) // 2
        entry.write_bytes(blob[:at] + bytes([blob[at] ^ 0x01]) + blob[at + 1:])
    elif damage == "truncated":
        entry.write_bytes(blob[:len(blob) // 3])
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage in ("a digest of no rank", "a meta of a wrong type", "a meta as a dict (the old entries)"):
        profiles, caught, parsed_as, digests = pickle.loads(blob[32:])  # its checksum right, its content not what was asked
        if damage == "a digest of no rank":
            digests[digest_cache.fn_key(session.RANK_DIGESTS["timeline"])] = pickle.dumps([])
        elif damage == "a meta of a wrong type":
            profiles[0].meta.__dict__["rank"] = "zero"  # as a forged pickle would hold it, past Meta's checks
        else:
            profiles[0].meta = profiles[0].meta.to_dict()
        payload = pickle.dumps((profiles, caught, parsed_as, digests))
        entry.write_bytes(hashlib.blake2b(payload, digest_size=32).digest() + payload)
    else:
        entry.chmod(0o666)
    parsed = _parses(monkeypatch)
    again = _digests(run, CHEAP)
    assert len(parsed) == 1  # the damaged rank alone
    for a, b in zip(fresh, again):
        _same(a.summary, b.summary, f"rank {a.rank}")
    assert len(_entries()) == 2 and (entry.parent / digest_cache.FILE).exists()  # written again


@pytest.mark.slow
def test_a_touched_trace_is_parsed_again(run, monkeypatch):
    _digests(run, CHEAP)
    trace = run / "rank1.pt.trace.json.gz"
    os.utime(trace, ns=(1, 1))  # same bytes, another mtime (and ctime)
    time.sleep(3 * RACY_S)
    parsed = _parses(monkeypatch)
    _digests(run, CHEAP)
    assert parsed == [str(trace)]
    assert len(_entries()) == 3  # the stale entry is never read; eviction removes it in time


def test_other_options_or_patterns_are_other_entries(run, monkeypatch):
    from tracelab.core import classify

    _digests(run, CHEAP)
    parsed = _parses(monkeypatch)
    tracelab.load_many(run, workers=1, reduce=session.rank_digests(CHEAP), keep_events=False,
                       options=Options.from_environment(step_pattern=r"ProfilerStep#(\d+)"))
    classify.use_patterns([(r"nccl", "other")])
    try:
        _digests(run, CHEAP)
    finally:
        classify.use_patterns([])
    assert len(parsed) == 4 and len(_entries()) == 6


def _asked(monkeypatch) -> list[tuple[str, list[str]]]:
    """(file, the digests made) of each parse from here on (loading._classified counted)."""
    from tracelab.ingest import loading

    seen, made = [], loading._classified
    monkeypatch.setattr(loading, "_classified", lambda path, reduce, *args: (
        seen.append((Path(path).name, sorted(reduce or {}))), made(path, reduce, *args))[1])
    return seen


@pytest.mark.slow
def test_digests_one_call_made_serve_the_next_and_only_the_missing_are_made(run, monkeypatch):
    """Entries are per trace, not per set of digests asked: a subset is a hit, a digest under
    another name is the same digest, and a call asking for more parses each rank once, making only
    the digests its entry lacks; its values equal those made from the events."""
    from tracelab.core.devices import by_option
    from tracelab.reports.roofline.roofline import RankRoofline

    _digests(run, CHEAP)
    asked = _asked(monkeypatch)
    assert [list(p.summary) for p in _digests(run, CHEAP[:2])] == [list(CHEAP[:2])] * 2
    renamed = tracelab.load_many(run, workers=1, reduce={"mine": session.RANK_DIGESTS["sums"]}, keep_events=False)
    assert asked == []
    wider = _digests(run, ("noise", *CHEAP))
    assert asked == [("rank0.pt.trace.json.gz", ["noise"]), ("rank1.pt.trace.json.gz", ["noise"])]
    asked.clear()
    again = _digests(run, ("sums", "noise"))
    assert asked == [] and all(len(list(e.glob("digests*.pickle"))) == 2 for e in _entries())
    tracelab.load_many(run, workers=1, reduce={"roofline": RankRoofline(by_option("H100"))}, keep_events=False)
    assert [names for _, names in asked] == [["roofline"]] * 2  # other parameters: another digest
    fresh = _fresh(run)
    for p, q, r in zip(wider, again, renamed):
        assert list(p.summary) == ["noise", *CHEAP]
        _same(p.summary, {n: fresh[p.rank][n] for n in p.summary}, f"rank {p.rank}")
        _same(q.summary, {n: fresh[q.rank][n] for n in q.summary}, f"rank {q.rank}")
        _same(r.summary["mine"], fresh[r.rank]["sums"], f"rank {r.rank}")


@pytest.mark.slow  # a whole report and four commands (~5 s); the rule at the library's level stays fast above
def test_commands_after_a_report_make_only_their_own_digests(run, tmp_path, monkeypatch):
    """A report makes every digest the findings read; a breakdown or idle after it makes only its
    own table's digests (the rest from the report's entries), and the same command again none."""
    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # the ranks parsed in this process, where they are counted
    result = CliRunner().invoke(app, ["report", str(run), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    asked = _asked(monkeypatch)
    for command in (["breakdown", str(run)], ["idle", str(run)], ["breakdown", str(run)], ["idle", str(run)]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 0, result.output
    own = [["breakdown", "summary"], ["idle(top=10)"]]
    assert asked == [(f"rank{r}.pt.trace.json.gz", names) for names in own for r in (0, 1)]


def test_off_switch_events_kept_small_files_and_big_entries_write_nothing(run, monkeypatch):
    tracelab.load_many(run, workers=1, reduce=session.rank_digests(CHEAP))  # events kept: the parse is needed anyway
    assert _entries() == []
    monkeypatch.setenv("TRACELAB_CACHE", "0")
    _digests(run, CHEAP)
    assert _entries() == []
    monkeypatch.setenv("TRACELAB_CACHE", "1")
    monkeypatch.setattr(digest_cache, "MAX_ENTRY_BYTES", 1000)  # digests of these ranks pickle to more
    _digests(run, CHEAP)
    assert _entries() == []
    monkeypatch.setattr(cache, "MIN_BYTES", 1 << 40)
    monkeypatch.setattr(digest_cache, "MAX_ENTRY_BYTES", 1 << 40)
    _digests(run, CHEAP)
    assert _entries() == []


@pytest.mark.slow
def test_the_report_from_the_cache_is_the_same_page(run, tmp_path, monkeypatch):
    pages = []
    for n in range(2):
        if n:  # the second report may not read a trace (nor the Parquet cache): its workers (forked) inherit this
            monkeypatch.setattr("tracelab.ingest.loading._classified",
                                lambda *_: pytest.fail("read again instead of taken from the digest cache"))
        out = tmp_path / f"report{n}.html"
        result = CliRunner().invoke(app, ["report", str(run), "-o", str(out)])
        assert result.exit_code == 0, result.output
        pages.append(out.read_text())
    assert pages[0] == pages[1]
