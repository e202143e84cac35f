"""Writing what tracelab makes, never at the cost of what it reads.

- `check_output(out, inputs)`: an output may not be an input (by path, link or hard link),
  nor a folder holding one, nor, where the folder's next read would take it for a trace, sit
  inside an input folder, nor replace a file of an input's folder that tracelab reads (a
  trace, run.json, results, figures, provenance, a memory snapshot), nor replace anything but
  a regular file (a device, FIFO or socket); --force does not change that. Every command
  that writes calls it.
- `write` / `write_together`: each output whole or not at all. Bytes go to a temporary file
  beside the target (`temp_beside`: `.tracelab-UID-PID-XXXXXXXX.tmp`, whatever the target's
  name: it fits the file-name limit), renamed over it at the end; on any exception,
  KeyboardInterrupt and (through cli.main's handler) SIGTERM included, the temporary file is
  removed. `write_together` renames its files with SIGINT and SIGTERM held, so a report and
  its merged trace appear both or neither.
- check_output also sweeps the output's folder of the temporary files a killed tracelab left
  (tracelab/tempfiles.py: only those it can tell as its own).
"""
from __future__ import annotations

import gzip
import os
import signal
import stat
import tempfile
import threading
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Callable, Iterable, Iterator, Union

from tracelab.core.errors import OutputError, TracelabError, UsageError
from tracelab.ingest.tempfiles import same_file, sweep, temp_prefix

# the files of a run folder tracelab reads besides its traces (tracelab/loading.py NOT_TRACES)
_READ_SUFFIXES = (".results.json", ".figures.json", ".provenance.json")
_SPECIAL = {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFIFO: "a FIFO",
            stat.S_IFSOCK: "a socket"}
Content = Union[str, bytes, Callable[[Callable[[bytes], object]], object]]


def check_output(out: str | os.PathLike, inputs: Iterable[str | os.PathLike], folder: bool = False) -> Path:
    """`out` if writing it (a file, or with `folder` a folder replaced whole) can harm no
    input; else UsageError naming the input. Inputs that are URLs are not local files."""
    from tracelab.ingest.loading import _looks_like_trace
    from tracelab.ingest.remote import is_url

    out = Path(out)
    real = Path(os.path.realpath(out))
    _refuse_special(out)
    given = [str(p) for p in inputs if not is_url(p)]
    sweep(real.parent, keep=[Path(p) for p in given])
    for path in given:
        source = Path(os.path.realpath(path))
        files = _files(path) if source.is_dir() and not folder and real.exists() else []
        if real == source or same_file(out, Path(path)) or any(same_file(out, f) for f in files):
            raise UsageError(out, f"is the input {path}{' (one of its traces)' if real != source else ''}: "
                                  "tracelab never writes over what it reads (not even with --force); pick another name")
        if real in source.parents:
            raise UsageError(out, f"holds the input {path}: writing it would replace that input (not even "
                                  "with --force); pick another name")
    for path in given:
        source = Path(os.path.realpath(path))
        if source.is_dir() and source in real.parents and (folder or _looks_like_trace(real)):
            raise UsageError(out, f"is inside the input folder {path}, whose next read would take it for a "
                                  "trace; write it elsewhere")
        if real.is_file() and _in_folder_of(real, source) and (what := _read_by_tracelab(real)):
            raise UsageError(out, f"is {what} beside the input {path}, which tracelab reads: it never writes over "
                                  "what it reads (not even with --force); pick another name")
    return out


def _refuse_special(out: Path) -> None:
    """UsageError where `out` (or what its link names) is a device, FIFO or socket: replacing
    one by a file (as root: /dev/null) is never what `-o` means, not even with --force."""
    try:
        kind = _SPECIAL.get(stat.S_IFMT(os.stat(out).st_mode))
    except OSError:  # absent, a dangling link: a new file
        return
    if kind:
        raise UsageError(out, f"is {kind}: tracelab writes only regular files (not even with --force); "
                              "pick another name")


def _in_folder_of(real: Path, source: Path) -> bool:
    """Whether `real` lies in the input `source`'s folder: under it (a folder), beside it (a file)."""
    return source in real.parents if source.is_dir() else real.parent == source.parent


def _read_by_tracelab(real: Path) -> str | None:
    """What tracelab reads `real` as, when found beside an input, by its name or content; else None."""
    from tracelab.ingest.loading import NOT_TRACES, _looks_like_trace, detect

    name = real.name.lower()
    if name in NOT_TRACES or name.endswith(_READ_SUFFIXES):
        return "a run folder's record"
    if _looks_like_trace(real):
        return "a trace"
    try:
        return "a memory snapshot" if detect(real) == "snapshot" else None
    except (TracelabError, OSError):
        return None


def _files(folder: str) -> list[Path]:
    """The trace files of an input folder (its errors are the load's to report)."""
    from tracelab.ingest.loading import expand

    try:
        return expand(folder)
    except TracelabError:
        return []


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _refuse_existing(path: Path, force: bool) -> None:
    _refuse_special(path)
    if path.exists() and not force:
        raise UsageError(path, "exists; pass --force to overwrite it")
    if path.is_dir():
        raise UsageError(path, "is a folder")
    if not path.parent.is_dir():
        raise UsageError(path, f"folder {path.parent} does not exist")


def _staged(path: Path, content: Content, gz: bool) -> Path:
    """`content` in a temporary file beside `path` (removed again on any failure)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temp_prefix(), suffix=".tmp")
    except OSError as e:
        raise OutputError(path, f"cannot write: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as raw, (gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if gz
                                          else nullcontext(raw)) as f:
            if callable(content):
                content(f.write)
            else:
                f.write(content if isinstance(content, bytes) else content.encode("utf-8"))
        os.chmod(tmp, 0o666 & ~_umask())  # the user's usual file mode (0644), not mkstemp's 0600
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):  # a full disk, a file past `ulimit -f`
            raise OutputError(path, f"cannot write: {e.strerror or e}") from None
        raise
    return Path(tmp)


def write(path: str | os.PathLike, content: Content, force: bool = False, gz: bool = False) -> Path:
    """Write text (UTF-8) or bytes atomically; an existing file is replaced only with force.
    `content` may also be a producer, called with a function that writes bytes (a large
    output streamed, never held whole); `gz` compresses (no name or time in the header:
    the same input gives the same file)."""
    return write_together([(path, content, gz)], force)[0]


def write_together(items: list[tuple[str | os.PathLike, Content, bool]], force: bool = False) -> list[Path]:
    """Each (path, content, gz) staged, then all renamed into place with SIGINT and SIGTERM
    held: every file or none (a rename failing part way takes back those already new)."""
    paths = [Path(p) for p, _, _ in items]
    for path in paths:
        _refuse_existing(path, force)
    staged: list[Path] = []
    try:
        for path, (_, content, gz) in zip(paths, items):
            staged.append(_staged(path, content, gz))
        with signals_held():
            _rename_all(staged, paths)
    finally:
        for tmp in staged:
            tmp.unlink(missing_ok=True)
    return paths


def _rename_all(staged: list[Path], paths: list[Path]) -> None:
    new: list[Path] = []
    try:
        for tmp, path in zip(staged, paths):
            existed = path.exists()
            os.replace(tmp, path)
            if not existed:
                new.append(path)
    except OSError as e:
        for path in new:
            path.unlink(missing_ok=True)
        raise OutputError(path, f"cannot write: {e.strerror or e}") from None


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM deferred until the block ends (then raised again, to the handlers
    there were): a few renames are not cut in two. Elsewhere than the main thread the block
    runs as it is. (Blocking the signals would not do: another thread may take them.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    caught = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) is not signal.SIG_IGN]
    old = {s: signal.signal(s, lambda signum, frame: pending.append(signum)) for s in caught}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if pending:
            os.kill(os.getpid(), pending[0])


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGINT and SIGTERM raise errors.Interrupted for the block (cli.main: the command's length;
    main thread only; a signal ignored when tracelab started stays ignored), so every
    `finally` above removes what was half written; the old handlers put back after."""
    from tracelab.core.errors import Interrupted

    with raising_on_signals(Interrupted):
        yield


@contextmanager
def raising_on_signals(error: Callable[[int], BaseException]) -> Iterator[None]:
    """SIGINT and SIGTERM raise `error(signum)` in the main thread for as long as the block runs
    (elsewhere signals cannot be caught, and the block runs as it is); a signal ignored when
    tracelab started (a job started with `&` or nohup) stays ignored; the old handlers put back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise error(signum)

    caught = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) is not signal.SIG_IGN]
    old = {s: signal.signal(s, handler) for s in caught}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
