"""A Parquet cache of parsed traces, so a big trace is parsed once.

It holds the parsers' output, before classification (tracelab.load classifies after
the cache, so user patterns apply), under $TRACELAB_CACHE_DIR (default
~/.cache/tracelab). Only files of at least MIN_BYTES are cached (small ones parse
faster than a cache read; a gzip file counts inflated). TRACELAB_CACHE=0 switches it off; without pyarrow it is
not used. The trace file itself is only ever read.

Never stale. An entry is keyed by the file's identity as git's index keys a file:
absolute path, device, inode, size, mtime_ns and ctime_ns. A file edited in place
with its size and mtime put back (`cp -p`, `rsync -a`, `touch -r`) still has a new
ctime, which no user call can set back; a file replaced by another has a new inode
and ctime. Stat costs microseconds where hashing the content costs about as much as
reading the file (benchmarks/RESULTS.md, "cache key"). The key also holds the tracelab
version, VERSION and the size and mtime of every module of tracelab/ and the parsers,
so an edited parser never reads an entry of the old one. The identity is taken before
parsing and again after: a file that changed meanwhile, or changed within RACY_S
before the entry would be written (timestamps are coarser than writes, git's "racy"
case), is not cached.

Bounded. After a write, least recently used entries (a hit touches its entry) are
removed until the cache holds at most TRACELAB_CACHE_MAX_BYTES (default 4 GiB);
`.tmp-*` folders of writes killed more than STALE_TMP_S ago are removed. That scan
stats every entry, so a process scans on its first write and then each time it has
written 1/SCAN_SHARE of the limit since its last scan (`bound`): between scans the cache
may exceed the limit by that share per writing process, and a first report of 1,024
ranks (2,048 entries) scans ~20 times instead of 2,048 (~100 s of stat calls).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd

from .options import DEFAULT, Options
from .schema import HOST_KINDS, PARSED, Profile, validate, validate_host, validate_memory

MIN_BYTES = 8 * 1024 * 1024
VERSION = "7"  # bump when the schema or a parser's output changes
DEFAULT_MAX_BYTES = 4 * 1024**3
RACY_S = 2.0
STALE_TMP_S = 15 * 60
SCAN_SHARE = 16  # a process scans to bound the cache each time it has written 1/16 of the limit
_unscanned_bytes: dict[str, int] = {}  # per cache folder: bytes this process wrote since its last scan


def _dir() -> Path:
    return Path(os.environ.get("TRACELAB_CACHE_DIR", Path.home() / ".cache" / "tracelab"))


def max_bytes() -> int:
    from .limits import env_int

    return env_int("TRACELAB_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES)


def key(path: Path, parser_file: str, options: Options = DEFAULT) -> str | None:
    """The cache key of `path` as it is now, read with `options` (a step pattern changes the
    parsers' output), or None when the cache is not used for it.
    Take it before parsing and give it to put(), which checks the file did not change."""
    if os.environ.get("TRACELAB_CACHE", "1") == "0":
        return None
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return None
    st = path.stat()
    if _inflated_bytes(path, st) < MIN_BYTES:
        return None
    return _digest(f"{_identity(path, st)}|{_code(parser_file)}|{options.cache_text()}")


def _inflated_bytes(path: Path, st: os.stat_result) -> int:
    """The bytes a parser reads: a gzip file's size inflated, from its trailer (ISIZE, the last
    member's size mod 4 GiB: a lower bound), else its size. A rank's .json.gz of 1.7 MB holds
    35 MB of JSON that take 0.3 s to parse, against milliseconds for its Parquet entry."""
    if st.st_size < 18:  # gzip's header and trailer
        return st.st_size
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return st.st_size
        f.seek(-4, os.SEEK_END)
        return max(st.st_size, int.from_bytes(f.read(4), "little"))


def inflated_size(path: Path) -> int:
    """_inflated_bytes of a file by its path (0 when it cannot be read: the load says why)."""
    try:
        return _inflated_bytes(Path(path), Path(path).stat())
    except OSError:
        return 0


def _identity(path: Path, st: os.stat_result) -> str:
    return f"{path.resolve()}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}"


def _code(parser_file: str) -> str:
    """tracelab's version and its modules' sizes and mtimes: an edited parser never reads a stale entry."""
    from . import __version__

    stamps = "|".join(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}"
                      for folder in (Path(parser_file).parent, Path(__file__).parent)  # parsers, schema
                      for f in sorted(folder.glob("*.py")))
    return f"{__version__}|{VERSION}|{stamps}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def get(entry_key: str) -> list[Profile] | None:
    """The cached profiles under `entry_key`, or None when absent or when the entry does not
    validate (an entry damaged, or written by hand: meta.json `[]` would drop every rank of
    the file, `{"rank": "zero"}` mislabel one); such an entry is removed, so the next put
    writes it again."""
    entry = _dir() / entry_key
    if not entry.is_dir():
        return None
    try:
        metas = _metas(json.loads((entry / "meta.json").read_bytes()))
        profiles = [Profile(validate(pd.read_parquet(entry / f"{i}.parquet"), PARSED), meta,
                            host=_host(entry / f"{i}.host.parquet"), memory=_memory(entry / f"{i}.memory.parquet"))
                    for i, meta in enumerate(metas)]
        if (entry / f"{len(metas)}.parquet").exists():
            raise ValueError("more parts than metas")
    except Exception:  # noqa: BLE001 - whatever is wrong with an entry, the trace itself is the answer
        shutil.rmtree(entry, ignore_errors=True)
        return None
    try:
        os.utime(entry)  # recently used: evicted last
    except OSError:
        pass
    return profiles


def _metas(doc) -> list[dict]:
    """meta.json as put() writes it: a non-empty list of objects whose path and source are
    text and whose rank and world size are whole numbers or null; ValueError otherwise."""
    if not isinstance(doc, list) or not doc or not all(isinstance(m, dict) for m in doc):
        raise ValueError("meta.json is not a non-empty list of objects")
    for meta in doc:
        if not all(isinstance(meta.get(k), str) for k in ("path", "source")):
            raise ValueError("meta without path or source")
        if any(meta.get(k) is not None and type(meta.get(k)) is not int for k in ("rank", "world_size")):
            raise ValueError("meta rank or world_size not a whole number")
    return doc


def _host(path: Path) -> pd.DataFrame | None:
    """The cached host frame, None where the parser gave none (no file)."""
    if not path.exists():
        return None
    host = pd.read_parquet(path)
    return validate_host(host.assign(kind=host["kind"].cat.set_categories(HOST_KINDS)))


def _memory(path: Path) -> pd.DataFrame | None:
    """The cached memory frame, None where the trace had none (no file)."""
    return validate_memory(pd.read_parquet(path)) if path.exists() else None


def put(entry_key: str, path: Path, parser_file: str, profiles: list[Profile]) -> None:
    """Store profiles under `entry_key` (taken before parsing) if the file is still what was
    parsed and settled; then bound the cache. A failure to write never fails the load."""
    try:
        st = path.stat()
        settled = time.time() - max(st.st_mtime, st.st_ctime) > RACY_S
        if not settled or key(path, parser_file) != entry_key:
            return
        _write(_dir() / entry_key, profiles)
        bound(_dir(), entry_key)
    except OSError:
        pass


def _write(final: Path, profiles: list[Profile]) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
    try:
        for i, p in enumerate(profiles):
            p.events.to_parquet(tmp / f"{i}.parquet", index=False)
            if p.host is not None:  # the host frame beside the events (schema.HOST_COLUMNS)
                p.host.to_parquet(tmp / f"{i}.host.parquet", index=False)
            if p.memory is not None:  # the memory frame (schema.MEMORY_COLUMNS)
                p.memory.to_parquet(tmp / f"{i}.memory.parquet", index=False)
        (tmp / "meta.json").write_text(json.dumps([p.meta for p in profiles], default=str))
        os.replace(tmp, final)  # fails when a parallel load wrote it first: theirs is as good
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bound(folder: Path, written_key: str) -> list[str]:
    """After this process wrote the entry `written_key`: evict (a scan of every entry) on its
    first write to `folder`, then only once it has written more than max_bytes() / SCAN_SHARE
    since its last scan; the names removed."""
    limit = max_bytes()
    written = _unscanned_bytes.get(str(folder))
    entry = folder / written_key
    size = _size(entry) if entry.is_dir() else 0
    if written is not None and written + size <= limit // SCAN_SHARE:
        _unscanned_bytes[str(folder)] = written + size
        return []
    _unscanned_bytes[str(folder)] = 0
    return evict(folder, limit, keep=written_key)


def evict(folder: Path, limit_bytes: int, keep: str | None = None) -> list[str]:
    """Remove `.tmp-*` folders older than STALE_TMP_S, then the least recently used entries
    until the entries hold at most `limit_bytes` (never `keep`); the names removed."""
    now, removed, entries = time.time(), [], []
    for child in folder.iterdir():
        age_s = now - child.stat().st_mtime
        if child.name.startswith(".tmp-"):
            if age_s > STALE_TMP_S:
                shutil.rmtree(child, ignore_errors=True)
                removed.append(child.name)
        elif child.is_dir():
            entries.append((child.stat().st_mtime, _size(child), child))
    total = sum(size for _, size, _ in entries)
    for _, size, child in sorted(entries, key=lambda e: e[0]):
        if total <= limit_bytes:
            break
        if child.name != keep:
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child.name)
            total -= size
    return removed


def _size(entry: Path) -> int:
    return sum(f.stat().st_size for f in entry.iterdir())
