"""A cache of each rank's digests, so a report over ranks already read parses no trace again.

`tracelab report` (and every command that loads without the events: load_many's
`keep_events=False`) needs of a rank only its digests (reports/session.RANK_DIGESTS, made by
load_many's `reduce` in the worker that parsed it). They are kept here, one entry per trace
file: the list of Profiles `_parse_classified` returned (meta, summaries, no rows) and the
warnings the parse raised, said again on a hit. A hit costs a stat, a read and an unpickle of
the digests (milliseconds) where parsing a 77k-event Kineto rank costs ~0.4 s of CPU.

Never stale. The key holds what the Parquet cache's does (tracelab/cache.py: the file's
absolute path, device, inode, size, mtime_ns and ctime_ns; the options that change a
parser's output), and more, since digests also depend on the analyses: the size and mtime of
every module of the installed tracelab (core, parsers, reports), its version, Python's,
pandas' and numpy's; the reducers asked for (their pickled form: names, classes and
parameters, e.g. report --device); the user's classify patterns; the identity of the Inductor
provenance file beside the trace, where one is. As in cache.py, a file that changed while it
was parsed, or within RACY_S before the entry would be written, is not cached.

Never wrong. An entry is `blake2b(payload) + payload` (a pickle): a payload that does not
match its checksum, does not unpickle, or holds anything but Profiles with a meta and
exactly the digests asked for is a miss, removed, and the trace is parsed again.

Never code from elsewhere. A pickle names functions to call, so an entry is read only where
nobody but this user could have written it: from the private cache folder, through checked
file descriptors, a regular file of this user's (tracelab/cachedir.py); and it is unpickled
by tracelab/safe_pickle.py, which builds only the classes digests are made of. Pickle stays
the format because digests are frames (categoricals, nullable integers), arrays and
dataclasses of many shapes: a format without code (Arrow, msgpack) would need a schema for
each digest, kept in step with every topic.

Same switches and bounds as the Parquet cache, from the load's Options (and entries over
MAX_ENTRY_BYTES are not written): `cache` False (TRACELAB_CACHE=0) switches it off,
`cache_dir` (TRACELAB_CACHE_DIR) holds it (entries named `digests-KEY`, beside the Parquet ones),
files under cache.MIN_BYTES (inflated) are not cached, and cachedir.bound keeps the folder
to `cache_max_bytes` (TRACELAB_CACHE_MAX_BYTES), least recently used first (a hit touches its entry).
"""
from __future__ import annotations

import hashlib
import pickle
import sys
import time
import warnings
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Callable, Mapping

from tracelab.ingest import cache, cachedir, provenance, safe_pickle

from tracelab.core import classify
from tracelab.core.options import DEFAULT, Options
from tracelab.core.schema import Meta, Profile

PREFIX = "digests-"
FILE = "digests.pickle"
VERSION = "2"  # bump when the entry's layout changes
# an entry larger than this is not written: digests are small by design (230 KB for a rank of the
# control trace, 2.6 MB with the what-if graph of a job of up to 16 ranks); rows kept per rank
# (inputs.with_events' `keep`, export perfetto --steps) are not digests worth a disk copy
MAX_ENTRY_BYTES = 64 * 1024**2
_SUM_BYTES = 32


def key(path: Path, reduce: Mapping[str, Callable] | None, options: Options = DEFAULT) -> str | None:
    """The entry key of `path`'s digests by `reduce` read with `options`, as the file is now,
    or None where the cache is off, the file too small, or the reducers cannot be pickled."""
    if not options.cache or not reduce:
        return None
    try:
        st = path.stat()
        if cache._inflated_bytes(path, st) < cache.MIN_BYTES:
            return None
        reducers = hashlib.sha256(pickle.dumps(sorted(reduce.items(), key=lambda kv: kv[0]), protocol=5)).hexdigest()
        side = provenance.find(path)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        return None
    parts = [VERSION, cache._identity(path, st), _code(), options.cache_text(), reducers,
             repr(classify.user_patterns()), _identity_of(side)]
    return PREFIX + cache._digest("|".join(parts))


def _identity_of(path: Path | None) -> str:
    if path is None:
        return "-"
    try:
        return cache._identity(path, path.stat())
    except OSError:
        return "unreadable"


@lru_cache(maxsize=1)
def _code() -> str:
    """tracelab's version, every module's size and mtime (core, parsers, reports, recursively), and
    the interpreter's and libraries' versions a pickle of frames depends on. Once per process."""
    import numpy
    import pandas

    from tracelab import __version__

    folders = [Path(__file__).parent] + [Path(p) for name in ("tracelab.parsers", "tracelab.reports")
                                         for p in (find_spec(name).submodule_search_locations or [])]
    stamps = "|".join(f"{f}:{s.st_size}:{s.st_mtime_ns}" for folder in folders
                      for f in sorted(folder.rglob("*.py")) for s in (f.stat(),))
    return f"{__version__}|{sys.version}|{pandas.__version__}|{numpy.__version__}|{stamps}"


def get(entry_key: str, path: Path, names: set[str], options: Options) -> list[Profile] | None:
    """The profiles cached under `entry_key` in options.cache_dir with their warnings said again, or None (absent,
    or damaged: then removed). `names`: the digests each profile must hold; `path`: the trace as
    given now, which the profiles' meta path becomes (the entry may have been written under
    another spelling of it)."""
    found = cachedir.read_entry(options.cache_dir, entry_key,
                                lambda fd: _checked(cachedir.read(fd, FILE, _SUM_BYTES + MAX_ENTRY_BYTES), names))
    if found is None:
        return None
    profiles, caught, parsed_as = found
    for p in profiles:
        if p.meta.path == parsed_as:
            p.meta.path = str(path)
    for message, category in caught:
        warnings.warn(message, category, stacklevel=3)
    return profiles


def _checked(blob: bytes, names: set[str]) -> tuple[list[Profile], list, str]:
    """The entry's (profiles, warnings, path parsed as); ValueError where it is not what put() wrote."""
    head, payload = blob[:_SUM_BYTES], blob[_SUM_BYTES:]
    if len(blob) <= _SUM_BYTES or hashlib.blake2b(payload, digest_size=_SUM_BYTES).digest() != head:
        raise ValueError("checksum")
    profiles, caught, parsed_as = safe_pickle.loads(payload)
    if not isinstance(profiles, list) or not profiles or not isinstance(parsed_as, str):
        raise ValueError("no profiles")
    for p in profiles:
        if not isinstance(p, Profile) or not isinstance(p.meta, Meta) or set(p.summary) != names or len(p.events):
            raise ValueError("not a profile of these digests")
    cache._metas([p.meta.to_dict() for p in profiles])  # an unpickled Meta is checked as a JSON one
    if not all(isinstance(m, str) and isinstance(c, type) and issubclass(c, Warning) for m, c in caught):
        raise ValueError("warnings")
    return profiles, caught, parsed_as


def put(entry_key: str, path: Path, reduce: Mapping[str, Callable], options: Options, profiles: list[Profile],
        caught: list[tuple[str, type[Warning]]]) -> None:
    """Store the profiles (and the warnings their parse raised) under `entry_key`, taken before
    parsing, where the file is still what was parsed and settled; then bound the cache. A
    failure to write never fails the load."""
    try:
        st = path.stat()
        if time.time() - max(st.st_mtime, st.st_ctime) <= cache.RACY_S or key(path, reduce, options) != entry_key:
            return
        payload = pickle.dumps((profiles, caught, str(path)), protocol=5)
        if len(payload) > MAX_ENTRY_BYTES:
            return
        with cachedir.opened(options.cache_dir) as folder:
            if folder is not None:
                with cachedir.staging(folder, entry_key) as fd, cachedir.create(fd, FILE) as f:
                    f.write(hashlib.blake2b(payload, digest_size=_SUM_BYTES).digest() + payload)
                cachedir.bound(folder, entry_key, options.cache_max_bytes)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass


def cached(path: Path, reduce: Mapping[str, Callable] | None, options: Options,
           parse: Callable[[], list[Profile]]) -> list[Profile]:
    """parse()'s profiles, from the cache where an entry of these digests is there, else parsed
    (its warnings recorded, raised again, and kept with the entry)."""
    entry = key(path, reduce, options)
    if entry is None:
        return parse()
    if (hit := get(entry, path, set(reduce), options)) is not None:
        return hit
    with warnings.catch_warnings(record=True) as caught:
        profiles = parse()
    said = [(str(w.message), w.category) for w in caught]
    for message, category in said:
        warnings.warn(message, category, stacklevel=3)
    put(entry, path, reduce, options, profiles, said)
    return profiles


def entries(options: Options) -> list[Path]:
    """The digest entries in the cache folder of `options` (tests, benchmarks)."""
    with cachedir.opened(options.cache_dir) as folder:
        return sorted(folder.path.glob(PREFIX + "*")) if folder is not None else []

