"""Decoding Kineto trace JSON for parsers/chrome.py: the file's bytes (gunzipped), the
top-level fields, and the events of chosen categories as columns (`read_events`).

Speed and memory: `traceEvents` is cut into runs of whole events straight from the
bytes (`_layout`, parsers/_kineto_layout: where one object ends, a comma, the next
begins), RUN_BYTES at a time, and each run is decoded once, in place (no copy:
`_Source`), into a tagged union on `cat`: the chosen categories into a Struct with the
few fields and args a row needs, every other known category into an empty Struct (its
fields skipped unread), and at once dealt to its group's collector
(parsers/_kineto_columns), which turns the run's fields into columns while its Structs
are still in the CPU cache (~1,600 events of 320 bytes: ~1 MB of Structs; 16k-event
chunks were ~10% slower). The cut can also fall inside an event (a list of objects in
its args, a name): a run cut there is no JSON array of whole values, which its decode
refuses, and the trace is read the general way instead, as is any file the cut does
not fit. The general way has msgspec split `traceEvents` into
raw values (views of the bytes; ~15% of a parse) and decodes CHUNK_EVENTS of them at
a time the same way. An event the union refuses (no `cat`, a category not seen yet,
a bad field) goes the slow way, alone: its `cat` decoded, then its Struct, so a
damaged event is named exactly. `ts` stays text until parsers/_kineto_ts reads it,
exactly, in numpy. So a 375 MB trace loads in seconds, >10x faster than HTA, and
never holds a Python object per event beyond a chunk but a few columns'
(benchmarks/RESULTS.md).
"""
from __future__ import annotations

import functools
import re
from operator import itemgetter
from pathlib import Path
from typing import Any, Iterable, Union

import msgspec
import numpy as np

from tracelab import limits
from tracelab.errors import TraceFormatError

from ._kineto_columns import _TS, Calls, Instants, Launches, Ops, Picked, _ts_array
from ._kineto_layout import cut
from ._kineto_slow import array as _array, slow as _slow
from ._kineto_ts import ts_ns

__all__ = ["CHUNK_EVENTS", "RUN_BYTES", "Calls", "Instants", "Launches", "Ops", "Picked", "Trace", "decode", "pick",
           "read_bytes", "read_events", "ts_ns"]  # the collectors and ts_ns live in _kineto_columns and _kineto_ts

CHUNK_EVENTS = 2048  # events decoded at a time: bounds the memory held per event, and keeps them in the CPU cache
RUN_BYTES = 512 * 1024  # bytes of events cut from the file for one decode (about CHUNK_EVENTS events of Kineto's)
MISSES_PER_CHUNK = 8  # events the union may refuse in a chunk before the rest goes the slow way
MAX_SKIPPED_CATEGORIES = 256  # categories learnt into the union; past this, the slow way

# categories Kineto writes that no collector takes: decoded as empty Structs from the start
KNOWN_CATEGORIES = ("cpu_op", "user_annotation", "gpu_user_annotation", "gpu_memcpy", "gpu_memset",
                    "kernel", "cuda_runtime", "cuda_driver", "cpu_instant_event", "python_function",
                    "overhead", "ac2g", "async_cpu_to_gpu", "fwdbwd", "Trace", "cuda_sync",
                    "cuda_profiler_range", "external_correlation", "xpu_runtime", "xpu_driver",
                    "privateuse1_runtime", "privateuse1_driver", "mtia_runtime", "mtia_ccp_events",
                    "hpu_op", "glow_runtime", "collective_comm", "Operator", "Runtime", "Kernel",
                    "Memcpy", "Memset", "Python", "gpu_mem_alloc", "cpu_mem_alloc")


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

    def __init__(self, data: bytes | bytearray, raws: list[msgspec.Raw] | None = None):
        self.data = data if isinstance(data, bytearray) and (raws is None or raws) else None
        if self.data is not None:
            self.view, self.base = memoryview(self.data), _address(self.data)
            if raws is not None and self._span(raws) is None:
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
        return self.decode_run(decoder, *span)

    def decode_run(self, decoder: msgspec.json.Decoder, start: int, end: int) -> list:
        """data[start:end], a run of whole events with a byte free on either side, as a JSON array."""
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

    def deal(self, events: list, picked: list) -> None:
        """Hand the decoded events to their groups' collectors, the `ts` of all read at once."""
        code = np.fromiter(map(self.code_of.__getitem__, map(type, events)), dtype=np.int16, count=len(events))
        group = self.group_by_code[code]
        ends = np.cumsum(np.bincount(group + 1, minlength=len(picked) + 1))  # skipped (-1) first, then group by group
        if ends[0] == len(events):
            return
        at = np.argsort(group, kind="stable")[ends[0]:]  # the chosen events' places, by group, each in trace order
        chosen = _taken(events, at)
        ts = _ts_array(list(map(_TS, chosen)))
        ends = (ends - ends[0]).tolist()
        for g, out in enumerate(picked):
            first, end = ends[g], ends[g + 1]
            if first == end:
                continue
            codes = code[at[first:end]]
            cats = ([self.cat_by_code[codes[0]]] * len(codes) if (codes == codes[0]).all()  # one category: the usual
                    else self.cat_by_code[codes].tolist())
            out.extend(chosen[first:end], cats, ts[first:end])


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
_RAWS_DECODER = msgspec.json.Decoder(list[msgspec.Raw])


class _Unsplit(Exception):
    """A run cut from the bytes is no JSON array of whole events: read the trace the general way."""


def read_events(path: Path, data: bytes | bytearray, groups: list[tuple[set[str], type]]) -> tuple[Trace, list]:
    """The trace's top-level fields (traceEvents emptied) and, per (categories, collector)
    group, the events whose `cat` is among the categories, in a new collector: by runs cut
    from the bytes where the layout allows (module docstring), else by pick()."""
    layout = _layout(data)
    if layout is not None:
        try:
            trace, picked = _pick_runs(path, data, *layout, groups)
            trace.traceEvents = []
            return trace, picked
        except _Unsplit:
            pass
    trace = decode(path, data)
    picked = pick(path, data, trace.traceEvents, groups)
    trace.traceEvents = []
    return trace, picked


def _layout(data: bytes | bytearray) -> tuple[list[tuple[int, int]], bytes, bytes] | None:
    """The runs of RUN_BYTES or more cut from the bytes (parsers/_kineto_layout.cut)."""
    return cut(data, RUN_BYTES)


def _top_level(path: Path, head: bytes, tail: bytes) -> Trace:
    """The fields of the text before traceEvents and of the text after the runs, the events of
    the latter (its end of traceEvents) as raw values; _Unsplit where either is not JSON."""
    try:
        before = _TRACE_DECODER.decode(head + b'"traceEvents": []}')
        trace = _TRACE_DECODER.decode(b'{"traceEvents": [' + tail)
    except (ValueError, RecursionError):  # the general way names the fault
        raise _Unsplit from None
    for name in Trace.__struct_fields__:
        if name != "traceEvents" and getattr(before, name) is not None:
            setattr(trace, name, getattr(before, name))
    return trace


def _pick_runs(path: Path, data: bytearray, runs: list[tuple[int, int]], head: bytes, tail: bytes,
               groups: list[tuple[set[str], type]]) -> tuple[Trace, list]:
    """read_events by runs: each through the union; a run it refuses is split into raw values
    and goes _pick_chunk's way; then the events after the runs as pick() reads them."""
    trace = _top_level(path, head, tail)
    picked = [collector() for _, collector in groups]
    union, source, first = _Union(groups), _Source(data), 0
    try:
        for start, end in runs:
            first += _pick_run(path, start, end, first, groups, picked, union, source)
        _pick_raws(path, trace.traceEvents, first, groups, picked, union, _Source(tail))
    except RecursionError as e:
        raise limits.json_error(path, e) from None
    return trace, picked


def _pick_run(path: Path, start: int, end: int, first: int, groups: list, picked: list, union: "_Union",
              source: _Source) -> int:
    """One run of events, traceEvents[first:...]: the union's decode dealt at once, else split and
    read by _pick_chunk (which names a bad event); how many events it held. _Unsplit where the
    run is no array of whole events."""
    if union.usable and MISSES_PER_CHUNK > 0:
        try:
            events = source.decode_run(union.decoder, start, end)
            union.deal(events, picked)
            return len(events)
        except ValueError:  # an event the union refuses or a collector refuses (named below), or a wrong cut
            pass
    try:
        raws = source.decode_run(_RAWS_DECODER, start, end)
    except ValueError:
        raise _Unsplit from None
    _pick_chunk(path, raws, first, groups, picked, union, source)
    return len(raws)




def pick(path: Path, data: bytes | bytearray, raws: list[msgspec.Raw], groups: list[tuple[set[str], type]]) -> list:
    """Per (categories, collector) group, the events whose `cat` is among the categories,
    in a new collector (module docstring: the union first, the slow way for what it refuses)."""
    picked = [collector() for _, collector in groups]
    try:
        _pick_raws(path, raws, 0, groups, picked, _Union(groups), _Source(data, raws))
    except RecursionError as e:
        raise limits.json_error(path, e) from None
    return picked


def _pick_raws(path: Path, raws: list[msgspec.Raw], offset: int, groups: list, picked: list, union: "_Union",
               source: _Source) -> None:
    """The events of these raw values, traceEvents[offset:...], CHUNK_EVENTS at a time."""
    tail = _uncategorised_tail(raws)
    for first in range(0, tail, CHUNK_EVENTS):
        _pick_chunk(path, raws[first:min(first + CHUNK_EVENTS, tail)], offset + first, groups, picked, union, source)
    if tail < len(raws):
        _slow(path, raws[tail:], offset + tail, groups, picked, union)


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
            union.deal(events, picked)
        except ValueError:  # bad UTF-8, a ts or name out of bounds
            break
        if refused is None:
            return
        _slow(path, rest[refused:refused + 1], first + at + refused, groups, picked, union)
        at += refused + 1
    if at < len(part):
        _slow(path, part[at:], first + at, groups, picked, union)
