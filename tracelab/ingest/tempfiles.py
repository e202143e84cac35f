"""Temporary names beside an output, and the sweep of those a killed tracelab left.

A write goes to a temporary file beside its target (tracelab/outputs.py), `export parquet`
to a staging folder (tracelab/dataset.py); SIGKILL or a power cut leaves them. Their names,
`.tracelab-UID-PID-XXXXXXXX.tmp`, fit the file-name limit whatever the target's name, and
say whose they are: `sweep` removes only a name of that pattern with this user's id, whose
process is gone, older than STALE_TMP_S, owned by this user, and a regular file of one link
(or a staging folder holding only a dataset's parts), never an input of the command.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import time
from pathlib import Path
from typing import Iterable

STALE_TMP_S = 15 * 60
_TMP_PREFIX = ".tracelab-"
_OUR_TMP = re.compile(r"^\.tracelab-([0-9]+)-([0-9]+)-[a-z0-9_]{8}\.tmp$")  # mkstemp's 8 characters, or 8 hex


def temp_prefix() -> str:
    return f"{_TMP_PREFIX}{os.geteuid()}-{os.getpid()}-"


def temp_beside(out: Path) -> Path:
    """A temporary name in `out`'s folder that sweep knows as ours (a staging folder)."""
    return out.parent / f"{temp_prefix()}{secrets.token_hex(4)}.tmp"


def sweep(folder: Path, keep: Iterable[Path] = ()) -> list[str]:
    """Remove our temporary files and staging folders in `folder` older than STALE_TMP_S
    (never a fresh one: another tracelab may be writing it, nor one of `keep`: this
    command's inputs); the names removed."""
    keep = list(keep)
    removed, now = [], time.time()
    try:
        children = list(folder.iterdir())
    except OSError:
        return removed
    for child in children:
        try:
            st = child.lstat()
            if not _ours_and_stale(child.name, st, now) or any(same_file(child, k) for k in keep):
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                child.unlink()
            elif stat.S_ISDIR(st.st_mode) and is_dataset(child):
                shutil.rmtree(child)
            else:
                continue
            removed.append(child.name)
        except OSError:
            continue
    return removed


def _ours_and_stale(name: str, st: os.stat_result, now: float) -> bool:
    """A temporary name of this user's tracelab, owned by this user, left by a process that is
    gone, and older than STALE_TMP_S (checked without following a link)."""
    match = _OUR_TMP.match(name)
    if not match or int(match.group(1)) != os.geteuid() or st.st_uid != os.geteuid():
        return False
    return now - st.st_mtime > STALE_TMP_S and not _alive(int(match.group(2)))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only whether the process exists
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # another user's process now holds that id
        return True
    return True


def is_dataset(folder: Path) -> bool:
    """Whether `folder` holds only what `tracelab export parquet` writes (rank=N/part-0.parquet,
    and our temporary files): the only kind of folder --force replaces."""
    try:
        for child in folder.iterdir():
            if child.name.startswith(".tmp-"):  # a part being written (tracelab/dataset.py)
                continue
            if not (child.is_dir() and re.fullmatch(r"rank=-?[0-9]+", child.name)):
                return False
            if {p.name for p in child.iterdir()} - {"part-0.parquet"}:
                return False
    except OSError:
        return False
    return True


def same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False
