"""The caches' folder: this user's own, read and pruned only through checked file descriptors.

The Parquet cache (cache.py) and the digest cache (digest_cache.py) keep their entries here.
Nobody else may put there anything tracelab reads back (a digest entry is unpickled), nor make
tracelab delete there what it did not write:

- The folder is Options.cache_dir (TRACELAB_CACHE_DIR, default ~/.cache/tracelab), created 0700. Where it is not
  this user's, or others may write it (a shared folder of mode 1777), the caches live in its
  subfolder `tracelab-UID`, created 0700; where that is not this user's private folder either
  (another user made it first), the caches are not used.
- Below the folder, everything is opened relative to its file descriptor and no symbolic link
  is followed (O_NOFOLLOW): an entry is a folder this user owns that others cannot write; a
  file read back is opened non-blocking (a FIFO cannot hang the read), then fstat'ed: a regular
  file of this user's, that others cannot write, with one link (no hard link to elsewhere).
- Each entry and each temporary folder holds MARK, written first: eviction, the sweep of
  temporary folders and the removal of a damaged entry delete only marked folders of this
  user, never one tracelab did not make (a TRACELAB_CACHE_DIR set to a folder of runs loses
  nothing). Entries of tracelab before the mark are never read (their key names an older
  VERSION) and stay until the folder is removed by hand.
"""
from __future__ import annotations

import os
import secrets
import shutil
import stat
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, TypeVar

MARK = ".tracelab-entry"  # in every folder tracelab writes here, before anything else
TMP_PREFIX = ".tracelab-tmp-"
STALE_TMP_S = 15 * 60
SCAN_SHARE = 16  # a process scans to bound the cache each time it has written 1/16 of the limit
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_BELOW = _DIR | os.O_NOFOLLOW
_unscanned_bytes: dict[str, int] = {}  # per cache folder: bytes this process wrote since its last scan
T = TypeVar("T")


@dataclass(frozen=True)
class Folder:
    path: Path  # the folder in use (messages, tests, the scan counter)
    fd: int


@contextmanager
def opened(root: Path) -> Iterator[Folder | None]:
    """The caches' private folder under `root` (Options.cache_dir), open; None where this user
    can have none there."""
    try:
        path, fd = _private_folder(root)
    except OSError:
        yield None
        return
    try:
        yield Folder(path, fd)
    finally:
        os.close(fd)


def _private_folder(base: Path) -> tuple[Path, int]:
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(base, _DIR)  # the user's own setting: a link in it is theirs
    if _private(os.fstat(fd)):
        return base, fd
    name = f"tracelab-{os.geteuid()}"
    try:
        try:
            os.mkdir(name, 0o700, dir_fd=fd)
        except FileExistsError:
            pass
        sub = os.open(name, _BELOW, dir_fd=fd)
    finally:
        os.close(fd)
    if not _private(os.fstat(sub)):
        os.close(sub)
        raise PermissionError(f"{base / name}: not this user's private folder")
    return base / name, sub


def _private(st: os.stat_result) -> bool:
    """A folder or file of this user's that nobody else may write."""
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def read_entry(root: Path, name: str, reader: Callable[[int], T]) -> T | None:
    """reader(the entry `name` of the folder under `root`, open), or None where it is absent or
    not this user's, or where reader fails on it: then the entry is removed (whatever is wrong
    with an entry, the trace itself is the answer). A hit marks the entry recently used."""
    with opened(root) as folder:
        if folder is None:
            return None
        try:
            fd = entry(folder, name)
        except OSError:  # absent (the usual miss), or not this user's
            return None
        try:
            found = reader(fd)
        except Exception:  # noqa: BLE001 - damaged, forged, or of another version
            remove(folder, name)
            return None
        finally:
            os.close(fd)
        touch(folder, name)
        return found


def entry(folder: Folder, name: str) -> int:
    """The entry folder `name`, open (the caller closes it); OSError where absent or not private."""
    fd = os.open(name, _BELOW, dir_fd=folder.fd)
    if not _private(os.fstat(fd)):
        os.close(fd)
        raise PermissionError(f"{name}: not this user's entry")
    return fd


def open_file(dir_fd: int, name: str) -> BinaryIO:
    """A file of an entry, open for reading, where it is a regular file of this user's, that
    nobody else may write, with one link; OSError otherwise."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    st = os.fstat(fd)
    if not (stat.S_ISREG(st.st_mode) and _private(st) and st.st_nlink == 1):
        os.close(fd)
        raise PermissionError(f"{name}: not a regular file of this user's own")
    return os.fdopen(fd, "rb")


def read(dir_fd: int, name: str, limit_bytes: int) -> bytes:
    """open_file's bytes; OSError where it holds more than `limit_bytes`."""
    with open_file(dir_fd, name) as f:
        data = f.read(limit_bytes + 1)
    if len(data) > limit_bytes:
        raise OSError(f"{name}: larger than {limit_bytes} bytes")
    return data


def exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def create(dir_fd: int, name: str) -> BinaryIO:
    """A new file of a staging folder, open for writing."""
    return os.fdopen(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                             dir_fd=dir_fd), "wb")


@contextmanager
def staging(folder: Folder, final: str) -> Iterator[int]:
    """A marked temporary folder (its fd) that becomes the entry `final` when the block ends
    without error (where a parallel load wrote `final` first, theirs stays: it is as good)."""
    name = TMP_PREFIX + secrets.token_hex(8)
    os.mkdir(name, 0o700, dir_fd=folder.fd)
    try:
        fd = os.open(name, _BELOW, dir_fd=folder.fd)
        try:
            create(fd, MARK).close()
            yield fd
        finally:
            os.close(fd)
        try:
            os.rename(name, final, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
        except OSError:  # ENOTEMPTY: written meanwhile; anything else there is not replaced
            pass
    finally:
        shutil.rmtree(name, dir_fd=folder.fd, ignore_errors=True)


def add_file(folder: Folder, name: str, file_name: str, data: bytes) -> None:
    """Add `file_name` holding `data` to the entry `name`, whole (written under a temporary name,
    then renamed in); a file of that name there stays (it is as good); OSError where the entry is
    absent or not this user's."""
    fd = entry(folder, name)
    temporary = TMP_PREFIX + secrets.token_hex(8)
    try:
        if exists(fd, file_name):
            return
        with create(fd, temporary) as f:
            f.write(data)
        os.rename(temporary, file_name, src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        if exists(fd, temporary):
            os.unlink(temporary, dir_fd=fd)
        os.close(fd)


def touch(folder: Folder, name: str) -> None:
    """Mark an entry recently used: evicted last."""
    try:
        os.utime(name, dir_fd=folder.fd, follow_symlinks=False)
    except OSError:
        pass


def remove(folder: Folder, name: str) -> bool:
    """Delete the entry `name` where tracelab made it (marked, this user's); whether it did."""
    if _size_if_ours(folder, name) is None:
        return False
    shutil.rmtree(name, dir_fd=folder.fd, ignore_errors=True)
    return True


def _size_if_ours(folder: Folder, name: str) -> int | None:
    """The bytes of the entry `name` where it is a marked folder of this user's, else None."""
    try:
        fd = entry(folder, name)
    except OSError:
        return None
    try:
        st = os.stat(MARK, dir_fd=fd, follow_symlinks=False)
        if not (stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()):
            return None
        with os.scandir(fd) as files:
            return sum(f.stat(follow_symlinks=False).st_size for f in files)
    except OSError:
        return None
    finally:
        os.close(fd)


def bound(folder: Folder, written: str, limit_bytes: int) -> list[str]:
    """After this process wrote the entry `written`: evict (a scan of every entry) beyond
    `limit_bytes` (Options.cache_max_bytes) on its first write to `folder`, then only once it
    has written more than limit_bytes / SCAN_SHARE since its last scan; the names removed. Between scans the cache may exceed the limit by that
    share per writing process; a first report of 1,024 ranks (2,048 entries) scans ~20 times
    instead of 2,048 (~100 s of stat calls)."""
    since = _unscanned_bytes.get(str(folder.path))
    size = _size_if_ours(folder, written) or 0
    if since is not None and since + size <= limit_bytes // SCAN_SHARE:
        _unscanned_bytes[str(folder.path)] = since + size
        return []
    _unscanned_bytes[str(folder.path)] = 0
    return evict(folder, limit_bytes, keep=written)


def evict(folder: Folder, limit_bytes: int, keep: str | None = None) -> list[str]:
    """Remove marked temporary folders older than STALE_TMP_S, then the least recently used
    marked entries until they hold at most `limit_bytes` (never `keep`); the names removed.
    Whatever else the folder holds is not tracelab's: never counted, never removed."""
    now, removed, entries = time.time(), [], []
    with os.scandir(folder.fd) as children:
        names = [(c.name, c.stat(follow_symlinks=False).st_mtime) for c in children]
    for name, mtime in names:
        if (size := _size_if_ours(folder, name)) is None:
            continue
        if name.startswith(TMP_PREFIX):
            if now - mtime > STALE_TMP_S and remove(folder, name):
                removed.append(name)
        else:
            entries.append((mtime, size, name))
    total = sum(size for _, size, _ in entries)
    for _, size, name in sorted(entries):
        if total <= limit_bytes:
            break
        if name != keep and remove(folder, name):
            removed.append(name)
            total -= size
    return removed
