"""Decoding Kineto trace JSON for parsers/chrome.py: the file's bytes (gunzipped), the
top-level fields, and the events of chosen categories as columns.

Speed and memory: msgspec first splits `traceEvents` into raw JSON values;
then, CHUNK_EVENTS at a time, decodes only each event's `cat`, and decodes
again, into a typed Struct with the few fields and args a row needs, only the
events of the categories used (GPU rows, annotations, launch calls). So a
375 MB trace loads in seconds, >10x faster than HTA, and never holds a Python
object per event of the other categories (benchmarks/RESULTS.md).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import compress
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Any, ClassVar, Iterable

import msgspec
import numpy as np

from tracelab import limits
from tracelab.errors import TraceFormatError

CHUNK_EVENTS = 16384  # events decoded at a time: bounds the memory held per event

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
    dtype: Any = None
    correlation: Number = None
    process_group: Any = msgspec.field(default=None, name="Process Group Name")


class _Category(msgspec.Struct, gc=False):
    """Every event is decoded this far, to choose the few decoded in full."""

    cat: str = ""


class _Event(msgspec.Struct, gc=False):
    """A chosen event in full; `ts` an int as written (old traces: integer epoch us) or a
    float, exact to the ns below FLOAT_EXACT_US (_decode re-reads others into _ExactEvent)."""

    cat: str
    ts: int | float
    name: str = ""
    pid: Id = None
    tid: Id = None
    dur: DurUs = 0.0
    args: _Args | None = None


class _ExactEvent(_Event, gc=False):
    ts: Decimal  # a float cannot hold epoch microseconds to the ns


class _LaunchArgs(msgspec.Struct, gc=False):
    correlation: Number = None


class _Launch(msgspec.Struct, gc=False):
    """A launch call: only what finds it (correlation) and places it (thread, start)."""

    ts: int | float
    pid: Id = None
    tid: Id = None
    args: _LaunchArgs | None = None


class _ExactLaunch(_Launch, gc=False):
    ts: Decimal


class Trace(msgspec.Struct):
    traceEvents: list[msgspec.Raw]
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: int | None = None
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None


_TRACE_DECODER = msgspec.json.Decoder(Trace)
_CATEGORY_DECODER = msgspec.json.Decoder(list[_Category])
_CAT, _PID, _TID, _TS, _ARGS, _NAME = map(attrgetter, ("cat", "pid", "tid", "ts", "args", "name"))


# |ts| below 2**33 us (2.4 hours, any trace whose ts count from baseTimeNanoseconds): the
# float of a ts written with 3 decimals, times 1000, is within 1e-3 of its integer ns.
FLOAT_EXACT_US = 2.0**33


def _fast_ns(events: list[_Event] | list[_Launch]) -> list[int] | None:
    """`ts` in integer ns from ints or floats, or None where that would not be exact (a
    fractional ts past FLOAT_EXACT_US, or one with more than 3 decimals) or out of range."""
    ts = list(map(_TS, events))
    if all(type(t) is int for t in ts):  # integer microseconds (older Kineto): exact at any size
        if ts and max(max(ts), -min(ts)) > limits.MAX_TIME_NS // 1000:
            return None  # the exact path names it
        return (np.array(ts, dtype=np.int64) * 1000).tolist()
    ns = np.array(ts, dtype=np.float64) * 1000
    if len(ns) and not (np.abs(ns).max() < FLOAT_EXACT_US * 1000 and np.abs(ns - np.rint(ns)).max() < 0.01):
        return None
    return np.rint(ns).astype(np.int64).tolist()


def _decode(collector, data: bytes) -> tuple[list, list[int]]:
    """The events of a JSON array into the collector's Struct, and their `ts` in integer ns:
    through ints and floats (fast), else again through Decimal (exact, as written), and so
    directly for the collector's later chunks (a trace's ts are alike: not decoded twice)."""
    if not collector.exact:
        try:
            events = collector.DECODER.decode(data)
            if (ns := _fast_ns(events)) is not None:
                return events, ns
        except msgspec.ValidationError:  # a ts the fast Struct refuses (a string): the exact one says
            pass
    collector.exact = True
    events = collector.EXACT.decode(data)
    return events, _ts_ns(events)


def _ts_ns(events: list[_ExactEvent] | list[_ExactLaunch]) -> list[int]:
    """`ts` in integer ns; ValueError past +-limits.MAX_TIME_NS (damage, not a time)."""
    try:
        ns = [int(t.scaleb(3).to_integral_value()) for t in map(_TS, events)]
    except (ArithmeticError, ValueError):  # Infinity, or an exponent past Decimal's range
        ns = [limits.MAX_TIME_NS + 1] * len(events)
    bound = limits.MAX_TIME_NS
    if ns and (max(ns) > bound or min(ns) < -bound):
        bad = next(t for t, n in zip(map(_TS, events), ns) if not -bound <= n <= bound)
        raise ValueError(f"ts {bad} us is beyond +-2**62 ns")
    return ns


@dataclass
class Picked:
    """Events of some categories as columns (lists); repeated names shared."""

    DECODER: ClassVar = msgspec.json.Decoder(list[_Event])
    EXACT: ClassVar = msgspec.json.Decoder(list[_ExactEvent])
    cat: list[str] = field(default_factory=list)
    pid: list = field(default_factory=list)
    tid: list = field(default_factory=list)
    dur_us: list[float] = field(default_factory=list)
    ts_ns: list[int] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    args: list[_Args | None] = field(default_factory=list)
    _names: dict[str, str] = field(default_factory=dict)
    exact: bool = False  # ts decoded through Decimal (_decode)

    def add(self, data: bytes) -> None:
        """Add the events of a JSON array."""
        events, ts_ns = _decode(self, data)
        self.cat += map(_CAT, events)
        self.pid += map(_PID, events)
        self.tid += map(_TID, events)
        self.dur_us += [e.dur for e in events]
        self.ts_ns += ts_ns
        self.name += [self._names.setdefault(e.name, e.name) for e in events]
        self.args += map(_ARGS, events)
        if complaint := limits.long_name(max(map(len, map(_NAME, events)), default=0)):
            raise ValueError(f"name: {complaint}")


@dataclass
class Launches:
    """Launch calls as columns."""

    DECODER: ClassVar = msgspec.json.Decoder(list[_Launch])
    EXACT: ClassVar = msgspec.json.Decoder(list[_ExactLaunch])
    pid: list = field(default_factory=list)
    tid: list = field(default_factory=list)
    ts_ns: list[int] = field(default_factory=list)
    args: list[_LaunchArgs | None] = field(default_factory=list)
    exact: bool = False  # ts decoded through Decimal (_decode)

    def add(self, data: bytes) -> None:
        """Add the events of a JSON array."""
        events, ts_ns = _decode(self, data)
        self.pid += map(_PID, events)
        self.tid += map(_TID, events)
        self.ts_ns += ts_ns
        self.args += map(_ARGS, events)


def _array(raws: Iterable[msgspec.Raw]) -> bytes:
    return b"[" + b",".join(raws) + b"]"


def read_bytes(path: Path) -> bytes | bytearray:
    """The file's bytes, gunzipped when gzip (limits.read_trace_bytes); a TraceFormatError
    for unreadable, empty, oversized or damaged files."""
    data = limits.read_trace_bytes(path)
    if not data or data.isspace():
        raise TraceFormatError(path, "empty file")
    return data


def decode(path: Path, data: bytes) -> Trace:
    """The top-level fields, `traceEvents` left as raw JSON values for pick()."""
    try:
        return _TRACE_DECODER.decode(data)
    except msgspec.ValidationError as e:
        _check_json(path, data)
        raise TraceFormatError(path, f"not a Kineto trace: {e}") from None
    except msgspec.DecodeError as e:
        raise TraceFormatError(path, f"not valid JSON (truncated or damaged?): {e}") from None
    except (UnicodeDecodeError, RecursionError) as e:
        raise limits.json_error(path, e) from None


def _check_json(path: Path, data: bytes) -> None:
    """Raise if `data` is not JSON at all (the typed decode stops at the first wrong type)."""
    try:
        msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        raise TraceFormatError(path, f"not valid JSON: {e}") from None
    except (UnicodeDecodeError, RecursionError) as e:
        raise limits.json_error(path, e) from None


def pick(path: Path, raws: list[msgspec.Raw], groups: list[tuple[set[str], type]]) -> list:
    """Per (categories, collector) group, the events whose `cat` is among the categories,
    in a new collector. CHUNK_EVENTS at a time, every event's `cat` is decoded, and the
    events of each group are decoded again, into the collector's own Struct."""
    picked = [collector() for _, collector in groups]
    for first in range(0, len(raws), CHUNK_EVENTS):
        part = raws[first:first + CHUNK_EVENTS]
        cats: list[str] = []
        try:
            cats = list(map(_CAT, _CATEGORY_DECODER.decode(_array(part))))
            for (group, _), out in zip(groups, picked):
                if chosen := list(compress(part, map(group.__contains__, cats))):
                    out.add(_array(chosen))
        except RecursionError as e:
            raise limits.json_error(path, e) from None
        except ValueError as e:  # msgspec's ValidationError, bad UTF-8, a value out of range
            raise _located(path, part, first, cats, groups) or TraceFormatError(
                path, f"unexpected event in traceEvents[{first}:{first + len(part)}]: {_plain(e)}") from None
    return picked


def _located(path: Path, part: list[msgspec.Raw], first: int, cats: list[str],
             groups: list[tuple[set[str], type]]) -> TraceFormatError | None:
    """The first bad event of a chunk that failed, decoded one by one (the error path only):
    its index in traceEvents, category, name and the field at fault."""
    for i, (raw, cat) in enumerate(zip(part, cats)):
        for group, collector in groups:
            if cat in group:
                try:
                    collector().add(_array([raw]))
                except ValueError as e:
                    return TraceFormatError(path, f"unexpected event traceEvents[{first + i}] "
                                                  f"({cat}{_name_of(raw)}): {_plain(e)}")
    return None


def _name_of(raw: msgspec.Raw) -> str:
    try:
        return f" {msgspec.json.decode(raw, type=_Named).name[:60]!r}"
    except ValueError:
        return ""


class _Named(msgspec.Struct):
    name: str = ""


def _plain(e: ValueError) -> str:
    """The error in words, the field first: 'dur: Expected `float` <= ...', 'invalid UTF-8 (...)'."""
    if isinstance(e, UnicodeDecodeError):
        return f"invalid UTF-8 ({e.reason})"
    return re.sub(r"^(.*) - at `\$\[\d+\]\.(.*)`$", r"\2: \1", str(e))
