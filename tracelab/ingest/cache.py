"""A Parquet cache of parsed traces, so a big trace is parsed once.

It holds the parsers' output, before classification (tracelab.load classifies after
the cache, so user patterns apply), under Options.cache_dir ($TRACELAB_CACHE_DIR, default
~/.cache/tracelab). Only files of at least MIN_BYTES are cached (small ones parse
faster than a cache read; a gzip file counts inflated). Options.cache False (TRACELAB_CACHE=0)
switches it off; without pyarrow it is not used. The trace file itself is only ever read.

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

Bounded and private: the folder, its checks and eviction are tracelab/cachedir.py's (entries
this user made, least recently used first, beyond TRACELAB_CACHE_MAX_BYTES, default 4 GiB).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pandas as pd

from tracelab.ingest import cachedir
from tracelab.core.options import DEFAULT, Options
from tracelab.core.schema import HOST_KINDS, PARSED, Meta, Profile, validate, validate_host, validate_memory

MIN_BYTES = 8 * 1024 * 1024
VERSION = "9"  # bump when the schema, a parser's output or the entry's layout changes
RACY_S = 2.0
META_MAX_BYTES = 64 * 1024**2  # meta.json: a few hundred bytes per rank


def key(path: Path, parser_file: str, options: Options = DEFAULT) -> str | None:
    """The cache key of `path` as it is now, read with `options` (a step pattern changes the
    parsers' output), or None when the cache is not used for it.
    Take it before parsing and give it to put(), which checks the file did not change."""
    if not options.cache:
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
    from tracelab import __version__

    stamps = "|".join(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}"
                      for folder in (Path(parser_file).parent, Path(__file__).parent)  # parsers, schema
                      for f in sorted(folder.glob("*.py")))
    return f"{__version__}|{VERSION}|{stamps}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def get(entry_key: str, options: Options) -> list[Profile] | None:
    """The cached profiles under `entry_key` in options.cache_dir, or None when absent or when the entry does not
    validate (an entry damaged, or written by hand: meta.json `[]` would drop every rank of
    the file, `{"rank": "zero"}` mislabel one); such an entry is removed, so the next put
    writes it again."""
    return cachedir.read_entry(options.cache_dir, entry_key, _read)


def _read(fd: int) -> list[Profile]:
    """The profiles of the open entry `fd`; an error where it is not what put() wrote."""
    metas = _metas(json.loads(cachedir.read(fd, "meta.json", META_MAX_BYTES)))
    profiles = [Profile(validate(_frame(fd, f"{i}.parquet"), PARSED), meta, host=_host(fd, f"{i}.host.parquet"),
                        memory=_memory(fd, f"{i}.memory.parquet"))
                for i, meta in enumerate(metas)]
    if cachedir.exists(fd, f"{len(metas)}.parquet"):
        raise ValueError("more parts than metas")
    return profiles


def _frame(fd: int, name: str) -> pd.DataFrame:
    with cachedir.open_file(fd, name) as f:
        return pd.read_parquet(f)


def _metas(doc) -> list[Meta]:
    """meta.json as put() writes it: a non-empty list of objects naming their path and source,
    each a Meta (Meta.of checks the types: a rank "zero" is a TraceFormatError); ValueError
    where it is no such list."""
    if not isinstance(doc, list) or not doc or not all(isinstance(m, dict) for m in doc):
        raise ValueError("meta.json is not a non-empty list of objects")
    if not all("path" in meta and "source" in meta for meta in doc):
        raise ValueError("meta without path or source")
    return [Meta.of(meta) for meta in doc]


def _host(fd: int, name: str) -> pd.DataFrame | None:
    """The cached host frame, None where the parser gave none (no file)."""
    if not cachedir.exists(fd, name):
        return None
    host = _frame(fd, name)
    return validate_host(host.assign(kind=host["kind"].cat.set_categories(HOST_KINDS)))


def _memory(fd: int, name: str) -> pd.DataFrame | None:
    """The cached memory frame, None where the trace had none (no file)."""
    return validate_memory(_frame(fd, name)) if cachedir.exists(fd, name) else None


def put(entry_key: str, path: Path, parser_file: str, profiles: list[Profile], options: Options) -> None:
    """Store profiles under `entry_key` (taken before parsing with `options`) if the file is
    still what was parsed and settled; then bound the cache. A failure to write never fails the load."""
    try:
        st = path.stat()
        settled = time.time() - max(st.st_mtime, st.st_ctime) > RACY_S
        if not settled or key(path, parser_file, options) != entry_key:
            return
        with cachedir.opened(options.cache_dir) as folder:
            if folder is not None:
                _write(folder, entry_key, profiles)
                cachedir.bound(folder, entry_key, options.cache_max_bytes)
    except OSError:
        pass


def _write(folder: cachedir.Folder, entry_key: str, profiles: list[Profile]) -> None:
    with cachedir.staging(folder, entry_key) as fd:
        for i, p in enumerate(profiles):
            _put_frame(fd, f"{i}.parquet", p.events)
            if p.host is not None:  # the host frame beside the events (schema.HOST_COLUMNS)
                _put_frame(fd, f"{i}.host.parquet", p.host)
            if p.memory is not None:  # the memory frame (schema.MEMORY_COLUMNS)
                _put_frame(fd, f"{i}.memory.parquet", p.memory)
        with cachedir.create(fd, "meta.json") as f:
            f.write(json.dumps([p.meta.to_dict() for p in profiles], default=str).encode())


def _put_frame(fd: int, name: str, frame: pd.DataFrame) -> None:
    with cachedir.create(fd, name) as f:
        frame.to_parquet(f, index=False)
