"""What a load asks of parsing, caching and memory, as one value passed along.

`Options` travels from the caller through `Session.open`/`tracelab.load`/`load_many`, the worker
processes (pickled, local or on a Dask cluster), every parser's `read(path, options)`, the caches
and the limits. Two loads with two step patterns or two cache folders in one process do not
interfere. `Options.from_environment(**overrides)` is the only reader of the environment in
tracelab, its parsers and reports: the CLI and the public entry points (`tracelab.load`,
`load_many`, `Session.open`) call it once when given no Options; a library user may instead
pass `Options(cache=False, ...)`, which no variable changes. (The run side, tracelab/run and
workloads/, still sets and reads variables of the processes it launches under torchrun.)

Variables, as documented in docs/reference.md:
TRACELAB_STEP_PATTERN, TRACELAB_SCHEDULER, TRACELAB_BASELINE_STORE (ingest/baselines.py);
TRACELAB_MAX_TRACE_BYTES, TRACELAB_MAX_NAME_CHARS (core/limits.py); TRACELAB_MAX_MEMORY_BYTES (ingest/budget.py); TRACELAB_CACHE,
TRACELAB_CACHE_DIR, TRACELAB_CACHE_MAX_BYTES (ingest/cache.py, ingest/cachedir.py); and glibc's
MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ (core/limits.reuse_freed_memory leaves them be).

The limits of a parse are those of its Options: loading makes them the ones in force while it
reads a file (`applied`), so a check deep inside a parser reads `current()`, never a variable.
"""
from __future__ import annotations

import functools
import os
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable, Iterator, Mapping

from tracelab.core.errors import UsageError

STEP_PATTERN_ENV = "TRACELAB_STEP_PATTERN"
SCHEDULER_ENV = "TRACELAB_SCHEDULER"
BASELINE_STORE_ENV = "TRACELAB_BASELINE_STORE"
MAX_TRACE_BYTES_ENV = "TRACELAB_MAX_TRACE_BYTES"
MAX_NAME_CHARS_ENV = "TRACELAB_MAX_NAME_CHARS"
MAX_MEMORY_BYTES_ENV = "TRACELAB_MAX_MEMORY_BYTES"
CACHE_ENV = "TRACELAB_CACHE"
CACHE_DIR_ENV = "TRACELAB_CACHE_DIR"
CACHE_MAX_BYTES_ENV = "TRACELAB_CACHE_MAX_BYTES"
MALLOC_ENVS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

DEFAULT_MAX_TRACE_BYTES = 2 * 1024**3
DEFAULT_MAX_NAME_CHARS = 1024**2
DEFAULT_CACHE_MAX_BYTES = 4 * 1024**3


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "tracelab"


@dataclass(frozen=True)
class Options:
    """`step_pattern`: the regular expression naming step ranges (None or "": parsers/_steps.py's
    DEFAULT_STEP_PATTERN). `scheduler`: a Dask scheduler's address whose workers parse the ranks
    (None: local processes). `max_trace_bytes`, `max_name_chars`: the bounds on one trace file
    (core/limits.py). `max_memory_bytes`: the peak one process may take (ingest/budget.py; None:
    what the machine has left, 0: no check). `cache`: whether the Parquet and digest caches are
    used; `cache_dir` holds them, bounded to `cache_max_bytes`. `keep_malloc`: the user tuned
    glibc's malloc, so tracelab leaves it be (core/limits.reuse_freed_memory). `baseline_store`:
    the folder or fsspec URL of the gate's named baselines (ingest/baselines.py); no parse reads it."""

    step_pattern: str | None = None
    scheduler: str | None = None
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES
    max_name_chars: int = DEFAULT_MAX_NAME_CHARS
    max_memory_bytes: int | None = None
    cache: bool = True
    cache_dir: Path = field(default_factory=default_cache_dir)
    cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES
    keep_malloc: bool = False
    baseline_store: str | None = None

    def __post_init__(self) -> None:
        """A bound given in Python is checked as a variable's is: a whole number of 0 or more."""
        for name in ("max_trace_bytes", "max_name_chars", "cache_max_bytes", "max_memory_bytes"):
            value = getattr(self, name)
            if not (value is None and name == "max_memory_bytes") and (type(value) is not int or value < 0):
                raise UsageError(f"Options.{name}", f"{value!r} is not a whole number of 0 or more")

    def cache_text(self) -> str:
        """What of these options changes a parser's output (the cache keys on it)."""
        return f"step={self.step_pattern or ''}"

    @classmethod
    def from_environment(cls, **overrides) -> Options:
        """The options of the environment's variables (module docstring), each field given in
        `overrides` (not None) instead of its variable, which is then not read. A variable set to
        what is not a number of 0 or more is a UsageError naming it."""
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"Options has no field {sorted(unknown)[0]!r}")
        given = {name: value for name, value in overrides.items() if value is not None}
        env = os.environ  # the one read of the environment
        read = {name: reader(env) for name, reader in _READERS.items() if name not in given}
        return cls(**read, **given)


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    """A whole number of at least 0 from `env` (`2e9` allowed); unset or empty: `default`."""
    value = env.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(float(value))
    except (ValueError, OverflowError):
        number = -1
    if number < 0:
        raise UsageError(name, f"{value!r} is not a number of 0 or more")
    return number


def _memory_budget(env: Mapping[str, str]) -> int | None:
    """TRACELAB_MAX_MEMORY_BYTES: unset or empty, None (what the machine has left); 0, no check."""
    return _env_int(env, MAX_MEMORY_BYTES_ENV, -1) if env.get(MAX_MEMORY_BYTES_ENV, "").strip() else None


# Each field from the environment's variables (from_environment gives them), read only where
# the field is not given.
_READERS: dict[str, Callable[[Mapping[str, str]], object]] = {
    "step_pattern": lambda env: env.get(STEP_PATTERN_ENV) or None,
    "scheduler": lambda env: env.get(SCHEDULER_ENV) or None,
    "baseline_store": lambda env: env.get(BASELINE_STORE_ENV) or None,
    "max_trace_bytes": lambda env: _env_int(env, MAX_TRACE_BYTES_ENV, DEFAULT_MAX_TRACE_BYTES),
    "max_name_chars": lambda env: _env_int(env, MAX_NAME_CHARS_ENV, DEFAULT_MAX_NAME_CHARS),
    "max_memory_bytes": _memory_budget,
    "cache": lambda env: env.get(CACHE_ENV, "1") != "0",
    "cache_dir": lambda env: Path(env.get(CACHE_DIR_ENV, default_cache_dir())),
    "cache_max_bytes": lambda env: _env_int(env, CACHE_MAX_BYTES_ENV, DEFAULT_CACHE_MAX_BYTES),
    "keep_malloc": lambda env: any(env.get(name) for name in MALLOC_ENVS),
}

DEFAULT = Options()
_in_force: ContextVar[Options] = ContextVar("tracelab_options")


def current() -> Options:
    """The options of the load in progress in this thread (`applied`); DEFAULT outside one."""
    return _in_force.get(DEFAULT)


@contextmanager
def applied(options: Options) -> Iterator[Options]:
    """Make `options` the ones in force (current()) while the block runs, in this thread only."""
    token = _in_force.set(options)
    try:
        yield options
    finally:
        _in_force.reset(token)


def applying(read: Callable) -> Callable:
    """A parser's `read(path, options, ...)`, run with its `options` in force: its limits are
    theirs whoever calls it."""
    @functools.wraps(read)
    def with_options(path, options: Options = DEFAULT, *args, **kwargs):
        with applied(options):
            return read(path, options, *args, **kwargs)
    return with_options
