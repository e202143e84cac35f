"""The one events schema every parser returns, and its check.

One row per GPU activity (kernel, memcpy, memset) for timed sources, or per
aggregated tree node for proton. Times are integer nanoseconds everywhere.
This module imports nothing of the project.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

SOURCES = ("proton", "torch", "nsys")
KINDS = ("kernel", "memcpy", "memset", "cpu_op")
OP_CLASSES = ("gemm", "attention", "communication", "elementwise", "reduction", "memory", "other")

# column -> dtype, in schema order
COLUMNS: dict[str, str] = {
    "rank": "int32",
    "source": "category",
    "kind": "category",
    "name": "string",
    "kernel": "category",
    "op_class": "category",
    "scope": "string",
    "module": "string",
    "device": "int16",
    "stream": "Int64",
    "start_ns": "Int64",
    "dur_ns": "int64",
    "count": "int64",
    "flops": "float64",
    "bytes": "float64",
    "msg_bytes": "float64",
    "process_group": "string",
    "step": "Int64",
}

_CATEGORIES = {"source": SOURCES, "kind": KINDS, "op_class": OP_CLASSES}

# Columns `tracelab.load` adds from name and kind (tracelab.classify), after the cache and in
# the caller's process, so patterns added with classify.add_pattern always apply.
CLASSIFIED = ("kernel", "op_class")
# What a parser returns: every column but the classified ones.
PARSED: dict[str, str] = {name: dtype for name, dtype in COLUMNS.items() if name not in CLASSIFIED}


class SchemaError(ValueError):
    """An events frame that does not match COLUMNS (a bug in a parser, not in a trace)."""


@dataclass
class Profile:
    """One trace file read into the schema: `events` plus per-file `meta`
    (path, source, rank, world_size, devices, trace_start_epoch_ns, profiler_version)."""

    events: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    # small per-rank tables computed where the rank was parsed (load_many's `reduce`), by name
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        return int(self.meta["rank"])

    def __repr__(self) -> str:
        return (f"Profile(source={self.meta.get('source')!r}, rank={self.meta.get('rank')}, "
                f"rows={len(self.events)}, path={self.meta.get('path')!r})")


def _is_string(series: pd.Series) -> bool:
    return pd.api.types.is_string_dtype(series.dtype) and not isinstance(series.dtype, pd.CategoricalDtype)


def _dtype_ok(series: pd.Series, dtype: str) -> bool:
    if dtype == "string":
        return _is_string(series)
    if dtype == "category":
        return isinstance(series.dtype, pd.CategoricalDtype)
    return str(series.dtype) == dtype


def _categorical(values: Any, categories: tuple[str, ...] | None) -> pd.Categorical:
    if categories is None:
        return pd.Categorical(values)
    return pd.Categorical(values, categories=list(categories))


def coerce(columns: dict[str, Any], n_rows: int | None = None,
           spec: dict[str, str] = COLUMNS) -> pd.DataFrame:
    """Build a frame of `spec`'s columns (COLUMNS, or PARSED in a parser) from column arrays;
    missing optional columns get their empty value.

    Scalars broadcast. flops/bytes/msg_bytes default to NaN, stream/start_ns/step to NA,
    scope, module and process_group to "", count to 1.
    """
    n = n_rows if n_rows is not None else _length(columns)
    defaults = {"scope": "", "module": "", "process_group": "", "stream": pd.NA, "start_ns": pd.NA, "count": 1,
                "flops": np.nan, "bytes": np.nan, "msg_bytes": np.nan, "step": pd.NA}
    out = {}
    for name, dtype in spec.items():
        values = columns.get(name, defaults.get(name))
        if values is None:
            raise SchemaError(f"column {name!r} has no values and no default")
        if np.isscalar(values) or values is pd.NA:
            values = [values] * n
        if dtype == "category":
            out[name] = _categorical(values, _CATEGORIES.get(name))
        else:
            out[name] = pd.array(values, dtype=dtype) if dtype in ("string", "Int64") else np.asarray(values, dtype=dtype)
    return pd.DataFrame(out)


def _length(columns: dict[str, Any]) -> int:
    for values in columns.values():
        if not np.isscalar(values) and values is not pd.NA:
            return len(values)
    raise SchemaError("cannot tell the number of rows: every column is a scalar")


def empty() -> pd.DataFrame:
    """A frame with the schema's columns and no rows."""
    return coerce({name: [] for name in COLUMNS}, n_rows=0)


def validate(df: pd.DataFrame, spec: dict[str, str] = COLUMNS) -> pd.DataFrame:
    """Raise SchemaError on a missing, extra or mistyped column of `spec` (COLUMNS, or PARSED
    for a parser's frame), or impossible values; return df."""
    missing = [c for c in spec if c not in df.columns]
    if missing:
        raise SchemaError(f"missing columns {missing}")
    extra = [c for c in df.columns if c not in spec]
    if extra:
        raise SchemaError(f"unexpected columns {extra}")
    wrong = {c: str(df[c].dtype) for c, t in spec.items() if not _dtype_ok(df[c], t)}
    if wrong:
        raise SchemaError(f"mistyped columns {wrong}; expected {[spec[c] for c in wrong]}")
    for name, allowed in _CATEGORIES.items():
        if name not in spec:
            continue
        unknown = set(df[name].cat.categories) - set(allowed)
        if unknown:
            raise SchemaError(f"column {name!r} has values outside {allowed}: {sorted(unknown)}")
    if len(df) and (df["dur_ns"] < 0).any():
        raise SchemaError("negative dur_ns")
    if len(df) and (df["count"] < 0).any():
        raise SchemaError("negative count")
    return df
