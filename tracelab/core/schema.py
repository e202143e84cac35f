"""The one events schema every parser returns, and its check.

One row per GPU activity (kernel, memcpy, memset) for timed sources, or per
aggregated tree node for proton. Times are integer nanoseconds everywhere.
This module imports nothing of the project but the per-file Meta (tracelab/meta.py) and its error.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from tracelab.core.meta import Meta

SOURCES = ("proton", "torch", "nsys")
# What a source's traces never hold, so that a view says "not recorded" (or that the question
# cannot be answered from it) instead of a 0 or a "none": proton aggregates kernels per scope.
NOT_RECORDED = {"proton": frozenset({"memcpy", "memset", "timeline"})}


def recorded(source: str, what: str) -> bool:
    """Whether traces of `source` can hold `what` (memcpy, memset, timeline)."""
    return what not in NOT_RECORDED.get(str(source), frozenset())
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
    "dtype": "string",
    "process_group": "string",
    "step": "Int64",
    "launch_start_ns": "Int64",  # the CUDA runtime/driver call that launched the row: start, same clock as start_ns
    "launch_dur_ns": "Int64",  # its duration (CPU); NA where the trace has no launch for the row (proton: never)
}

_CATEGORIES = {"source": SOURCES, "kind": KINDS, "op_class": OP_CLASSES}

# Columns `tracelab.load` adds from name and kind (tracelab.core.classify), after the cache and in
# the caller's process, so patterns added with classify.add_pattern always apply.
CLASSIFIED = ("kernel", "op_class")
# What a parser returns: every column but the classified ones.
PARSED: dict[str, str] = {name: dtype for name, dtype in COLUMNS.items() if name not in CLASSIFIED}


# Meta.profiler_version of a PyTorch memory snapshot (parsers/snapshot.py): a file of one device's
# allocator history, no rank of a traced job unless its name gives one
SNAPSHOT_VERSION = "torch memory snapshot"


class SchemaError(ValueError):
    """An events frame that does not match COLUMNS (a bug in a parser, not in a trace)."""


@dataclass
class Profile:
    """One trace file read into the schema: `events` plus per-file `meta` (Meta: path, source,
    rank, world_size, devices, trace_start_epoch_ns, profiler_version...; a dict given is
    checked into one, a wrong type a TraceFormatError naming its path and key)."""

    events: pd.DataFrame
    meta: Meta = field(default_factory=Meta)
    # small per-rank tables computed where the rank was parsed (load_many's `reduce`), by name
    summary: dict[str, Any] = field(default_factory=dict)
    # the host's intervals (HOST_COLUMNS: sync calls, CPU ops, ranges); None where the source has none
    host: pd.DataFrame | None = None
    # the allocator's events (MEMORY_COLUMNS: allocations and frees); None where the trace recorded none
    memory: pd.DataFrame | None = None

    def __post_init__(self) -> None:
        self.meta = Meta.of(self.meta)

    @property
    def rank(self) -> int:
        return int(self.meta.rank)

    def __repr__(self) -> str:
        return (f"Profile(source={self.meta.source!r}, rank={self.meta.rank}, "
                f"rows={len(self.events)}, path={self.meta.path!r})")


class Memo:
    """`shared(key, make)`: make() the first time `key` is asked for on this object, the same
    object after, kept in its `memo` dict (a field of each dataclass using it)."""

    memo: dict

    def shared(self, key, make: Callable[[], Any]) -> Any:
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]


@dataclass(frozen=True)
class RankData(Memo):
    """What a per-rank reducer gets (load_many's `reduce`, reports.session's digests), one
    signature for all: `fn(rank: RankData) -> Any`. `events`: the rank's classified rows;
    `meta`: its trace's meta; `host`: its host frame (HOST_COLUMNS), None where the source has none;
    `memory`: its memory frame (MEMORY_COLUMNS), None where the trace recorded none.
    `shared(key, make)`: what several reducers of this rank build alike (the what-if graph that
    the path_bounds and whatif digests both read), made once by the first to ask."""

    events: pd.DataFrame
    meta: Meta = field(default_factory=Meta)
    host: pd.DataFrame | None = None
    memory: pd.DataFrame | None = None
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # Memo.shared's

    def __post_init__(self) -> None:
        object.__setattr__(self, "meta", Meta.of(self.meta))  # a dict given is checked into a Meta, as Profile's


def kind_mask(frame: pd.DataFrame, kinds: tuple[str, ...]) -> np.ndarray:
    """Whether each row's `kind` is one of `kinds`: by the categorical's codes where it is one
    (the events' and the host frame's are), with no string per row; bool array."""
    return is_kind(frame["kind"], kinds)


def is_kind(kind: pd.Series, kinds: tuple[str, ...]) -> np.ndarray:
    """kind_mask of a `kind` column."""
    if isinstance(kind.dtype, pd.CategoricalDtype):
        cat = kind.array  # the Categorical itself: its codes without a Series made around them (half the time)
        names = cat.categories.tolist()
        table = np.zeros(len(names) + 1, dtype=bool)  # the last: code -1, a missing kind
        table[[i for i, c in enumerate(names) if str(c) in kinds]] = True
        return table[cat.codes]
    return np.isin(kind.astype(str).to_numpy(), kinds)


def str_array(column: pd.Series) -> np.ndarray:
    """column.astype(str) as an object array, equal value for value and type for type (a missing
    categorical value is numpy's str "nan", as pandas writes it): a categorical's names are made
    once per category, not once per row (pandas converts each row of object categories: ~0.4 ms
    per 10k rows)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        cat = column.array  # the Categorical itself (kind_mask's reason)
        names = np.array([str(c) for c in cat.categories.tolist()] + [np.str_("nan")], dtype=object)
        return names[cat.codes]  # code -1 (missing): the last
    return column.astype(str).to_numpy(dtype=object)


class OnEvents:
    """A function of a rank's events alone, as a reducer of RankData (picklable, for the workers)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, rank: RankData) -> Any:
        return self.fn(rank.events)

    def __repr__(self) -> str:
        return f"OnEvents({getattr(self.fn, '__name__', self.fn)!r})"


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
    if isinstance(values, list) or (isinstance(values, np.ndarray) and values.dtype == object):
        # by a dict of the few categories, as pd.Categorical puts them (-1: NA or none of them), without its hashing
        # of each row's text
        code_of = {c: i for i, c in enumerate(categories)}
        codes = np.fromiter(map(code_of.get, values, itertools.repeat(-1)), dtype=np.int64, count=len(values))
        return pd.Categorical.from_codes(codes, categories=list(categories))
    return pd.Categorical(values, categories=list(categories))


def na_ints(n_rows: int) -> pd.arrays.IntegerArray:
    """An Int64 array of n_rows NA, as pd.array([pd.NA] * n_rows, dtype="Int64") makes it (its
    values under the mask 1), without its look at each of the n_rows objects (~1.4 ms per 10k)."""
    return pd.arrays.IntegerArray(np.ones(n_rows, dtype=np.int64), np.ones(n_rows, dtype=bool))


_DEFAULTS = {"scope": "", "module": "", "process_group": "", "dtype": "", "stream": pd.NA, "start_ns": pd.NA,
             "count": 1, "flops": np.nan, "bytes": np.nan, "msg_bytes": np.nan, "step": pd.NA,
             "launch_start_ns": pd.NA, "launch_dur_ns": pd.NA}


def coerce(columns: dict[str, Any], n_rows: int | None = None,
           spec: dict[str, str] = COLUMNS, defaults: dict[str, Any] | None = None) -> pd.DataFrame:
    """Build a frame of `spec`'s columns (COLUMNS, or PARSED in a parser) from column arrays;
    missing optional columns get their empty value.

    Scalars broadcast. flops/bytes/msg_bytes default to NaN, stream/start_ns/step/launch_* to NA,
    scope, module, process_group and dtype to "", count to 1 (`defaults` replaces these).
    """
    n = n_rows if n_rows is not None else _length(columns)
    defaults = defaults if defaults is not None else _DEFAULTS
    out = {}
    for name, dtype in spec.items():
        values = columns.get(name, defaults.get(name))
        if values is None:
            raise SchemaError(f"column {name!r} has no values and no default")
        if np.isscalar(values) or values is pd.NA:
            out[name] = _broadcast(values, n, dtype, _CATEGORIES.get(name))
        elif dtype == "category":
            out[name] = _categorical(values, _CATEGORIES.get(name))
        else:
            out[name] = pd.array(values, dtype=dtype) if dtype in ("string", "Int64") else np.asarray(values, dtype=dtype)
    return pd.DataFrame(out)


def _broadcast(value: Any, n: int, dtype: str, categories: tuple[str, ...] | None) -> Any:
    """A column of n times `value`, as coerce makes it of [value] * n, without a list of n: the
    value converted once, then repeated."""
    if value is pd.NA and dtype == "Int64":
        return na_ints(n)
    if dtype == "category" and categories is not None:
        return pd.Categorical.from_codes(np.full(n, {c: i for i, c in enumerate(categories)}.get(value, -1)),
                                         categories=list(categories))
    if dtype == "string":
        return pd.array(np.repeat(np.array([value], dtype=object), n), dtype=dtype)
    if dtype in ("category", "Int64"):
        return _categorical([value] * n, categories) if dtype == "category" else pd.array([value] * n, dtype=dtype)
    return np.repeat(np.asarray([value], dtype=dtype), n)


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


# The second per-rank frame: what the host was doing (reports/idle/idle.py). One row per host
# interval: a synchronising CUDA call (`sync`), a CPU operator (`cpu_op`, Kineto), a user
# range (`range`: record_function, NVTX; `step` for a step range, parsers/_steps.py) or an OS
# runtime call (`osrt`, nsys). Same clock as
# the events' start_ns; tid is the thread (Kineto tid, nsys globalTid).
HOST_KINDS = ("sync", "cpu_op", "range", "step", "osrt", "alloc", "wait")  # alloc: an allocator call that does not
# synchronise (cudaMalloc, cuMemCreate, ...; cudaFree synchronises and is `sync`), reports/memory; wait: a call
# that makes a stream wait on the GPU (cudaStreamWaitEvent, cuStreamWaitValue32), what a dependency idles on
HOST_COLUMNS: dict[str, str] = {"kind": "category", "name": "string", "tid": "int64", "start_ns": "int64",
                                "dur_ns": "int64"}


def host_frame(kind: Any, name: Any, tid: Any, start_ns: Any, dur_ns: Any) -> pd.DataFrame:
    """A host frame (HOST_COLUMNS) from column arrays, sorted by start, checked."""
    kinds = kind if isinstance(kind, pd.Categorical) else pd.Categorical(np.asarray(kind, dtype=object),
                                                                         categories=list(HOST_KINDS))
    n = len(kinds)
    start_ns = _rows(start_ns, n, np.int64)
    order = np.argsort(start_ns, kind="stable")  # the rows by start, put in order before the frame is made
    df = pd.DataFrame({"kind": kinds.set_categories(list(HOST_KINDS))[order],
                       "name": pd.array(_rows(name, n, object)[order], dtype="string", copy=False),  # our own take
                       "tid": _rows(tid, n, np.int64)[order], "start_ns": start_ns[order],
                       "dur_ns": _rows(dur_ns, n, np.int64)[order]})
    return validate_host(df)


def _rows(values: Any, n: int, dtype: type) -> np.ndarray:
    """A column of n values as an array of `dtype`; a scalar repeated (as the frame broadcasts it)."""
    return np.broadcast_to(np.asarray(values, dtype=dtype), (n,))


def _has_na(text: pd.Series) -> bool:
    """Whether a string column has a missing value: none where every value is a str (pandas'
    infer_dtype, ~4x faster than isna on an object array), else isna's answer."""
    values = np.asarray(text.array, dtype=object)  # the array itself, no copy
    return pd.api.types.infer_dtype(values, skipna=False) not in ("string", "empty") and bool(text.isna().any())


def validate_host(df: pd.DataFrame) -> pd.DataFrame:
    """Raise SchemaError unless df is a host frame (HOST_COLUMNS, kinds of HOST_KINDS, no
    negative duration, no NA); return df."""
    if list(df.columns) != list(HOST_COLUMNS):
        raise SchemaError(f"host frame columns {list(df.columns)}, expected {list(HOST_COLUMNS)}")
    wrong = {c: str(df[c].dtype) for c, t in HOST_COLUMNS.items() if not _dtype_ok(df[c], t)}
    if wrong:
        raise SchemaError(f"host frame: mistyped columns {wrong}")
    if set(df["kind"].cat.categories) - set(HOST_KINDS) or df["kind"].isna().any() or _has_na(df["name"]):
        raise SchemaError(f"host frame: kind outside {HOST_KINDS}, or a missing kind or name")
    if len(df) and (df["dur_ns"] < 0).any():
        raise SchemaError("host frame: negative dur_ns")
    return df


# The third per-rank frame: the allocator's events (reports/memory/). One row per allocation
# (bytes > 0) or free (bytes < 0), on the events' clock; the totals after the event where the
# source gives them (Kineto: both; a snapshot: both, replayed; nsys: CUDA's allocations, which
# are what PyTorch calls reserved, so allocated is NA); device -1 for the CPU; tid NA where
# unknown; step the step range around it (parsers/_steps.py), NA outside any; op, scope and module open at the time, "" where the trace does not say.
MEMORY_COLUMNS: dict[str, str] = {"time_ns": "int64", "addr": "Int64", "bytes": "int64",
                                  "total_allocated_bytes": "Int64", "total_reserved_bytes": "Int64",
                                  "device": "int16", "tid": "Int64", "step": "Int64", "op": "string", "scope": "string",
                                  "module": "string"}


_MEMORY_DEFAULTS = {"addr": pd.NA, "total_allocated_bytes": pd.NA, "total_reserved_bytes": pd.NA, "tid": pd.NA,
                    "step": pd.NA, "op": "", "scope": "", "module": ""}


def memory_frame(columns: dict[str, Any], n_rows: int) -> pd.DataFrame:
    """A memory frame (MEMORY_COLUMNS) from column arrays (scalars broadcast; addr, totals, tid
    and step default to NA, op/scope/module to ""), sorted by time (stable), checked."""
    df = coerce(columns, n_rows, MEMORY_COLUMNS, _MEMORY_DEFAULTS)
    return validate_memory(df.sort_values("time_ns", kind="stable", ignore_index=True))


def validate_memory(df: pd.DataFrame) -> pd.DataFrame:
    """Raise SchemaError unless df is a memory frame (MEMORY_COLUMNS, in order and typed, no
    negative total, no NA op/scope/module); return df."""
    if list(df.columns) != list(MEMORY_COLUMNS):
        raise SchemaError(f"memory frame columns {list(df.columns)}, expected {list(MEMORY_COLUMNS)}")
    wrong = {c: str(df[c].dtype) for c, t in MEMORY_COLUMNS.items() if not _dtype_ok(df[c], t)}
    if wrong:
        raise SchemaError(f"memory frame: mistyped columns {wrong}")
    for total in ("total_allocated_bytes", "total_reserved_bytes"):
        if len(df) and (df[total].fillna(0) < 0).any():
            raise SchemaError(f"memory frame: negative {total}")
    if df[["op", "scope", "module"]].isna().any().any():
        raise SchemaError("memory frame: a missing op, scope or module")
    return df
