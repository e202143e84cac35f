"""A cache of each rank's digests, so a command over ranks already read parses no trace again.

Every command that loads without the events (load_many's `keep_events=False`) needs of a rank
only its digests (reports/ranks.RANK_DIGESTS, made by load_many's `reduce` in the worker that
parsed it). They are kept here, one entry per trace file, whichever command made them: a
`breakdown` after a `report` reads the digests the report wrote. An entry is a folder of parts,
each `blake2b(payload) + payload`, the payload a pickle of the Profiles `_parse_classified`
returned (meta, no rows), the warnings the parse raised (said again on a hit), the path parsed,
and the digests, each pickled on its own (a hit unpickles only those asked for), keyed by what
the digest is (`fn_key`: its function's pickled form, its parameters with it), not by the name
a command gives it. The entry is made with FILE, the
digests of the command that first read the trace; a later command that asks for digests the
entry lacks parses the trace once, makes only those, and adds them as a part of their own
(`digests-KEY.pickle`, written whole and renamed in; a part there is never replaced). A hit costs
a stat, a read and an unpickle of a part or two (milliseconds) where parsing a 77k-event Kineto
rank costs ~0.3 s of CPU.

Never stale. The entry's key holds what the Parquet cache's does (tracelab/ingest/cache.py: the
file's absolute path, device, inode, size, mtime_ns and ctime_ns; the options that change a
parser's output), and more, since digests also depend on the analyses: the size and mtime of
every module of the installed tracelab (core, ingest, parsers, reports), its version, Python's,
pandas' and numpy's; the user's classify patterns; the identity of the Inductor provenance file
beside the trace, where one is. As in cache.py, a file that changed while it was parsed, or
within RACY_S before a part would be written, is not cached.

Never wrong. A part that does not match its checksum, does not unpickle, holds anything but
Profiles with a meta, or a digest asked for without one value per profile, or whose ranks differ
from the entry's first part, makes the entry a miss: removed, and the trace parsed again.

Never code from elsewhere. A pickle names functions to call, so an entry is read only where
nobody but this user could have written it: from the private cache folder, through checked
file descriptors, a regular file of this user's (tracelab/ingest/cachedir.py); and it is
unpickled by tracelab/ingest/safe_pickle.py, which builds only the classes digests are made of.
Pickle stays the format because digests are frames (categoricals, nullable integers), arrays and
dataclasses of many shapes: a format without code (Arrow, msgpack) would need a schema for each
digest, kept in step with every topic.

Same switches and bounds as the Parquet cache, from the load's Options (and parts over
MAX_ENTRY_BYTES are not written): `cache` False (TRACELAB_CACHE=0) switches it off,
`cache_dir` (TRACELAB_CACHE_DIR) holds it (entries named `digests-KEY`, beside the Parquet ones),
files under cache.MIN_BYTES (inflated) are not cached, and cachedir.bound keeps the folder
to `cache_max_bytes` (TRACELAB_CACHE_MAX_BYTES), least recently used first (a hit touches its entry).
"""
from __future__ import annotations

import hashlib
import os
import pickle
import re
import sys
import time
import warnings
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from dataclasses import dataclass
from typing import Callable, Mapping

from tracelab.ingest import cache, cachedir, provenance, safe_pickle

from tracelab.core import classify
from tracelab.core.options import DEFAULT, Options
from tracelab.core.schema import Meta, Profile

PREFIX = "digests-"
FILE = "digests.pickle"  # the part an entry is made with
PART = re.compile(r"digests-[0-9a-f]{32}\.pickle")  # a part added by a later command
VERSION = "3"  # bump when the entry's layout changes
# a part larger than this is not written: digests are small by design (230 KB for a rank of the
# control trace, 2.6 MB with the what-if graph of a job of up to 16 ranks); rows kept per rank
# (inputs.with_events' `keep`, export perfetto --steps) are not digests worth a disk copy
MAX_ENTRY_BYTES = 64 * 1024**2
_SUM_BYTES = 32


def key(path: Path, reduce: Mapping[str, Callable] | None, options: Options = DEFAULT) -> str | None:
    """The entry key of `path`'s digests read with `options`, as the file is now, or None where
    the cache is off, the file too small, or a reducer of `reduce` cannot be pickled (fn_key)."""
    try:
        return _entry_key(path, options) if reduce and [fn_key(fn) for fn in reduce.values()] else None
    except (pickle.PicklingError, TypeError, AttributeError):
        return None


def _entry_key(path: Path, options: Options) -> str | None:
    if not options.cache:
        return None
    try:
        st = path.stat()
        if cache._inflated_bytes(path, st) < cache.MIN_BYTES:
            return None
        side = provenance.find(path)
    except OSError:
        return None
    parts = [VERSION, cache._identity(path, st), _code(), options.cache_text(),
             repr(classify.user_patterns()), _identity_of(side)]
    return PREFIX + cache._digest("|".join(parts))


def fn_key(fn: Callable) -> str:
    """What a digest is: its function's pickled form (the name of a function, or a class and its
    parameters: report --device's roofline is another digest), whatever name a command gives it."""
    return hashlib.sha256(pickle.dumps(fn, protocol=5)).hexdigest()[:32]


def _identity_of(path: Path | None) -> str:
    if path is None:
        return "-"
    try:
        return cache._identity(path, path.stat())
    except OSError:
        return "unreadable"


@lru_cache(maxsize=1)
def _code() -> str:
    """tracelab's version, every module's size and mtime (core, ingest, parsers, reports,
    recursively), and the interpreter's and libraries' versions a pickle of frames depends on.
    Once per process."""
    import numpy
    import pandas

    from tracelab import __version__

    folders = [Path(__file__).parent] + [Path(p) for name in ("tracelab.core", "tracelab.parsers", "tracelab.reports")
                                         for p in (find_spec(name).submodule_search_locations or [])]
    stamps = "|".join(f"{f}:{s.st_size}:{s.st_mtime_ns}" for folder in folders
                      for f in sorted(folder.rglob("*.py")) for s in (f.stat(),))
    return f"{__version__}|{sys.version}|{pandas.__version__}|{numpy.__version__}|{stamps}"


@dataclass
class _Found:
    """An entry's parts read: the first part's profiles (their meta), warnings and path parsed
    as, and the digests asked for that the parts hold, by fn_key, one value per profile."""

    profiles: list[Profile]
    caught: list[tuple[str, type[Warning]]]
    parsed_as: str
    values: dict[str, list]


def _get(entry_key: str, wanted: set[str], options: Options) -> _Found | None:
    """The digests `wanted` (fn keys) that the entry holds, its parts read until all are found or
    none is left; None where the entry is absent, or damaged (then removed)."""
    return cachedir.read_entry(options.cache_dir, entry_key, lambda fd: _read_parts(fd, wanted))


def _read_parts(fd: int, wanted: set[str]) -> _Found:
    found = _part(cachedir.read(fd, FILE, _SUM_BYTES + MAX_ENTRY_BYTES), wanted)
    for name in [] if wanted <= found.values.keys() else sorted(os.listdir(fd)):
        if not PART.fullmatch(name):
            continue
        more = _part(cachedir.read(fd, name, _SUM_BYTES + MAX_ENTRY_BYTES), wanted - found.values.keys())
        if [p.meta.rank for p in more.profiles] != [p.meta.rank for p in found.profiles]:
            raise ValueError("a part of other ranks")
        found.values.update(more.values)
        if wanted <= found.values.keys():
            break
    return found


def _part(blob: bytes, wanted: set[str]) -> _Found:
    """A part's profiles and the digests of `wanted` it holds (each digest is a pickle of its own
    within the part: only those asked for are unpickled); ValueError where it is not what put() wrote."""
    head, payload = blob[:_SUM_BYTES], blob[_SUM_BYTES:]
    if len(blob) <= _SUM_BYTES or hashlib.blake2b(payload, digest_size=_SUM_BYTES).digest() != head:
        raise ValueError("checksum")
    profiles, caught, parsed_as, digests = safe_pickle.loads(payload)
    if not isinstance(profiles, list) or not profiles or not isinstance(parsed_as, str):
        raise ValueError("no profiles")
    if not all(isinstance(p, Profile) and isinstance(p.meta, Meta) and not len(p.events) for p in profiles):
        raise ValueError("not a profile")
    cache._metas([p.meta.to_dict() for p in profiles])  # an unpickled Meta is checked as a JSON one
    if not all(isinstance(m, str) and isinstance(c, type) and issubclass(c, Warning) for m, c in caught):
        raise ValueError("warnings")
    if not isinstance(digests, dict) or not all(isinstance(v, bytes) for v in digests.values()):
        raise ValueError("digests")
    values = {k: safe_pickle.loads(digests[k]) for k in wanted if k in digests}
    if not all(isinstance(v, list) and len(v) == len(profiles) for v in values.values()):
        raise ValueError("a digest not of every profile")
    return _Found(profiles, caught, parsed_as, values)


def _profiles(found: _Found, path: Path, keys: Mapping[str, str]) -> list[Profile]:
    """The entry's profiles with the digests asked (`keys`: name -> fn key) by name, in that order,
    their path the trace as given now (the entry may have been written under another spelling of
    it), the parse's warnings said again."""
    for i, p in enumerate(found.profiles):
        p.summary = {name: found.values[k][i] for name, k in keys.items()}
        if p.meta.path == found.parsed_as:
            p.meta.path = str(path)
    for message, category in found.caught:
        warnings.warn(message, category, stacklevel=4)
    return found.profiles


def put(entry_key: str, path: Path, options: Options, profiles: list[Profile],
        caught: list[tuple[str, type[Warning]]], keys: Mapping[str, str], first: bool) -> None:
    """Store the profiles' digests named in `keys` (name -> fn key; the warnings the parse
    raised with them) under `entry_key`, taken before parsing, where the file is still what was
    parsed and settled: a new entry where `first`, else a part added to the entry; then bound
    the cache. A failure to write never fails the load."""
    try:
        st = path.stat()
        if time.time() - max(st.st_mtime, st.st_ctime) <= cache.RACY_S or _entry_key(path, options) != entry_key:
            return
        digests = {k: pickle.dumps([p.summary[name] for p in profiles], protocol=5) for name, k in keys.items()}
        kept = [Profile(p.events, p.meta) for p in profiles]
        payload = pickle.dumps((kept, caught, str(path), digests), protocol=5)
        if len(payload) > MAX_ENTRY_BYTES:
            return
        blob = hashlib.blake2b(payload, digest_size=_SUM_BYTES).digest() + payload
        with cachedir.opened(options.cache_dir) as folder:
            if folder is None:
                return
            if first:
                with cachedir.staging(folder, entry_key) as fd, cachedir.create(fd, FILE) as f:
                    f.write(blob)
            else:
                cachedir.add_file(folder, entry_key, f"digests-{cache._digest('|'.join(sorted(keys.values())))}.pickle",
                                  blob)
            cachedir.bound(folder, entry_key, options.cache_max_bytes)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass


def cached(path: Path, reduce: Mapping[str, Callable] | None, options: Options,
           parse: Callable[[Mapping[str, Callable]], list[Profile]]) -> list[Profile]:
    """The profiles with `reduce`'s digests: from the cache where an entry holds them all, else
    parse(reducers) with only the digests the entry lacks (all of them where there is none),
    the rest taken from the entry; what was made is added to the cache."""
    try:
        keys = {name: fn_key(fn) for name, fn in (reduce or {}).items()}
    except (pickle.PicklingError, TypeError, AttributeError):
        keys = {}
    entry = _entry_key(path, options) if keys else None
    if entry is None:
        return parse(reduce)
    found = _get(entry, set(keys.values()), options)
    if found is not None and set(keys.values()) <= found.values.keys():
        return _profiles(found, path, keys)
    missing = {name: fn for name, fn in reduce.items() if found is None or keys[name] not in found.values}
    with warnings.catch_warnings(record=True) as caught:
        profiles = parse(missing)
    said = [(str(w.message), w.category) for w in caught]
    for message, category in said:
        warnings.warn(message, category, stacklevel=3)
    if found is not None and [p.meta.rank for p in profiles] != [p.meta.rank for p in found.profiles]:
        with warnings.catch_warnings():  # said above
            warnings.simplefilter("ignore")
            return parse(reduce)  # the entry's ranks are not the trace's: all made here, the entry left alone
    put(entry, path, options, profiles, said, {name: keys[name] for name in missing}, first=found is None)
    for i, p in enumerate(profiles):
        p.summary = {name: p.summary[name] if name in missing else found.values[keys[name]][i] for name in reduce}
    return profiles


def entries(options: Options) -> list[Path]:
    """The digest entries in the cache folder of `options` (tests, benchmarks)."""
    with cachedir.opened(options.cache_dir) as folder:
        return sorted(folder.path.glob(PREFIX + "*")) if folder is not None else []
