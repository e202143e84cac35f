"""What a command asks of loading, as one value passed along (never through the environment).

`Options` travels from the caller through `tracelab.load`/`load_many`, the worker processes
(local or on a Dask cluster), every parser's `read(path, options)` and the Parquet cache's key.
Two loads with two step patterns in one process do not interfere. The CLI builds it once
(`from_environment`: its --step, --scheduler and --baseline-store, else the user's
TRACELAB_STEP_PATTERN, TRACELAB_SCHEDULER and TRACELAB_BASELINE_STORE, the only place those are read).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

STEP_PATTERN_ENV = "TRACELAB_STEP_PATTERN"
SCHEDULER_ENV = "TRACELAB_SCHEDULER"
BASELINE_STORE_ENV = "TRACELAB_BASELINE_STORE"


@dataclass(frozen=True)
class Options:
    """`step_pattern`: the regular expression naming step ranges (None or "": parsers/_steps.py's
    DEFAULT_STEP_PATTERN). `scheduler`: a Dask scheduler's address whose workers parse the ranks
    (None: local processes). `baseline_store`: the folder or fsspec URL of the gate's named
    baselines (tracelab.ingest.baselines); it changes no parse."""

    step_pattern: str | None = None
    scheduler: str | None = None
    baseline_store: str | None = None

    def cache_text(self) -> str:
        """What of these options changes a parser's output (the cache keys on it)."""
        return f"step={self.step_pattern or ''}"


DEFAULT = Options()


def from_environment(step_pattern: str | None = None, scheduler: str | None = None,
                     baseline_store: str | None = None) -> Options:
    """The CLI's options: what it was given, else the user's environment defaults."""
    return Options(step_pattern if step_pattern is not None else os.environ.get(STEP_PATTERN_ENV) or None,
                   scheduler or os.environ.get(SCHEDULER_ENV) or None,
                   baseline_store or os.environ.get(BASELINE_STORE_ENV) or None)
