"""Format detection, rank resolution and loading of one or many trace files.

The format comes from the file's first bytes, not its name: gzip is opened
and peeked, SQLite has its magic header, a JSON list is a hatchet tree and a
JSON object a Chrome/Kineto trace.

Parsers return names and raw facts (schema.PARSED); the Parquet cache holds
those. `kernel` and `op_class` are added here, after the cache, in the process
that parsed the file (a worker of load_many), with the caller's patterns: patterns
added with `classify.add_pattern` apply to every load, cached or not, in any worker.
Per-rank reductions (load_many's `reduce`) run there too, so the caller gathers
small tables rather than re-walking every rank's events itself.
"""
from __future__ import annotations

import errno
import importlib
import multiprocessing
import os
import re
import signal
import stat
import sys
import threading
import warnings
import zlib
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from tracelab.ingest import cache, digest_cache, budget as memory, provenance, remote

from tracelab.core import classify, limits
from tracelab.core.errors import NoTracesError, RankError, TraceFormatError
from tracelab.core.limits import INT32
from tracelab.core.note import Note
from tracelab.core.options import DEFAULT, Options, applied
from tracelab.core.schema import SNAPSHOT_VERSION, Meta, Profile, RankData, SchemaError, empty, validate

# format -> parser module: read(path) -> Profile, or list[Profile] (nsys: one per process)
PARSERS: dict[str, str] = {
    "hatchet": "tracelab.parsers.hatchet",
    "chrome": "tracelab.parsers.chrome",
    "nsys": "tracelab.parsers.nsys",
    "parquet": "tracelab.parsers.parquet",  # a part of a tracelab dataset (tracelab/dataset.py)
    "snapshot": "tracelab.parsers.snapshot",  # a PyTorch memory snapshot pickle, read without running it
}

# file names a folder is searched for (run.json and friends are not traces)
TRACE_SUFFIXES = (".hatchet", ".json", ".json.gz", ".sqlite", ".sqlite3", ".parquet")
NOT_TRACES = {"run.json"}
NOT_TRACE_SUFFIXES = (".results.json", ".figures.json",  # a workload's per-rank results (tracelab.ingest.results)
                      ".provenance.json",  # Inductor's kernel -> module map of a compiled run (tracelab.ingest.provenance)
                      ".perfetto.json", ".perfetto.json.gz")  # tracelab's own merged export (report --perfetto)

# name -> function of one rank (schema.RankData: its classified events, meta and host frame),
# run where the rank is parsed (load_many); schema.OnEvents wraps a function of the events alone
Reduce = Mapping[str, Callable[[RankData], Any]]

_SQLITE_MAGIC = b"SQLite format 3\x00"
_PARQUET_MAGIC = b"PAR1"
_GZIP_MAGIC = b"\x1f\x8b"
_PEEK_STEP_BYTES = 1024**2
_BLANK = b"\xef\xbb\xbf \t\r\n"  # what may precede a JSON document
_PICKLE_PROTO, _PICKLE_VERSIONS = b"\x80", (b"\x02", b"\x03", b"\x04", b"\x05")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def _peek(path: Path, n_bytes: int = 4096) -> bytes:
    """The first `n_bytes` of the file's content (inflated when gzip, through every member)
    after its leading whitespace, however long (a valid trace after 4 KiB of spaces is still
    a trace), at most max_trace_bytes() read; empty when the file holds nothing else."""
    step = max(n_bytes, _PEEK_STEP_BYTES)  # through long whitespace in big steps
    with open(path, "rb") as f:
        pending = f.read(n_bytes)
        inflate = _gzip_member() if pending.startswith(_GZIP_MAGIC) else None
        text, seen = b"", 0
        while pending:
            try:
                chunk = inflate.decompress(pending, step) if inflate else pending
            except zlib.error as e:
                raise TraceFormatError(path, f"damaged gzip header ({e})") from None
            text, seen = (text + chunk) if text else chunk.lstrip(_BLANK), seen + len(chunk)
            if len(text) >= n_bytes:
                break
            if seen > limits.max_trace_bytes():
                raise limits.too_large(path, "holds")
            if inflate and inflate.eof:  # the next gzip member, if any
                pending, inflate = inflate.unused_data or f.read(step), _gzip_member()
            else:
                pending = (inflate.unconsumed_tail if inflate else b"") or f.read(step)
    return text[:n_bytes]


def _gzip_member():
    return zlib.decompressobj(16 + zlib.MAX_WBITS)


def detect(path: str | os.PathLike) -> str:
    """The format name of a trace file (a key of PARSERS), from its content."""
    path = Path(path)
    if not path.exists():
        raise TraceFormatError(path, "no such file")
    if path.is_dir():
        raise TraceFormatError(path, "is a folder, not a trace file")
    try:
        if path.stat().st_size == 0:
            raise TraceFormatError(path, "empty file")
        head = _peek(path)
    except OSError as e:
        raise TraceFormatError(path, f"cannot read: {e.strerror or e}") from None
    if head.startswith(_SQLITE_MAGIC):
        return "nsys"
    if head.startswith(_PARQUET_MAGIC):
        return "parquet"
    if head[:1] == _PICKLE_PROTO and head[1:2] in _PICKLE_VERSIONS:
        return "snapshot"
    text = head.lstrip(_BLANK)
    if text.startswith(b"["):
        return "hatchet"
    if text.startswith(b"{"):
        return "chrome"
    if not text:
        raise TraceFormatError(path, "holds only whitespace")
    raise TraceFormatError(path, "not a trace: expected proton hatchet JSON, Chrome/Kineto JSON or nsys SQLite")


def rank_from_name(path: str | os.PathLike) -> int | None:
    match = _RANK_IN_NAME.search(Path(path).name)
    return int(match.group(1)) if match else None


def _parse(path: Path, options: Options = DEFAULT) -> list[Profile]:
    """Parse one file with `options` (or take it from the Parquet cache), unclassified; one
    Profile per process of the file."""
    module = importlib.import_module(PARSERS[detect(path)])
    entry = cache.key(path, module.__file__, options) if not module.__name__.endswith(".parquet") else None  # columnar already
    if entry and (cached := cache.get(entry, options)) is not None:
        return cached
    result = _read(module, path, options)
    profiles = result if isinstance(result, list) else [result]
    if entry:
        cache.put(entry, path, module.__file__, profiles, options)
    return profiles


def _parse_classified(path: Path, reduce: Reduce | None = None, patterns: list[tuple[str, str]] | None = None,
                      keep_events: bool = True, options: Options = DEFAULT) -> list[Profile]:
    """_parse, then the events classified (kernel, op_class) and reduced into small tables
    (Profile.summary): in the worker that parsed the file, so the caller's process only
    gathers results. `patterns`: the caller's classify.user_patterns(), for a worker
    process that did not inherit them (spawned, or on a Dask cluster). Without
    `keep_events` only the summaries come back (the events with no rows), from the digest
    cache (tracelab/ingest/digest_cache.py) where any command made this file's digests before. `options` are
    the ones in force (core/options.applied) while it runs: the parse's limits are theirs."""
    if patterns is not None:
        classify.use_patterns(patterns)
    with applied(options):
        if keep_events or not reduce or remote.is_url(path):
            return _classified(path, reduce, keep_events, options)
        return digest_cache.cached(Path(path), reduce, options, lambda asked: _classified(path, asked, False, options))


def _classified(path: Path | str, reduce: Reduce | None, keep_events: bool, options: Options) -> list[Profile]:
    out = []
    profiles = _parse_any(path, options)
    for p in profiles:
        events = _ranked(classify.classified(_with_provenance(p, path)), p, path, len(profiles))
        events, by_launch = classify.by_launch(events, p.meta.extras.get(classify.LAUNCHED))
        p.meta.notes = [*p.meta.notes, *by_launch, *classify.comm_stream_strangers(events)]
        p.events = events.iloc[:0]  # the parser's frame let go: only the classified one is held while reducing
        rank = RankData(events, p.meta, p.host, p.memory)
        summary = {name: fn(rank) for name, fn in (reduce or {}).items()}
        out.append(Profile(events if keep_events else events.iloc[:0].copy(), p.meta, summary,
                           p.host if keep_events else None, p.memory if keep_events else None))
    return out


def _ranked(events: pd.DataFrame, profile: Profile, path: Path | str, in_file: int) -> pd.DataFrame:
    """The events with the rank _with_rank will give them where the file alone decides it (its
    own, its name, or 0 for the lone process of a file naming none), so the reducers that keep a
    rank see it; the caller's own mapping and the refusals stay with _with_rank. Unchanged where
    the file does not decide it or it is out of int32 (_with_rank says so)."""
    found = _rank_of(profile.meta, path, single=in_file == 1)
    if found is not None and INT32[0] <= found[0] <= INT32[1] and len(events):
        events["rank"] = np.int32(found[0])
    return events


def _rank_of(meta: Meta, path: Path | str, single: bool) -> tuple[int, str] | None:
    """(rank, where from) that the file decides: its own, else its name, else 0 for a lone
    file (`single`); None where it decides none."""
    if meta.rank is not None:
        return int(meta.rank), meta.rank_from or "file"
    if (named := rank_from_name(path)) is not None:
        return named, "file name"
    return (0, "default (one file)") if single else None


def _with_provenance(profile: Profile, path: Path | str) -> pd.DataFrame:
    """The events, Inductor's kernels attributed to modules where a provenance file sits beside
    the trace (tracelab/provenance.py; meta.provenance names it)."""
    if remote.is_url(path) or (found := provenance.find(Path(path))) is None:
        return profile.events
    events, notes = provenance.apply(profile.events, provenance.read(found))
    events = provenance.with_work(events, provenance.read_work(found))  # Inductor's bytes and FLOPs per kernel
    profile.meta.provenance = str(found)
    profile.meta.notes = [*profile.meta.notes, *notes]
    return events


def _parse_any(path: Path | str, options: Options = DEFAULT) -> list[Profile]:
    """_parse of a local file, or of a URL's local copy (tracelab.ingest.remote), named by its URL."""
    if not remote.is_url(path):
        return _parse(path, options)
    with remote.local_copy(path) as local:
        profiles = _parse(local, options)
    for p in profiles:
        p.meta.path = path
    return profiles


def _read(module, path: Path, options: Options):
    """module.read(path, options); what a parser lets through despite its checks (a parser's bug on
    an input nobody foresaw) still names the file, and memory running out says so."""
    try:
        return module.read(path, options)
    except MemoryError:
        raise TraceFormatError(path, "out of memory while reading it") from None
    except RecursionError:
        raise TraceFormatError(path, "nested too deeply to read") from None
    except (SchemaError, ArithmeticError, UnicodeError) as e:
        raise TraceFormatError(path, f"a value tracelab cannot hold ({type(e).__name__}: {e})") from None


def _with_rank(profile: Profile, rank: int | None, path: Path, single: bool) -> Profile:
    """Resolve the rank: the caller's, else the file's own, else its name, else 0 for a lone file."""
    meta = profile.meta
    found = (int(rank), "caller") if rank is not None else _rank_of(meta, path, single)
    if found is None:
        raise RankError(path, "the file does not say its rank and its name holds none "
                              "(name it rank<N>..., or pass the rank)")
    meta.rank, meta.rank_from = found
    if found[1] == "default (one file)":  # said, not silently assumed (HTA's rank_not_found.json.gz)
        # a snapshot is no rank of a traced job: said as what it is, not as "rank 0"
        meta.notes = [*meta.notes, Note("snapshot_rank_assumed" if meta.profiler_version == SNAPSHOT_VERSION
                                        else "rank_assumed")]
    if not INT32[0] <= meta.rank <= INT32[1]:  # the int32 rank column
        raise RankError(path, f"rank {meta.rank} (from the {meta.rank_from}) is outside int32")
    profile.events["rank"] = np.int32(meta.rank)  # one Profile is one rank; the frame is this load's own
    return profile


def load(path: str | os.PathLike, rank: int | None = None, options: Options | None = None) -> Profile:
    """Read one trace file of one rank into a Profile; `rank` overrides what the file says;
    `options` (tracelab.core.options: the step pattern, limits, caches; default: the
    environment's, Options.from_environment) as read. `path` may be an fsspec URL
    (s3://, gs://, file://, memory://...).

    A file holding several processes (an nsys capture of a multi-process run) is several
    ranks: `load` refuses it, naming them, and `load_many(path)` gives one Profile per rank.
    """
    path = path if remote.is_url(path) else Path(path)  # a URL (fsspec) is read through a local copy
    profiles = _parse_classified(path, options=options or Options.from_environment())
    if len(profiles) > 1:
        ranks = ", ".join(str(p.meta.rank) for p in profiles)
        raise RankError(path, f"holds {len(profiles)} processes (ranks {ranks}); "
                              "tracelab.load_many(path) gives one Profile per rank")
    return _with_rank(profiles[0], rank, path, single=True)


def expand(paths: Iterable[str | os.PathLike] | str | os.PathLike,
           suffixes: tuple[str, ...] = TRACE_SUFFIXES) -> list[Path]:
    """Files given, with folders replaced by the trace files inside them (sorted): those whose
    names end in `suffixes` (tracelab.ingest.session adds memory snapshots')."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[Path] = []
    for p in paths:
        if remote.is_url(p):  # fsspec: a file, or the traces under a folder
            files.extend(remote.expand_url(p, lambda name: _looks_like_trace(Path(name), suffixes)))
            continue
        p = Path(p)
        if p.is_dir():
            found = _traces_in(p, suffixes)
            if not found:
                raise NoTracesError(p, f"no trace files ({', '.join(suffixes)}) in this folder")
            files.extend(found)
        elif not p.exists():
            raise TraceFormatError(p, _broken_link(p) or "no such file or folder")
        else:
            files.append(p)
    if not files:
        raise NoTracesError(None, "no trace files given")
    return files


def _traces_in(folder: Path, suffixes: tuple[str, ...] = TRACE_SUFFIXES) -> list[Path]:
    """Trace files under `folder` (symlinked folders not followed), sorted. A subfolder that
    cannot be read is an error, not skipped: its traces would be missing without a word. So is
    a name that looks like a trace but is no regular file (a FIFO, a socket, a device, a link to
    one): judged by stat, never opened, since opening a FIFO waits for a writer."""
    def refuse(e: OSError) -> None:
        raise TraceFormatError(e.filename or folder, f"cannot read this folder: {e.strerror or e}")

    found = []
    for root, _, names in os.walk(folder, onerror=refuse):
        for f in map(Path(root).joinpath, names):
            if _looks_like_trace(f, suffixes) and (reason := _broken_link(f) or _not_regular(f)):
                raise TraceFormatError(f, reason)  # a rank missing without a word otherwise
            if _looks_like_trace(f, suffixes) and f.is_file():
                found.append(f)
    return sorted(found)


_SPECIAL = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
            (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _not_regular(path: Path) -> str | None:
    """Why a trace's name in a folder is not read, where it names no regular file (a folder
    of that name is searched like any other); None otherwise."""
    try:
        mode = path.stat().st_mode  # follows a link: one to /dev/zero is a device
    except OSError as e:
        return f"cannot read: {e.strerror or e}"
    for test, kind in _SPECIAL:
        if test(mode):
            link = f" (a link to {os.readlink(path)})" if path.is_symlink() else ""
            return (f"{kind}{link}, not a trace file: not read (it could block or never end); "
                    "move it out of the folder or replace it by the trace itself")
    return None


def _broken_link(path: Path) -> str | None:
    """Why a symbolic link cannot be followed (to nothing, or in a loop); None otherwise."""
    if not path.is_symlink():
        return None
    try:
        path.resolve(strict=True)
    except RuntimeError:  # Python < 3.13 on a loop
        return f"a symbolic link in a loop ({os.readlink(path)})"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"a symbolic link in a loop ({os.readlink(path)})"
        return f"a symbolic link to nothing ({os.readlink(path)}: {e.strerror})"
    return None


def _looks_like_trace(path: Path, suffixes: tuple[str, ...] = TRACE_SUFFIXES) -> bool:
    name = path.name.lower()
    return (name not in NOT_TRACES and name.endswith(suffixes) and not name.endswith(NOT_TRACE_SUFFIXES)
            and not name.startswith(".tmp-"))  # a dataset part being written (tracelab/dataset.py)


def load_many(
    paths: Iterable[str | os.PathLike] | str | os.PathLike,
    ranks: Mapping[str, int] | None = None,
    workers: int | None = None,
    on_loaded: Callable[[Path], None] | None = None,
    reduce: Reduce | None = None,
    keep_events: bool = True,
    options: Options | None = None,
) -> list[Profile]:
    """Read many trace files (folders are searched) in parallel processes, one Profile per rank.

    `ranks` maps a file path to its rank. Two profiles that resolve to the same
    rank raise RankError, never overwrite each other. `reduce` maps a name to a function
    of one rank, `fn(rank: schema.RankData)` (its classified events, meta and host frame; wrap
    a function of the events alone in schema.OnEvents), run in the worker that parsed it;
    each Profile's `summary` holds the
    results by name. With `keep_events=False` the events are dropped
    in the worker (no rows come back): memory then holds the summaries, not the job.
    `options` (tracelab.core.options: the step pattern, the Dask scheduler, limits, caches; default:
    the environment's, Options.from_environment) reach every worker as a value.
    """
    files = expand(paths)
    return ranked(files, parse_files(files, workers, on_loaded, reduce, keep_events,
                                     options or Options.from_environment()), ranks)


def parse_files(files: list[Path], workers: int | None = None, on_loaded: Callable[[Path], None] | None = None,
                reduce: Reduce | None = None, keep_events: bool = True, options: Options = DEFAULT
                ) -> list[list[Profile]]:
    """Each file's profiles (one per process it holds), parsed in parallel as load_many parses
    them, their ranks not yet resolved (ranked): a caller that groups files into runs after
    reading them (tracelab.ingest.session) parses every file once, in one pool."""
    return _parse_all(files, workers, on_loaded, (reduce, keep_events, options))


def ranked(files: list[Path], parsed: list[list[Profile]], ranks: Mapping[str, int] | None = None,
           single: bool | None = None) -> list[Profile]:
    """The files' profiles (parse_files) as the ranks of one job, by rank: each rank the caller's
    (`ranks`: path -> rank), else the file's own, else its name, else 0 for the lone file
    (`single`, default: one file of one process); a rank given twice is a RankError."""
    ranks = {str(Path(k)): v for k, v in (ranks or {}).items()}
    single = len(files) == 1 if single is None else single
    profiles = []
    for path, found in zip(files, parsed):
        for p in found:
            rank = ranks.get(str(path)) if len(found) == 1 else None
            profiles.append(_with_rank(p, rank, path, single=single and len(found) == 1))
    return check_unique(profiles)


def _parse_all(files: list[Path], workers: int | None, on_loaded, work: tuple[Reduce | None, bool, Options]
               ) -> list[list[Profile]]:
    """_parse_classified of every file with `work` (reduce, keep_events, options), in order:
    locally or on the Dask cluster that options.scheduler names."""
    reduce, keep, options = work
    if options.scheduler:
        return _parse_on_cluster(options.scheduler, files, on_loaded, work)
    workers = min(workers or os.cpu_count() or 1, len(files))
    if workers > 1:  # as many at once as the memory left holds
        workers = memory.parallel_files([cache.inflated_size(f) for f in files], workers)
    if workers <= 1:
        out = []
        for f in files:
            out.append(_parse_classified(f, reduce, None, keep, options))
            if on_loaded:
                on_loaded(f)
        return out
    with ProcessPoolExecutor(max_workers=workers, mp_context=pool_context(), initializer=_worker_signals) as pool:
        futures = [pool.submit(_parse_recording, f, reduce, classify.user_patterns(), keep, options) for f in files]
        out = []
        try:
            for f, fut in zip(files, futures):
                out.append(_result(fut, f))
                if on_loaded:
                    on_loaded(f)
        except BaseException as e:
            if not isinstance(e, Exception):  # interrupted: the workers' files are not waited for
                for process in list(getattr(pool, "_processes", {}).values()):
                    process.terminate()
            pool.shutdown(wait=True, cancel_futures=True)  # the first error is the answer
            raise
        return out


def pool_context() -> multiprocessing.context.BaseContext:
    """How the parse pool starts its workers: by fork where the platform has it and it is safe,
    so that each worker begins with the parent's imports (pandas, numpy, the parsers: ~0.5 s of
    CPU a worker otherwise) and its patterns; chosen here because Python 3.14 makes forkserver the
    default on Linux, whose workers import everything again. Not on macOS (its system libraries are
    not fork-safe: spawn is its default) nor while another thread runs (a progress bar's: a lock
    it holds at the fork stays held in the child): there, the platform's default."""
    if sys.platform != "darwin" and "fork" in multiprocessing.get_all_start_methods() \
            and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _worker_signals() -> None:
    """A worker leaves SIGINT to the parent (which stops the pool: a Ctrl-C reaches the whole
    process group, and each worker would print its traceback) and dies quietly on SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _parse_on_cluster(address: str, files: list[Path], on_loaded, work: tuple[Reduce | None, bool, Options]
                      ) -> list[list[Profile]]:
    """_parse_recording of every file on the Dask cluster at `address` (tracelab.ingest.remote), with
    `work` (reduce, keep_events, options) sent to the workers as values."""
    reduce, keep, options = work
    out = []
    for f, (profiles, caught) in zip(files, remote.cluster_map(address, _parse_recording, files, reduce,
                                                                classify.user_patterns(), keep, options)):
        _warn_again(f, caught)
        out.append(profiles)
        if on_loaded:
            on_loaded(f)
    return out


def _parse_recording(path: Path, reduce: Reduce | None = None, patterns: list[tuple[str, str]] | None = None,
                     keep_events: bool = True, options: Options = DEFAULT
                     ) -> tuple[list[Profile], list[tuple[str, type[Warning]]]]:
    """_parse_classified in a worker process, with the warnings it raised: they are raised again
    in the caller's process (where the CLI prints each as one line), not printed by the worker."""
    with warnings.catch_warnings(record=True) as caught:
        profiles = _parse_classified(path, reduce, patterns, keep_events, options)
    return profiles, [(str(w.message), w.category) for w in caught]


def _result(future, path: Path) -> list[Profile]:
    """A worker's profiles, its warnings raised here; its error comes back as raised there
    (errors.py pickles them); a worker that died (killed, out of memory) is named by its file."""
    try:
        profiles, caught = future.result()
    except BrokenProcessPool:
        raise TraceFormatError(path, "the process reading it died (out of memory, or killed)") from None
    _warn_again(path, caught)
    return profiles


def _warn_again(path: Path, caught: list[tuple[str, type[Warning]]]) -> None:
    for message, category in caught:
        warnings.warn(f"{path}: {message}", category, stacklevel=3)


def check_unique(profiles: list[Profile]) -> list[Profile]:
    """The profiles by rank; two of one rank are a RankError naming both files."""
    seen: dict[int, str] = {}
    for p in profiles:
        r, path = p.meta.rank, str(p.meta.path)
        if r in seen:
            raise RankError(path, f"resolves to rank {r}, as does {seen[r]}; pass ranks explicitly")
        seen[r] = path
    return sorted(profiles, key=lambda p: p.meta.rank)


def events(profiles: Iterable[Profile]) -> pd.DataFrame:
    """All profiles' events in one frame (categories unified)."""
    frames = [p.events for p in profiles]
    if not frames:
        return empty()
    kernels = pd.api.types.union_categoricals([f["kernel"] for f in frames]).categories
    # one set of kernel categories first, so the concatenation stays categorical: no re-categorising
    # of the combined frame (2.5 s for 128 ranks of 9k kernels, single-threaded)
    frames = [f if f["kernel"].cat.categories.equals(kernels) else f.assign(kernel=f["kernel"].cat.set_categories(kernels))
              for f in frames]
    df = pd.concat(frames, ignore_index=True)
    for col in ("source", "kind", "op_class"):
        df[col] = df[col].astype(frames[0][col].dtype)
    return validate(df)
