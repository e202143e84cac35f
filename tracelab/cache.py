"""A Parquet cache of parsed traces, so a big trace is parsed once.

Keyed by the file's absolute path, size and modification time, the tracelab
version and the size and modification time of every module in the parsers' folder and in tracelab/
(schema.py shapes the rows too); it holds the parsers' output, before classification
(tracelab.load classifies after the cache, so user patterns apply); stored under $TRACELAB_CACHE_DIR (default ~/.cache/tracelab). Only
files of at least MIN_BYTES are cached (small ones parse faster than a cache
read). Set TRACELAB_CACHE=0 to switch it off. Needs pyarrow; without it the
cache is simply not used. The trace file itself is only ever read.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import pandas as pd

from .schema import PARSED, Profile, validate

MIN_BYTES = 8 * 1024 * 1024
VERSION = "3"  # bump when the schema or a parser's output changes


def enabled(path: Path) -> bool:
    if os.environ.get("TRACELAB_CACHE", "1") == "0":
        return False
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return path.stat().st_size >= MIN_BYTES


def _dir() -> Path:
    return Path(os.environ.get("TRACELAB_CACHE_DIR", Path.home() / ".cache" / "tracelab"))


def _key(path: Path, parser_file: str) -> str:
    """The trace's identity and the parser's: an edited parser never reads a stale entry."""
    from . import __version__

    st = path.stat()
    code = "|".join(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}"
                    for folder in (Path(parser_file).parent, Path(__file__).parent)  # parsers, classify, schema
                    for f in sorted(folder.glob("*.py")))
    ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{__version__}|{VERSION}|{code}"
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def get(path: Path, parser_file: str) -> list[Profile] | None:
    """The cached profiles of `path`, or None when absent, stale or unreadable."""
    entry = _dir() / _key(path, parser_file)
    try:
        metas = json.loads((entry / "meta.json").read_text())
        return [Profile(validate(pd.read_parquet(entry / f"{i}.parquet"), PARSED), meta)
                for i, meta in enumerate(metas)]
    except (OSError, ValueError, KeyError):
        return None


def put(path: Path, parser_file: str, profiles: list[Profile]) -> None:
    """Store profiles; a failure to write the cache never fails the load."""
    final = _dir() / _key(path, parser_file)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
        for i, p in enumerate(profiles):
            p.events.to_parquet(tmp / f"{i}.parquet", index=False)
        (tmp / "meta.json").write_text(json.dumps([p.meta for p in profiles], default=str))
        os.replace(tmp, final)
    except OSError:
        pass
