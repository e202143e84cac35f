"""Named baselines for the gate, kept in a store: a folder or an fsspec URL (file://,
memory://, s3://, gs://) where CI keeps the last accepted runs, so that a job gates against
`baseline:main` without carrying its runs by hand.

    STORE/NAME/CURRENT              the version the name stands for, written last
    STORE/NAME/HISTORY              the versions kept, oldest first, one a line, the new one last
    STORE/NAME/VERSION/RUN/...      the run folders of that version, as they were

save() writes a new version's files first, then HISTORY, then CURRENT, each file whole: a
reader sees the old baseline or the new one, never half of one. The last KEEP versions stay
(history: how far the job's accepted runs, made at other times, differ; the gate measures its
between-run noise from them); older ones are removed after CURRENT is written. fetch() copies
the current version to a local folder, where the Session reads each run folder in it as one
run (repeats); fetch_versions() every kept version, the current one last.
"""
from __future__ import annotations

import re
import secrets
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tracelab.core.errors import TracelabError, UsageError
from tracelab.ingest import remote

PREFIX = "baseline:"
CURRENT, HISTORY = "CURRENT", "HISTORY"
KEEP = 5  # versions kept: 4 earlier beside the current give the spread between times 4 degrees of freedom
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # a branch-like name: no separators, no '..'


class StoreError(TracelabError):
    """A baseline store that cannot be read or written, or a name it does not hold."""


def is_baseline(path: str) -> bool:
    return path.startswith(PREFIX)


def _name(name: str) -> str:
    if not NAME.fullmatch(name) or ".." in name:
        raise UsageError(f"{PREFIX}{name}", "a baseline's name is letters, digits, '.', '_' and '-' (say main)")
    return name


def _store(store: str | None, what: str) -> tuple[object, str]:
    if not store:
        raise UsageError(what, "needs a baseline store: --baseline-store PATH_OR_URL, or TRACELAB_BASELINE_STORE")
    return remote.filesystem(store if remote.is_url(store) else str(Path(store).absolute()))


def save(name: str, runs: list[Path], store: str | None, keep: int = KEEP) -> str:
    """Store the run folders (a folder of run folders: each of them) as baseline NAME's new
    version, keeping the last `keep` versions; returns the version's id. Only run folders: what
    the gate reads of a baseline is its steps and its run.json (the unprofiled step, the
    workload's figures)."""
    from tracelab.ingest.session import run_folders

    if keep < 1:
        raise UsageError("--keep", f"keeps at least the version stored, not {keep}")
    fs, root = _store(store, f"{PREFIX}{name}")
    base = f"{root.rstrip('/')}/{_name(name)}"
    now = time.time()  # microseconds in the id: versions sort in the order they were stored
    version = f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime(now))}.{int(now % 1 * 1e6):06d}-{secrets.token_hex(3)}"
    runs = [inner for run in runs for inner in (run_folders(run) or [run])]
    missing = [str(r) for r in runs if not (r / "run.json").is_file()]
    if missing:
        raise UsageError(missing[0], "is no run folder (run.json): a baseline is run folders, as tracelab run makes them")
    names = [r.name for r in runs] if len({r.name for r in runs}) == len(runs) else \
        [f"{k}-{r.name}" for k, r in enumerate(runs, 1)]  # two repeat-1 of two folders: told apart
    try:
        for run, stored in zip(runs, names):
            for f in sorted(p for p in run.rglob("*") if p.is_file() and not p.is_symlink()):  # its own files only
                target = f"{base}/{version}/{stored}/{f.relative_to(run).as_posix()}"
                fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
                fs.put_file(str(f), target)
        before = _kept(fs, base)
        kept = [*before, version][-keep:]
        fs.pipe_file(f"{base}/{HISTORY}", "".join(f"{v}\n" for v in kept).encode())
        fs.pipe_file(f"{base}/{CURRENT}", version.encode())
        for old in (v for v in before if v not in kept):  # only versions this history named: none half-written
            fs.rm(f"{base}/{old}", recursive=True)
    except OSError as e:
        raise StoreError(store, f"cannot write baseline {name!r}: {e}") from None
    return version


def _kept(fs, base: str) -> list[str]:
    """The versions HISTORY names, oldest first; a store written before HISTORY: its CURRENT alone."""
    for key in (HISTORY, CURRENT):
        try:
            text = fs.cat_file(f"{base}/{key}").decode()
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as e:
            raise StoreError(base, f"cannot read {key}: {e}") from None
        names = [line.strip() for line in text.splitlines() if line.strip()]
        bad = [v for v in names if not NAME.fullmatch(v) or ".." in v]
        if bad:
            raise StoreError(f"{base}/{key}", f"names no version: {bad[0]!r}")
        return names
    return []


@contextmanager
def fetch(name: str, store: str | None) -> Iterator[Path]:
    """A local folder holding baseline NAME's current run folders, removed afterwards."""
    with fetch_versions(name, store, history=False) as (versions, _):
        yield versions[-1]


@contextmanager
def fetch_versions(name: str, store: str | None, history: bool = True) -> Iterator[tuple[list[Path], list[str]]]:
    """(local folders of baseline NAME's kept versions up to its current one, oldest first, the
    current last (history=False: the current alone); the kept versions left out), removed
    afterwards. An earlier version that cannot be read is left out, and named: the history is
    what the store still holds; the current one unreadable is an error."""
    fs, root = _store(store, f"{PREFIX}{name}")
    base = f"{root.rstrip('/')}/{_name(name)}"
    folder = Path(tempfile.mkdtemp(prefix="tracelab-baseline-"))
    try:
        try:
            version = _name_of(fs.cat_file(f"{base}/{CURRENT}").decode().strip(), base)
        except FileNotFoundError:
            raise StoreError(store, f"holds no baseline {name!r} (tracelab gate --accept {name} RUN stores one)") \
                from None
        except (OSError, UnicodeDecodeError) as e:
            raise StoreError(store, f"cannot read baseline {name!r}: {e}") from None
        kept = _kept(fs, base) if history else []
        earlier = kept[:kept.index(version)] if version in kept else []
        copied = {v: _copy(fs, base, v, folder / v / name, quiet=True) for v in earlier}
        current = _copy(fs, base, version, folder / version / name)
        yield [p for p in copied.values() if p is not None] + [current], [v for v, p in copied.items() if p is None]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _copy(fs, base: str, version: str, local: Path, quiet: bool = False) -> Path | None:
    """One version's files copied under `local`; a StoreError where it holds none or cannot be
    read (quiet: None)."""
    prefix = f"{base}/{version}/".lstrip("/")
    try:
        files = fs.find(f"{base}/{version}")
        if not files:
            raise FileNotFoundError(f"{base}/{version}")
        for f in files:
            target = local / f.lstrip("/")[len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(f, str(target))
    except OSError as e:
        if quiet:
            return None
        raise StoreError(base, f"cannot read version {version}: {e}") from None
    return local


def _name_of(version: str, base: str) -> str:
    if not NAME.fullmatch(version) or ".." in version:
        raise StoreError(f"{base}/{CURRENT}", f"names no version: {version!r}")
    return version
