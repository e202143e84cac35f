"""Named baselines for the gate, kept in a store: a folder or an fsspec URL (file://,
memory://, s3://, gs://) where CI keeps the last accepted runs, so that a job gates against
`baseline:main` without carrying its runs by hand.

    STORE/NAME/CURRENT              the version the name stands for, written last
    STORE/NAME/VERSION/RUN/...      the run folders of that version, as they were

save() writes a new version's files first and CURRENT last, each file whole: a reader
sees the old baseline or the new one, never half of one, and the versions before stay
(history). fetch() copies the current version to a local folder, where the Session reads
each run folder in it as one run (repeats).
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
CURRENT = "CURRENT"
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


def save(name: str, runs: list[Path], store: str | None) -> str:
    """Store the run folders (a folder of run folders: each of them) as baseline NAME's new
    version; returns the version's id. Only run folders: what the gate reads of a baseline is
    its steps and its run.json (the unprofiled step, the workload's figures)."""
    from tracelab.ingest.session import run_folders

    fs, root = _store(store, f"{PREFIX}{name}")
    base = f"{root.rstrip('/')}/{_name(name)}"
    version = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
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
        fs.pipe_file(f"{base}/{CURRENT}", version.encode())
    except OSError as e:
        raise StoreError(store, f"cannot write baseline {name!r}: {e}") from None
    return version


@contextmanager
def fetch(name: str, store: str | None) -> Iterator[Path]:
    """A local folder holding baseline NAME's current run folders, removed afterwards."""
    fs, root = _store(store, f"{PREFIX}{name}")
    base = f"{root.rstrip('/')}/{_name(name)}"
    folder = Path(tempfile.mkdtemp(prefix="tracelab-baseline-"))
    try:
        try:
            version = fs.cat_file(f"{base}/{CURRENT}").decode().strip()
            files = [f for f in fs.find(f"{base}/{_name(version)}")]
        except FileNotFoundError:
            raise StoreError(store, f"holds no baseline {name!r} (tracelab gate --accept {name} RUN stores one)") \
                from None
        except (OSError, UnicodeDecodeError) as e:
            raise StoreError(store, f"cannot read baseline {name!r}: {e}") from None
        prefix = f"{base}/{version}/".lstrip("/")
        for f in files:
            local = folder / name / f.lstrip("/")[len(prefix):]
            local.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(f, str(local))
        yield folder / name
    finally:
        shutil.rmtree(folder, ignore_errors=True)
