"""Decoding Kineto trace JSON for parsers/chrome.py: the file's bytes (gunzipped), the
top-level fields, and the events of chosen categories as columns.

Speed and memory: msgspec first splits `traceEvents` into raw JSON values
(views of the file's bytes). Then, CHUNK_EVENTS at a time, each run of events
is decoded once, in place (no copy: `_Source`), into a tagged union on `cat`:
the chosen categories into a Struct with the few fields and args a row needs,
every other known category into an empty Struct (its fields skipped unread).
An event the union refuses (no `cat`, a category not seen yet, a bad field)
goes the slow way, alone: its `cat` decoded, then its Struct, so a damaged
event is named exactly. `ts` stays text until `ts_ns` reads it, exactly,
in one numpy pass. So a 375 MB trace loads in seconds, >10x faster than HTA,
and never holds a Python object per event beyond a chunk (benchmarks/RESULTS.md).
"""
from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import compress
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Annotated, Any, ClassVar, Iterable, Sequence, Union

import msgspec
import numpy as np

from tracelab import limits
from tracelab.errors import TraceFormatError

CHUNK_EVENTS = 2048  # events decoded at a time: bounds the memory held per event, and keeps them in the CPU cache
MISSES_PER_CHUNK = 8  # events the union may refuse in a chunk before the rest goes the slow way
MAX_SKIPPED_CATEGORIES = 256  # categories learnt into the union; past this, the slow way

# Value types checked at decode (limits.py): ids fit int64, durations (us) fit in int64 ns
Int64 = Annotated[int, msgspec.Meta(ge=limits.INT64[0], le=limits.INT64[1])]
Id = Int64 | str | None
Number = Int64 | float | str | None  # args values Kineto writes as integers; others are ignored
DurUs = Annotated[float, msgspec.Meta(ge=-limits.MAX_DUR_NS / 1000, le=limits.MAX_DUR_NS / 1000)]
Nelems = Annotated[float, msgspec.Meta(ge=0, le=2.0**62)] | str | None
# categories Kineto writes that no collector takes: decoded as empty Structs from the start
KNOWN_CATEGORIES = ("cpu_op", "user_annotation", "gpu_user_annotation", "gpu_memcpy", "gpu_memset",
                    "kernel", "cuda_runtime", "cuda_driver", "cpu_instant_event", "python_function",
                    "overhead", "ac2g", "async_cpu_to_gpu", "fwdbwd", "Trace", "cuda_sync",
                    "cuda_profiler_range", "external_correlation", "xpu_runtime", "xpu_driver",
                    "privateuse1_runtime", "privateuse1_driver", "mtia_runtime", "mtia_ccp_events",
                    "hpu_op", "glow_runtime", "collective_comm", "Operator", "Runtime", "Kernel",
                    "Memcpy", "Memset", "Python", "gpu_mem_alloc", "cpu_mem_alloc")


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


class _Category(msgspec.Struct, gc=False):
    """The slow way decodes every event this far, to choose the ones decoded in full."""

    cat: str = ""


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


class _Launch(msgspec.Struct, gc=False):
    """A launch call: only what finds it (correlation) and places it (thread, start)."""

    ts: msgspec.Raw
    pid: Id = None
    tid: Id = None
    args: _LaunchArgs | None = None


_NULL = msgspec.Raw(b"null")
Texts = list[msgspec.Raw] | None  # the events' own JSON texts, where a collector keeps them


class _OpArgs(msgspec.Struct, gc=False):
    """What a CPU operator's work needs but its shapes (Ops.shapes: read again from the event's
    text, only for the operators that launched GPU work, parsers/_shapes.py)."""

    external_id: Number = msgspec.field(default=None, name="External id")
    flops: Number = None  # torch.profiler(with_flops=True) writes it for the ops it counts
    # an Inductor Triton kernel's launch range, compiled with benchmark_kernel: its estimated work
    kernel_num_gb: Number = None
    kernel_flop: Number = None


class _Op(_Event, gc=False):
    """A CPU operator, its args the work's (_OpArgs)."""

    args: _OpArgs | None = None  # type: ignore[assignment]


class _Shapes(msgspec.Struct, gc=False):
    """A CPU operator's shapes (record_shapes=True), as raw JSON."""

    dims: msgspec.Raw = msgspec.field(default=_NULL, name="Input Dims")
    types: msgspec.Raw = msgspec.field(default=_NULL, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=_NULL, name="Concrete Inputs")


class _ShapesOf(msgspec.Struct, gc=False):
    args: _Shapes | None = None


_NO_SHAPES = _Shapes()
_SHAPES_DECODER = msgspec.json.Decoder(_ShapesOf)


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
_CAT, _PID, _TID, _TS, _ARGS, _NAME, _DUR = map(attrgetter, ("cat", "pid", "tid", "ts", "args", "name", "dur"))
_CORRELATION, _EXTERNAL_ID = attrgetter("correlation"), attrgetter("external_id")
_POW10 = 10 ** np.arange(20, dtype=np.uint64)
_DIGIT, _DOT, _MINUS, _SEP = ord("0"), ord("."), ord("-"), 0  # NUL: in no valid JSON value


def ts_ns(texts: Sequence[msgspec.Raw | bytes]) -> list[int]:
    """`ts` texts (JSON values, microseconds) in integer ns, exact as written, rounded half
    to even past the ns: plain decimals (what Kineto writes: ints, or 3 decimals) in numpy,
    texts of one length and layout as one matrix (`_aligned_ns`), the rest byte by byte
    (`_plain_ns`); others (exponents, more decimals, strings) through Decimal. ValueError
    for a ts that is no number, or one beyond +-limits.MAX_TIME_NS (damage, not a time)."""
    return _ts_array(texts).tolist()


def _ts_array(texts: Sequence[msgspec.Raw | bytes]) -> np.ndarray:
    """ts_ns() as an int64 array."""
    if not texts:
        return np.zeros(0, dtype=np.int64)
    text = np.frombuffer(b"\0".join(texts) + b"\0", dtype=np.uint8)  # NUL: in no valid JSON value
    ns = _aligned_ns(text, len(texts), len(texts[0]))
    if ns is not None:
        return ns
    ns, plain = _plain_ns(text, len(texts))
    out = ns.astype(np.int64)
    for i in np.flatnonzero(~plain).tolist():
        out[i] = _decimal_ns(texts[i])
    return out


def _aligned_ns(text: np.ndarray, n: int, width: int) -> np.ndarray | None:
    """ns of n NUL-ended texts that all are `width` long, digits in the same columns and, if
    any, the decimal point in the same column, at most 3 from the end; None for any other."""
    if len(text) != n * (width + 1):
        return None
    chars = text.reshape(n, width + 1)
    if chars[:, width].any():  # n NULs in all, each after `width` bytes: every text is that long
        return None
    digits = chars[:, :width] - _DIGIT  # uint8: wraps below "0"
    is_digit = (digits < 10).all(axis=0)
    dots = np.flatnonzero(~is_digit)
    if len(dots) > 1 or (len(dots) and not (chars[:, dots[0]] == _DOT).all()):
        return None
    decimals = width - 1 - int(dots[0]) if len(dots) else 0
    n_digits = width - len(dots)
    if decimals > 3 or n_digits - decimals + 3 > 19:
        return None  # at most 19 digits of ns: below 1e19, within uint64
    weights = np.zeros(width, dtype=np.uint64)  # each digit column's power of ten, in ns
    weights[is_digit] = _POW10[3 - decimals:3 - decimals + n_digits][::-1]
    ns = digits.astype(np.uint64) @ weights  # every partial sum < 1e19: no wrap
    return ns.astype(np.int64) if not len(ns) or ns.max() <= limits.MAX_TIME_NS else None


def _plain_ns(text: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """ns (uint64) of n NUL-ended numbers, and which were plain: [-]digits[.digits] with at
    most 3 decimals and at most limits.MAX_TIME_NS ns; the others' ns are meaningless."""
    sep = text == _SEP
    ends = np.flatnonzero(sep)  # one per text: NUL is in no valid JSON value
    starts = np.r_[0, ends[:-1] + 1]
    digit = (text - _DIGIT) < 10  # uint8 wraps below "0"
    dot, minus = text == _DOT, text == _MINUS
    odd = np.add.reduceat((~(digit | dot | minus | sep)).view(np.uint8), starts) > 0
    negative = minus[starts]
    odd |= np.add.reduceat(minus.view(np.uint8), starts) > negative
    odd |= np.add.reduceat(dot.view(np.uint8), starts) > 1
    through = np.cumsum(digit, dtype=np.int64)  # digits up to and including each byte
    n_digits = np.diff(np.r_[0, through[ends]])
    decimals = np.zeros(n, dtype=np.int64)
    dots = np.flatnonzero(dot)
    owner = np.searchsorted(ends, dots)
    decimals[owner] = through[ends[owner]] - through[dots]
    odd |= (decimals > 3) | (n_digits == 0) | (n_digits - decimals + 3 > 19)
    after = through[ends][np.repeat(np.arange(n), np.diff(np.r_[-1, ends]))] - through  # digits after each byte
    places = np.where(digit, np.minimum(after, 19), 0)
    value = np.add.reduceat(np.where(digit, (text - _DIGIT).astype(np.uint64), 0) * _POW10[places], starts)
    ns = value * _POW10[np.clip(3 - decimals, 0, 3)]
    odd |= ns > limits.MAX_TIME_NS
    ns = np.where(negative, (0 - ns.view(np.int64)).view(np.uint64), ns)
    return ns, ~odd


def _decimal_ns(text: msgspec.Raw | bytes) -> int:
    try:
        us = msgspec.json.decode(text, type=Decimal)
        ns = int(us.scaleb(3).to_integral_value())
    except msgspec.ValidationError as e:
        raise ValueError(f"ts: {e}") from None
    except (ArithmeticError, ValueError):  # Infinity, or an exponent past Decimal's range
        ns = limits.MAX_TIME_NS + 1
    if not -limits.MAX_TIME_NS <= ns <= limits.MAX_TIME_NS:
        raise ValueError(f"ts {bytes(text).decode(errors='replace')[:40]} us is beyond +-2**62 ns")
    return ns


@dataclass
class Launches:
    """Launch calls as columns: only what finds them (args correlation) and places them
    (process, thread, start)."""

    STRUCT: ClassVar[type] = _Launch
    KEEPS_TEXT: ClassVar[bool] = False  # extend() keeps each event's text (`raws`)
    pid: list = field(default_factory=list)
    tid: list = field(default_factory=list)
    ts_parts: list[np.ndarray] = field(default_factory=list)
    args: list[Any] = field(default_factory=list)
    _made: dict[str, Any] = field(default_factory=dict, repr=False)  # columns as arrays, made once

    @property
    def ts_ns(self) -> np.ndarray:
        """`ts` in integer ns (int64)."""
        return _joined(self.ts_parts)

    def ids(self, column: str) -> np.ndarray | None:
        """The `pid` or `tid` labels as int64 (read-only) where every one converts (the usual
        case), else None (then _kineto.to_ints names them); made once."""
        if column not in self._made:
            try:
                self._made[column] = _read_only(np.array(getattr(self, column), dtype=np.int64))
            except (TypeError, ValueError):
                self._made[column] = None
        return self._made[column]

    def extend(self, events: list, cats: list[str], raws: Texts, ts_ns: np.ndarray | None = None) -> None:
        """Add decoded events, of these categories (not kept here), from these texts (None: not
        kept, KEEPS_TEXT false); `ts_ns`: their `ts` read already (else read here)."""
        self.ts_parts.append(_ts_array(list(map(_TS, events))) if ts_ns is None else ts_ns)
        self.pid += map(_PID, events)
        self.tid += map(_TID, events)
        self.args += map(_ARGS, events)


@dataclass
class Picked(Launches):
    """Events of some categories as columns (lists): a launch's, and their category, name
    and duration; repeated names shared."""

    STRUCT: ClassVar[type] = _Event
    CORRELATED: ClassVar[bool] = True  # its args have a "correlation"
    cat: list[str] = field(default_factory=list)
    dur_us: list[float] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    _names: dict[str, str] = field(default_factory=dict)
    _external_parts: list[np.ndarray] = field(default_factory=list)
    _correlation_parts: list[np.ndarray] = field(default_factory=list)

    def extend(self, events: list[_Event], cats: list[str], raws: Texts, ts_ns: np.ndarray | None = None) -> None:
        """Add decoded events, of these categories (nothing is added when one is refused)."""
        seen = len(self._names)
        names = list(map(_NAME, events))
        names = list(map(self._names.setdefault, names, names))  # repeated names shared
        if len(self._names) > seen and (complaint := limits.long_name(max(map(len, itertools.islice(
                self._names, seen, None))))):  # the names new to this trace: a long one is in there
            for name in list(itertools.islice(self._names, seen, None)):  # refused: the slow way sees them again
                del self._names[name]
            raise ValueError(f"name: {complaint}")
        super().extend(events, cats, raws, ts_ns)
        self.cat += cats
        self.dur_us += map(_DUR, events)
        self.name += names
        args = self.args[len(self.args) - len(events):]
        self._external_parts.append(_ints(args, _EXTERNAL_ID))  # while the events are in the CPU cache
        if self.CORRELATED:
            self._correlation_parts.append(_ints(args, _CORRELATION))

    @property
    def dur_ns(self) -> np.ndarray:
        """`dur` in integer ns, each event's own round(dur * 1000) (int64, read-only); made once."""
        if "dur_ns" not in self._made:
            self._made["dur_ns"] = _read_only(np.rint(np.array(self.dur_us, dtype=np.float64) * 1000).astype(np.int64))
        return self._made["dur_ns"]

    @property
    def external_id(self) -> np.ndarray:
        """args "External id" per event, -1 where it is missing or not an integer."""
        return _joined(self._external_parts)

    @property
    def correlation(self) -> np.ndarray:
        """args "correlation" per event, -1 where it is missing or not an integer."""
        return _joined(self._correlation_parts)


@dataclass
class Ops(Picked):
    """CPU operators as columns, their args the work's (_OpArgs) and each one's text, whose
    shapes parsers/_shapes.py reads for the operators that launched GPU work (`shapes`)."""

    STRUCT: ClassVar[type] = _Op
    CORRELATED: ClassVar[bool] = False
    KEEPS_TEXT: ClassVar[bool] = True
    raw: list[msgspec.Raw] = field(default_factory=list)

    def extend(self, events: list[_Event], cats: list[str], raws: Texts, ts_ns: np.ndarray | None = None) -> None:
        super().extend(events, cats, raws, ts_ns)
        self.raw += raws

    def shapes(self, i: int) -> _Shapes:
        """Operator i's args "Input Dims", "Input type" and "Concrete Inputs" as raw JSON (null where absent)."""
        return _SHAPES_DECODER.decode(self.raw[i]).args or _NO_SHAPES


@dataclass
class Instants(Launches):
    """CPU instant events as columns (a launch's, and the name), their args a memory event's
    (_MemArgs)."""

    STRUCT: ClassVar[type] = _Instant
    name: list[str] = field(default_factory=list)

    def extend(self, events: list, cats: list[str], raws: Texts, ts_ns: np.ndarray | None = None) -> None:
        super().extend(events, cats, raws, ts_ns)
        self.name += map(_NAME, events)


def _ints(args: list, field_of: Any) -> np.ndarray:
    """An args field per event as int64, -1 where args or the field is missing or not an integer."""
    try:
        values = list(map(field_of, args))
    except AttributeError:  # an event without args
        values = [None if a is None else field_of(a) for a in args]
    ints = np.array(values) if values else np.zeros(0, dtype=np.int64)
    if ints.dtype == np.int64:  # every one an integer (Int64: within int64; a float, str or None: not)
        return ints
    return np.array([v if type(v) is int else -1 for v in values], dtype=np.int64)


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False  # shared by every caller: none may change it
    return array


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    if len(parts) > 1:  # joined once: the next call finds one part
        parts[:] = [np.concatenate(parts)]
    return parts[0] if parts else np.zeros(0, dtype=np.int64)


def _array(raws: Iterable[msgspec.Raw]) -> bytes:
    return b"[" + b",".join(raws) + b"]"


def read_bytes(path: Path) -> bytearray:
    """The file's bytes, gunzipped when gzip (limits.read_trace_bytes); a TraceFormatError
    for unreadable, empty, oversized or damaged files."""
    data = limits.read_trace_bytes(path)
    if not data or data.isspace():
        raise TraceFormatError(path, "empty file")
    return data


def decode(path: Path, data: bytes | bytearray) -> Trace:
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


def _check_json(path: Path, data: bytes | bytearray) -> None:
    """Raise if `data` is not JSON at all (the typed decode stops at the first wrong type)."""
    try:
        msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        raise TraceFormatError(path, f"not valid JSON: {e}") from None
    except (UnicodeDecodeError, RecursionError) as e:
        raise limits.json_error(path, e) from None


def _address(buffer: Any) -> int:
    return np.frombuffer(buffer, dtype=np.uint8).ctypes.data


class _Source:
    """The trace's bytes, from which a run of consecutive events of `traceEvents` decodes as
    one JSON array without a copy: the byte before the run (`[`, `,` or a space) and the
    one after it (`]`, `,` or a space) become `[` and `]` for the decode, then are put
    back. Where the raw values are not views of `data` (a bytes object, or a msgspec that
    copies), each run is joined into a new array instead."""

    def __init__(self, data: bytes | bytearray, raws: list[msgspec.Raw]):
        self.data = data if isinstance(data, bytearray) and raws else None
        if self.data is not None:
            self.view, self.base = memoryview(self.data), _address(self.data)
            if self._span(raws) is None:
                self.data = None

    def _span(self, part: list[msgspec.Raw]) -> tuple[int, int] | None:
        """Where the run lies in data, with a byte free on either side; None if it does not."""
        first, last = part[0], part[-1]
        start, end = _address(first) - self.base, _address(last) - self.base + len(last)
        if not (0 < start < end < len(self.data)):
            return None
        if self.view[start:start + len(first)] != first or self.view[end - len(last):end] != last:
            return None
        return start, end

    def decode(self, decoder: msgspec.json.Decoder, part: list[msgspec.Raw]) -> list:
        span = None if self.data is None else self._span(part)
        if span is None:
            return decoder.decode(_array(part))
        start, end = span
        before, after = self.data[start - 1], self.data[end]
        self.data[start - 1], self.data[end] = 0x5B, 0x5D  # "[", "]"
        try:
            return decoder.decode(self.view[start - 1:end + 1])
        finally:
            self.data[start - 1], self.data[end] = before, after


class _Union:
    """A decoder of events into a tagged union on `cat`: each chosen category into its
    group's Struct, each other category seen into an empty Struct; unknown categories are
    learnt from the events it refuses (up to MAX_SKIPPED_CATEGORIES)."""

    def __init__(self, groups: list[tuple[set[str], type]]):
        self.chosen = tuple((tuple(sorted(cats)), collector.STRUCT) for cats, collector in groups)
        names = [cat for cats, _ in self.chosen for cat in cats]
        self.usable = len(names) == len(set(names))  # no category in two groups
        self.chosen_names = frozenset(names)
        self.skipped = frozenset(KNOWN_CATEGORIES) - self.chosen_names
        self.decoder, self.code_of, self.group_by_code, self.cat_by_code = _union_decoder(self.chosen, self.skipped)

    def learn(self, cats: Iterable[str]) -> None:
        """Skip these categories from now on, unless chosen or too many are learnt."""
        new = set(cats) - self.skipped - self.chosen_names
        if new and len(self.skipped) + len(new) <= MAX_SKIPPED_CATEGORIES:
            self.skipped |= new
            self.decoder, self.code_of, self.group_by_code, self.cat_by_code = _union_decoder(self.chosen, self.skipped)

    def deal(self, events: list, raws: list[msgspec.Raw], picked: list) -> None:
        """Hand the decoded events (of these texts) to their groups' collectors, the `ts` of all read at once."""
        code = np.fromiter(map(self.code_of.__getitem__, map(type, events)), dtype=np.int16, count=len(events))
        group = self.group_by_code[code]
        dealt = [(out, rows, _taken(events, rows)) for g, out in enumerate(picked)
                 if len(rows := np.flatnonzero(group == g))]
        if not dealt:
            return
        ts_ns = _ts_array(list(itertools.chain.from_iterable(map(_TS, chosen) for _, _, chosen in dealt)))
        end = 0
        for out, rows, chosen in dealt:
            codes, end = code[rows], end + len(rows)
            cats = ([self.cat_by_code[codes[0]]] * len(rows) if (codes == codes[0]).all()  # one category: the usual
                    else self.cat_by_code[codes].tolist())
            out.extend(chosen, cats, _taken(raws, rows) if out.KEEPS_TEXT else None, ts_ns[end - len(rows):end])


def _taken(items: list, at: np.ndarray) -> list:
    """The items at these indices (at least one)."""
    return [items[int(at[0])]] if len(at) == 1 else list(itemgetter(*at.tolist())(items))


@functools.lru_cache(maxsize=64)
def _union_decoder(chosen: tuple[tuple[tuple[str, ...], type], ...], skipped: frozenset[str]
                   ) -> tuple[msgspec.json.Decoder, dict[type, int], np.ndarray, np.ndarray]:
    """The decoder of a list of the union; per Struct type its code; per code its group (-1:
    skipped) and category; made once per process for each choice (a trace rarely teaches a
    category)."""
    types: dict[type, tuple[int, str]] = {}
    for g, (cats, struct) in enumerate(chosen):
        for cat in cats:
            types[msgspec.defstruct(f"_{struct.__name__}_{g}", [], bases=(struct,), tag_field="cat", tag=cat,
                                    gc=False)] = (g, cat)
    for cat in sorted(skipped):
        types[msgspec.defstruct("_Skipped", [], tag_field="cat", tag=cat, gc=False)] = (-1, cat)
    decoder = msgspec.json.Decoder(list[Union[tuple(types)]])  # type: ignore[misc]
    groups, cats = zip(*types.values())
    return (decoder, {t: code for code, t in enumerate(types)}, np.array(groups, dtype=np.int16),
            np.array(cats, dtype=object))


_AT_INDEX = re.compile(r"at `\$\[(\d+)\]")


def pick(path: Path, data: bytes | bytearray, raws: list[msgspec.Raw], groups: list[tuple[set[str], type]]) -> list:
    """Per (categories, collector) group, the events whose `cat` is among the categories,
    in a new collector (module docstring: the union first, the slow way for what it refuses)."""
    picked = [collector() for _, collector in groups]
    union, source = _Union(groups), _Source(data, raws)
    tail = _uncategorised_tail(raws)
    try:
        for first in range(0, tail, CHUNK_EVENTS):
            _pick_chunk(path, raws[first:min(first + CHUNK_EVENTS, tail)], first, groups, picked, union, source)
        if tail < len(raws):
            _slow(path, raws[tail:], tail, groups, picked, union)
    except RecursionError as e:
        raise limits.json_error(path, e) from None
    return picked


def _uncategorised_tail(raws: list[msgspec.Raw], most: int = 4096, with_cat: int = 8) -> int:
    """Where the events at the end start that go the slow way at once: Kineto ends its traces with
    metadata events (`ph` M, with no `cat`) among a few others; the union would refuse each, after
    decoding the chunk up to it, and decode that much again. The run reaches back (at most
    `most` events) to just after the (with_cat + 1)-th event from the end with `"cat"` in its
    text; the slow way reads any event right, in order."""
    tail, seen = len(raws), 0
    while tail > max(len(raws) - most, 0):
        if b'"cat"' in bytes(raws[tail - 1]):
            if seen == with_cat:
                break
            seen += 1
        tail -= 1
    return tail


def _pick_chunk(path: Path, part: list[msgspec.Raw], first: int, groups: list, picked: list, union: _Union,
                source: _Source) -> None:
    """The chunk through the union; each event it refuses the slow way, alone, up to
    MISSES_PER_CHUNK; then the rest of the chunk the slow way (which names a bad event:
    whatever the union path raises for one, the slow way raises again)."""
    at, misses = 0, 0
    while union.usable and misses < MISSES_PER_CHUNK and at < len(part):
        rest = part[at:]
        refused = None
        try:
            try:
                events = source.decode(union.decoder, rest)
            except msgspec.ValidationError as e:  # it names the event: `$[i]`
                if (found := _AT_INDEX.search(str(e))) is None:
                    break
                refused, misses = int(found.group(1)), misses + 1
                events = source.decode(union.decoder, rest[:refused]) if refused else []
            union.deal(events, rest, picked)
        except ValueError:  # bad UTF-8, a ts or name out of bounds
            break
        if refused is None:
            return
        _slow(path, rest[refused:refused + 1], first + at + refused, groups, picked, union)
        at += refused + 1
    if at < len(part):
        _slow(path, part[at:], first + at, groups, picked, union)


def _slow(path: Path, part: list[msgspec.Raw], first: int, groups: list, picked: list, union: _Union) -> None:
    """Every event's `cat` decoded, then the events of each group again, into its Struct."""
    cats: list[str] = []
    try:
        cats = list(map(_CAT, _CATEGORY_DECODER.decode(_array(part))))
        for (group, collector), out in zip(groups, picked):
            chosen = list(map(group.__contains__, cats))
            if any(chosen):
                texts = list(compress(part, chosen))
                events = msgspec.json.decode(_array(texts), type=list[collector.STRUCT])
                out.extend(events, list(compress(cats, chosen)), texts)
    except ValueError as e:  # msgspec's ValidationError, bad UTF-8, a value out of range
        raise _located(path, part, first, cats, groups) or TraceFormatError(
            path, f"unexpected event in traceEvents[{first}:{first + len(part)}]: {_plain(e)}") from None
    union.learn(cats)


def _located(path: Path, part: list[msgspec.Raw], first: int, cats: list[str],
             groups: list[tuple[set[str], type]]) -> TraceFormatError | None:
    """The first bad event of a run that failed, decoded one by one (the error path only):
    its index in traceEvents, category, name and the field at fault."""
    for i, (raw, cat) in enumerate(zip(part, cats)):
        for group, collector in groups:
            if cat in group:
                try:
                    collector().extend(msgspec.json.decode(_array([raw]), type=list[collector.STRUCT]), [cat], [raw])
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
