"""Traces named by URL (fsspec: s3://, gs://, file://, ...) and ingest on a Dask cluster.

Without either, tracelab reads local files in local processes (tracelab.ingest.loading). With an
address in Options.scheduler (the CLI's `--scheduler`, else TRACELAB_SCHEDULER), load_many sends each file to an existing
dask.distributed cluster: its workers parse, classify and reduce the rank (load.py's
_parse_recording, the same function local processes run) and the caller gathers the
results in file order. A URL is copied to a local temporary file on the worker that
parses it. Both need the optional extra `pip install 'tracelab[dist]'`.
"""
from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from tracelab.core.errors import TraceFormatError, UsageError

def is_url(path: Any) -> bool:
    return isinstance(path, str) and "://" in path


def filesystem(url: str):
    try:
        import fsspec
    except ImportError:
        raise UsageError(url, "a URL needs fsspec: pip install 'tracelab[dist]'") from None
    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as e:  # an unknown protocol, or its package (s3fs, gcsfs) missing
        raise UsageError(url, f"cannot open this URL: {e}") from None


def expand_url(url: str, is_trace: Callable[[str], bool]) -> list[str]:
    """The URL itself when it names a file, else the trace files under it (sorted URLs)."""
    fs, root = filesystem(url)
    try:
        if not fs.isdir(root):
            if not fs.exists(root):
                raise TraceFormatError(url, "no such file or folder")
            return [url]
        found = sorted(p for p in fs.find(root) if is_trace(p))
    except OSError as e:
        raise TraceFormatError(url, f"cannot read: {e}") from None
    return [fs.unstrip_protocol(p) for p in found]


@contextmanager
def local_copy(url: str) -> Iterator[Path]:
    """A local temporary copy of the file at `url` (same file name), removed afterwards."""
    fs, path = filesystem(url)
    folder = tempfile.mkdtemp(prefix="tracelab-")
    local = Path(folder) / Path(path).name
    try:
        with fs.open(path, "rb") as src, open(local, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        yield local
    except OSError as e:
        raise TraceFormatError(url, f"cannot read: {e}") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def cluster_map(address: str, fn: Callable, items: list, *args) -> Iterator[Any]:
    """fn(item, *args) for each item on the Dask cluster at `address`, yielded in order as
    they finish in order; an error raised on a worker is raised here. A worker that died on
    an item (killed, out of memory: Dask gives up after its allowed retries) or a cluster
    lost midway is a TraceFormatError naming the item, not Dask's traceback."""
    try:
        from distributed import Client
    except ImportError:
        raise UsageError("--scheduler", "needs dask.distributed: pip install 'tracelab[dist]'") from None
    try:
        client = Client(address, timeout="10s", set_as_default=False)
    except (OSError, TimeoutError, ValueError) as e:
        raise UsageError("--scheduler", f"cannot reach the Dask scheduler at {address}: {e}") from None
    with client:
        futures = client.map(fn, items, *[[a] * len(items) for a in args], pure=False)
        try:
            for item, future in zip(items, futures):
                yield _result(future, item, address)
        finally:
            client.cancel(futures)


def _result(future, item: Any, address: str) -> Any:
    from distributed import CancelledError
    from distributed.scheduler import KilledWorker

    try:
        return future.result()
    except KilledWorker as e:
        raise TraceFormatError(item, f"the Dask worker reading it died (out of memory, or killed; "
                                     f"{e.args[-1] if e.args else 'no reason given'})") from None
    except CancelledError:
        raise TraceFormatError(item, f"its task was cancelled: the Dask cluster at {address} "
                                     "lost it (a worker or the scheduler stopped)") from None
    except (OSError, TimeoutError) as e:  # the connection to the scheduler closed, or timed out
        raise TraceFormatError(item, f"lost the Dask cluster at {address} while reading it: {e}") from None
