"""The events of the categories parsers/_kineto_json.read_events chooses, as columns: the Structs
an event is decoded into (only the fields and args a row needs) and the collectors it fills
chunk by chunk, while the chunk's Structs are still in the CPU cache.

Per chunk, `ts` is read into int64 ns (parsers/_kineto_ts), `dur` into float64, pid and tid
into int64 where every label of the chunk is an integer (the usual case; else the labels are
kept as they are, for _kineto.to_ints), args "External id" and "correlation" into int64 (-1:
none); repeated names are shared; the args Structs are kept only where a later stage reads
them (GPU rows, CPU operators with their shapes as raw JSON, memory events).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Annotated, Any, ClassVar

import msgspec
import numpy as np

from tracelab.core import limits

from ._kineto_ts import _ts_array
from ._steps import Names

# Value types checked at decode (limits.py): ids fit int64, durations (us) fit in int64 ns
Int64 = Annotated[int, msgspec.Meta(ge=limits.INT64[0], le=limits.INT64[1])]
Id = Int64 | str | None
Number = Int64 | float | str | None  # args values Kineto writes as integers; others are ignored
DurUs = Annotated[float, msgspec.Meta(ge=-limits.MAX_DUR_NS / 1000, le=limits.MAX_DUR_NS / 1000)]
Nelems = Annotated[float, msgspec.Meta(ge=0, le=2.0**62)] | str | None

class _Args(msgspec.Struct, gc=False):
    """The args a row needs; the trace's other args are skipped unread."""

    device: Number = None
    stream: Number = None
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Nelems = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Nelems = msgspec.field(default=None, name="Out msg nelems")
    dtype: str | None = None  # a c10 ScalarType name (_kineto.DTYPE_BYTES)
    correlation: Number = None
    process_group: Int64 | str | None = msgspec.field(default=None, name="Process Group Name")
    external_id: Number = msgspec.field(default=None, name="External id")  # the CPU op that launched it
    bytes: Number = None  # a memcpy's or memset's size


class _Event(msgspec.Struct, gc=False):
    """A chosen event in full; `ts` as written (ts_ns reads it: a float cannot hold epoch
    microseconds to the ns)."""

    ts: msgspec.Raw
    name: str = ""
    pid: Id = None
    tid: Id = None
    dur: DurUs = 0.0
    args: _Args | None = None


class _LaunchArgs(msgspec.Struct, gc=False):
    correlation: Number = None


class _CallArgs(_LaunchArgs, gc=False):
    """A call's or range's args: of them, rows read only these two (each other arg is skipped
    unread: fewer fields to look a key up among, a smaller Struct per event)."""

    external_id: Number = msgspec.field(default=None, name="External id")


class _Launch(msgspec.Struct, gc=False):
    """A launch call: only what finds it (correlation) and places it (thread, start)."""

    ts: msgspec.Raw
    pid: Id = None
    tid: Id = None
    args: _LaunchArgs | None = None


class _Call(_Event, gc=False):
    """A launch call or a range (Calls): its args' correlation and External id only."""

    args: _CallArgs | None = None  # type: ignore[assignment]


_NULL = msgspec.Raw(b"null")


class _OpArgs(msgspec.Struct, gc=False):
    """A CPU operator's args: its External id, its counts (flops, an Inductor Triton kernel's
    estimated work) and its shapes (record_shapes=True) as raw JSON (null where absent), read by
    parsers/_shapes.py only for the operators that launched GPU work (Ops.inputs)."""

    external_id: Number = msgspec.field(default=None, name="External id")
    flops: Number = None  # torch.profiler(with_flops=True) writes it for the ops it counts
    # an Inductor Triton kernel's launch range, compiled with benchmark_kernel: its estimated work
    kernel_num_gb: Number = None
    kernel_flop: Number = None
    dims: msgspec.Raw = msgspec.field(default=_NULL, name="Input Dims")
    types: msgspec.Raw = msgspec.field(default=_NULL, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=_NULL, name="Concrete Inputs")


class _Op(_Event, gc=False):
    """A CPU operator, its args the work's (_OpArgs)."""

    args: _OpArgs | None = None  # type: ignore[assignment]


_NO_ARGS = _OpArgs()


MISSING = limits.INT64[0]  # a memory event's arg that is absent (Kineto writes integers; null is refused)


class _MemArgs(msgspec.Struct, gc=False):
    """A `[memory]` instant event's args (profile_memory=True): the block's address and size
    (negative: a free), the device's totals after it, the device; MISSING where absent."""

    addr: Int64 = msgspec.field(default=MISSING, name="Addr")
    bytes: Int64 = msgspec.field(default=MISSING, name="Bytes")
    allocated: Int64 = msgspec.field(default=MISSING, name="Total Allocated")
    reserved: Int64 = msgspec.field(default=MISSING, name="Total Reserved")
    device_id: Int64 = msgspec.field(default=MISSING, name="Device Id")
    device_type: Int64 = msgspec.field(default=MISSING, name="Device Type")


class _Instant(msgspec.Struct, gc=False):
    """A CPU instant event: only what a memory event needs (no duration)."""

    ts: msgspec.Raw
    name: str = ""
    pid: Id = None
    tid: Id = None
    args: _MemArgs | None = None


_PID, _TID, _TS, _ARGS, _NAME, _DUR = map(attrgetter, ("pid", "tid", "ts", "args", "name", "dur"))
_CORRELATION, _EXTERNAL_ID = attrgetter("correlation"), attrgetter("external_id")


@dataclass
class Launches:
    """Launch calls as columns: only what finds them (args correlation) and places them
    (process, thread, start)."""

    STRUCT: ClassVar[type] = _Launch
    KEEPS_ARGS: ClassVar[bool] = True  # extend() keeps each event's args Struct (`args`)
    CORRELATED: ClassVar[bool] = True  # the args have a "correlation" (`correlation`)
    EXTERNAL: ClassVar[bool] = False  # the args have an "External id" (`external_id`)
    ts_parts: list[np.ndarray] = field(default_factory=list)
    args: list[Any] = field(default_factory=list)
    _parts: dict[str, list] = field(default_factory=lambda: {"pid": [], "tid": [], "correlation": [],
                                                             "external_id": [], "dur_us": []})
    _made: dict[str, Any] = field(default_factory=dict, repr=False)  # columns as arrays, made once

    def extend(self, events: list, cats: list[str], ts_ns: np.ndarray | None = None) -> None:
        """Add decoded events, of these categories (not kept here); `ts_ns`: their `ts` read
        already (else read here)."""
        self.ts_parts.append(_ts_array(list(map(_TS, events))) if ts_ns is None else ts_ns)
        self._parts["pid"].append(_labels(list(map(_PID, events))))
        self._parts["tid"].append(_labels(list(map(_TID, events))))
        args = list(map(_ARGS, events))
        if self.KEEPS_ARGS:
            self.args += args
        if self.CORRELATED:
            self._parts["correlation"].append(_ints(args, _CORRELATION))
        if self.EXTERNAL:
            self._parts["external_id"].append(_ints(args, _EXTERNAL_ID))

    @property
    def size(self) -> int:
        """How many events."""
        return sum(map(len, self.ts_parts))

    @property
    def ts_ns(self) -> np.ndarray:
        """`ts` in integer ns (int64)."""
        return _joined(self.ts_parts)

    @property
    def pid(self) -> list:
        """The events' `pid` labels (integers, or as written where a chunk had another)."""
        return _labels_of(self._parts["pid"])

    @property
    def tid(self) -> list:
        """The events' `tid` labels, as `pid`."""
        return _labels_of(self._parts["tid"])

    def ids(self, column: str) -> np.ndarray | None:
        """The `pid` or `tid` column as int64 (read-only) where every label is an integer (the
        usual case), else None (then _kineto.to_ints reads the labels); made once."""
        if column not in self._made:
            parts = self._parts[column]
            ints = all(isinstance(p, np.ndarray) for p in parts)
            self._made[column] = _read_only(_joined(parts)) if ints else None
        return self._made[column]

    @property
    def correlation(self) -> np.ndarray:
        """args "correlation" per event, -1 where it is missing or not an integer."""
        return _joined(self._parts["correlation"])

    @property
    def external_id(self) -> np.ndarray:
        """args "External id" per event, -1 where it is missing or not an integer."""
        return _joined(self._parts["external_id"])


@dataclass
class Picked(Launches):
    """Events of some categories as columns: a launch's, and their category, name and
    duration, and args (_Args); repeated names shared."""

    STRUCT: ClassVar[type] = _Event
    EXTERNAL: ClassVar[bool] = True
    cat: list[str] = field(default_factory=list)
    name: list[str] = field(default_factory=Names)  # Names: masks of it test each distinct name once
    _names: dict[str, str] = field(default_factory=dict)

    def extend(self, events: list[_Event], cats: list[str], ts_ns: np.ndarray | None = None) -> None:
        """Add decoded events, of these categories (nothing is added when one is refused)."""
        seen = len(self._names)
        names = list(map(_NAME, events))
        names = list(map(self._names.setdefault, names, names))  # repeated names shared
        if len(self._names) > seen and (complaint := limits.long_name(max(map(len, itertools.islice(
                self._names, seen, None))))):  # the names new to this trace: a long one is in there
            for name in list(itertools.islice(self._names, seen, None)):  # refused: the slow way sees them again
                del self._names[name]
            raise ValueError(f"name: {complaint}")
        super().extend(events, cats, ts_ns)
        self.cat += cats
        self._parts["dur_us"].append(np.fromiter(map(_DUR, events), dtype=np.float64, count=len(events)))
        self.name += names

    def take_rows(self, other: "Picked", rows: np.ndarray) -> None:
        """Add the events `rows` (indices) of another collector, as they were decoded there."""
        rows = np.asarray(rows, dtype=np.int64)
        self.ts_parts.append(other.ts_ns[rows])
        for column in ("pid", "tid"):
            labels = other.ids(column)
            self._parts[column].append(labels[rows] if labels is not None else [getattr(other, column)[i] for i in rows])
        for column in ("correlation", "external_id"):
            self._parts[column].append(_joined(other._parts[column])[rows] if other._parts[column]
                                       else np.full(len(rows), -1, dtype=np.int64))
        self._parts["dur_us"].append(_joined(other._parts["dur_us"], np.float64)[rows])
        self.cat += [other.cat[i] for i in rows]
        self.name += [other.name[i] for i in rows]
        self._made.clear()

    @property
    def dur_ns(self) -> np.ndarray:
        """`dur` in integer ns, each event's own round(dur * 1000) (int64, read-only); made once."""
        if "dur_ns" not in self._made:
            dur_us = _joined(self._parts["dur_us"], np.float64)
            self._made["dur_ns"] = _read_only(np.rint(dur_us * 1000).astype(np.int64))
        return self._made["dur_ns"]


@dataclass
class Calls(Picked):
    """Picked without the args Structs (launch calls, annotation ranges): of their args only
    "correlation" and "External id" are read."""

    STRUCT: ClassVar[type] = _Call
    KEEPS_ARGS: ClassVar[bool] = False


@dataclass
class Ops(Picked):
    """CPU operators as columns, and each one's args (_OpArgs: its shapes as raw JSON, read by
    parsers/_shapes.py for the operators that launched GPU work, `inputs`)."""

    STRUCT: ClassVar[type] = _Op
    CORRELATED: ClassVar[bool] = False

    def inputs(self, i: int) -> _OpArgs:
        """Operator i's args "Input Dims", "Input type" and "Concrete Inputs" as raw JSON (null
        where absent) and its counts (flops, kernel_num_gb, kernel_flop)."""
        return self.args[i] or _NO_ARGS

    def shapes_recorded(self) -> bool:
        """Whether any operator has its "Input Dims" (torch.profiler's record_shapes=True)."""
        return any(a is not None and bytes(a.dims) != b"null" for a in self.args)

    def release_inputs(self) -> None:
        """Drop every operator's args: their raw JSON are views of the file's bytes, which they
        keep alive (a 375 MB trace's, through every later stage); inputs() is no longer asked."""
        self.args = []


@dataclass
class Instants(Launches):
    """CPU instant events as columns (a launch's, and the name), their args a memory event's
    (_MemArgs)."""

    STRUCT: ClassVar[type] = _Instant
    CORRELATED: ClassVar[bool] = False
    name: list[str] = field(default_factory=Names)

    def extend(self, events: list, cats: list[str], ts_ns: np.ndarray | None = None) -> None:
        super().extend(events, cats, ts_ns)
        self.name += map(_NAME, events)


def _labels(values: list) -> np.ndarray | list:
    """A chunk's pid or tid labels: int64 where every one is an integer, else the labels. One
    integer throughout (a chunk's pid, the usual case) is found by a compare of each label with
    the first, ~4x cheaper than numpy's look at each (labels are Id: an int, str or None, so a
    label equal to an int is that int)."""
    if values and type(values[0]) is int and values.count(values[0]) == len(values):
        return np.full(len(values), values[0], dtype=np.int64)
    ints = np.array(values) if values else np.zeros(0, dtype=np.int64)
    return ints if ints.dtype == np.int64 else values  # Int64: within int64; a str or None: not


def _labels_of(parts: list) -> list:
    return [label for part in parts for label in (part.tolist() if isinstance(part, np.ndarray) else part)]


def _ints(args: list, field_of: Any) -> np.ndarray:
    """An args field per event as int64, -1 where args or the field is missing or not an integer."""
    try:
        values = list(map(field_of, args))
    except AttributeError:  # an event without args
        values = []
    if values and set(map(type, values)) == {int}:  # all integers (Int64: within int64): the types looked at
        return np.fromiter(values, dtype=np.int64, count=len(values))  # once, not again by np.array's guess
    return np.array([v if a is not None and type(v := field_of(a)) is int else -1 for a in args], dtype=np.int64)


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False  # shared by every caller: none may change it
    return array


def _joined(parts: list[np.ndarray], dtype: type = np.int64) -> np.ndarray:
    if len(parts) > 1:  # joined once: the next call finds one part
        parts[:] = [np.concatenate(parts)]
    return parts[0] if parts else np.zeros(0, dtype=dtype)
