from __future__ import annotations

import json
import os
import shutil
import time

import pandas as pd
import pytest
from helpers import on_shared, shared_trace, slow_after

import malformed as m
import tracelab
import tracelab.parsers.hatchet
from tracelab.ingest import cache, cachedir
from tracelab.core.options import Options

FILES = ["hta/trace_filter/sampled_rank-0.json.gz", "nsys-ai/mfu_2gpu_before.sqlite", "proton/cuda.json"]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    monkeypatch.setattr(cache, "RACY_S", RACY_S)
    return tmp_path / "cache"


RACY_S = 0.05  # files written by a test are cached once this old (cache.RACY_S)


def _settle() -> None:
    """Past the racy window, and past the coarse clock tick file timestamps are taken from."""
    time.sleep(3 * RACY_S)


@slow_after(1)
@pytest.mark.parametrize("name", [on_shared(name) for name in FILES])
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
    _settle()
    tracelab.load(path)
    os.utime(path, ns=(1, 1))
    _settle()
    tracelab.load(path)
    assert len(list(cache_dir.iterdir())) == 2


def test_cache_off(cache_dir, monkeypatch):
    monkeypatch.setenv("TRACELAB_CACHE", "0")
    tracelab.load(shared_trace(FILES[2]))
    assert not cache_dir.exists()


# ---- never stale, bounded (issue 11) ---------------------------------------------------

PROTON = m.HATCHET  # a small real proton profile; its kernel times are easy to edit in place


def _kernel_time_ns(path) -> int:
    """The first kernel node's time, straight from the JSON."""
    return m.kernel_nodes(json.loads(path.read_bytes())[0])[0]["metrics"]["time (ns)"]


def _edit_first_time_in_place(path) -> None:
    """Add 1 to the first kernel's time without changing the file's size or mtime
    (what `cp -p` or `touch -r` over an edited file leaves)."""
    st, data = path.stat(), path.read_bytes()
    old = f'"time (ns)": {_kernel_time_ns(path)}'.encode()
    new = f'"time (ns)": {_kernel_time_ns(path) + 1}'.encode()
    assert len(old) == len(new) and old in data
    with open(path, "r+b") as f:
        f.write(data.replace(old, new, 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def _time_of_first_kernel(profile, path) -> int:
    name = m.kernel_nodes(json.loads(path.read_bytes())[0])[0]["frame"]["name"]
    return int(profile.events.loc[profile.events["name"] == name, "dur_ns"].iloc[0])


def test_edited_in_place_with_size_and_mtime_restored_is_not_served_stale(cache_dir, tmp_path):
    path = tmp_path / "rank0.hatchet"
    shutil.copy(PROTON, path)
    _settle()
    before = tracelab.load(path)
    assert len(list(cache_dir.iterdir())) == 1  # cached
    _settle()
    _edit_first_time_in_place(path)
    _settle()
    after = tracelab.load(path)
    assert _time_of_first_kernel(after, path) == _kernel_time_ns(path)
    assert _time_of_first_kernel(after, path) == _time_of_first_kernel(before, path) + 1


def test_file_replaced_during_its_first_parse_is_not_cached(cache_dir, tmp_path, monkeypatch):
    path, other = tmp_path / "rank0.hatchet", tmp_path / "other.hatchet"
    shutil.copy(PROTON, path)
    shutil.copy(PROTON, other)
    _edit_first_time_in_place(other)
    _settle()
    read = tracelab.parsers.hatchet.read

    def read_then_replace(p, *args, **kwargs):
        parsed = read(p, *args, **kwargs)
        os.replace(other, path)  # the file changes while it is parsed
        return parsed

    monkeypatch.setattr(tracelab.parsers.hatchet, "read", read_then_replace)
    tracelab.load(path)
    monkeypatch.setattr(tracelab.parsers.hatchet, "read", read)
    _settle()
    again = tracelab.load(path)
    assert _time_of_first_kernel(again, path) == _kernel_time_ns(path)


def test_a_write_that_finds_its_entry_written_leaves_no_temporary_folder(cache_dir, tmp_path):
    path = tmp_path / "rank0.hatchet"
    shutil.copy(PROTON, path)
    _settle()
    profile = tracelab.parsers.hatchet.read(path)
    key = cache.key(path, tracelab.parsers.hatchet.__file__)
    for _ in range(2):  # two parallel loads of one file both write
        cache.put(key, path, tracelab.parsers.hatchet.__file__, [profile], Options.from_environment())
    assert [p.name for p in cache_dir.iterdir()] == [key]


def test_old_temporary_folders_are_removed(cache_dir, tmp_path):
    cache_dir.mkdir(mode=0o700)
    killed, writing = cache_dir / (cachedir.TMP_PREFIX + "killed"), cache_dir / (cachedir.TMP_PREFIX + "writing")
    for folder in (killed, writing):
        folder.mkdir()
        (folder / cachedir.MARK).write_bytes(b"")
        (folder / "0.parquet").write_bytes(b"partial")
    hour_ago = time.time() - 3600
    os.utime(killed, (hour_ago, hour_ago))
    path = tmp_path / "rank0.hatchet"
    shutil.copy(PROTON, path)
    _settle()
    tracelab.load(path)
    assert not killed.exists() and writing.exists()  # a write in progress is left alone


def test_size_bound_evicts_the_least_recently_used(cache_dir, tmp_path, monkeypatch):
    paths = [tmp_path / f"rank{i}.hatchet" for i in range(3)]
    for p in paths:
        shutil.copy(PROTON, p)
    _settle()
    tracelab.load(paths[0])
    (entry,) = cache_dir.iterdir()
    entry_bytes = sum(f.stat().st_size for f in entry.iterdir())
    monkeypatch.setenv("TRACELAB_CACHE_MAX_BYTES", str(int(2.5 * entry_bytes)))  # room for two
    time.sleep(0.05)
    tracelab.load(paths[1])
    time.sleep(0.05)
    tracelab.load(paths[0])  # a hit: rank0 is now the most recently used
    time.sleep(0.05)
    tracelab.load(paths[2])  # a third entry: the least recently used (rank1) goes
    metas = [json.loads((e / "meta.json").read_text())[0]["path"] for e in cache_dir.iterdir()]
    assert sorted(metas) == sorted([str(paths[0]), str(paths[2])])


@pytest.mark.slow
def test_a_process_scans_the_cache_once_per_share_of_its_limit(tmp_path, monkeypatch):
    """bound(): the first write scans; later ones only once 1/SCAN_SHARE of the limit has been
    written since the last scan (a scan stats every entry: 2,048 scans of 2,048 entries cost a
    1,024-rank report ~100 s); the cache then stays within the limit plus that share."""
    folder = tmp_path / "c"
    folder.mkdir(mode=0o700)
    entry_bytes, limit = 1000, 64_000  # share: 4,000 bytes, four entries
    monkeypatch.setattr(cachedir, "_unscanned_bytes", {})
    scans = []
    real = cachedir.evict
    monkeypatch.setattr(cachedir, "evict", lambda *a, **k: scans.append(1) or real(*a, **k))
    sizes = []
    for i in range(200):
        entry = folder / f"e{i:03d}"
        entry.mkdir()
        (entry / cachedir.MARK).write_bytes(b"")
        (entry / "0.parquet").write_bytes(b"x" * entry_bytes)
        os.utime(entry, (i, i))  # written in order: the oldest is the least recently used
        with cachedir.opened(folder) as opened:
            cachedir.bound(opened, entry.name, limit)
        sizes.append(sum(f.stat().st_size for e in folder.iterdir() for f in e.iterdir()))
    share = limit // cachedir.SCAN_SHARE
    assert len(scans) == 1 + (200 - 1) // (share // entry_bytes + 1)  # the first write, then every fifth
    assert max(sizes) <= limit + share + entry_bytes and sizes[-1] <= limit + share + entry_bytes
    assert min(int(e.name[1:]) for e in folder.iterdir()) > 0  # the oldest went first
