"""Decoding Kineto trace JSON for parsers/chrome.py: the file's bytes (gunzipped), the
top-level fields, and the events of chosen categories as columns (`read_events`).

Speed and memory: `traceEvents` is cut into runs of whole events straight from the
bytes (`array_layout`, parsers/_kineto_layout: where one object ends, a comma, the next
begins), RUN_BYTES at a time, and each run is decoded once, in place (no copy:
`Source`), into a tagged union on `cat`: the chosen categories into a Struct with the
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

import re
from pathlib import Path
from typing import Any

import msgspec

from tracelab.core import limits
from tracelab.core.errors import TraceFormatError

from ._kineto_columns import Calls, Instants, Launches, Ops, Picked
from ._kineto_layout import cut
from ._kineto_slow import slow as _slow
from ._kineto_union import Source, _Union
from ._kineto_ts import ts_ns

__all__ = ["CHUNK_EVENTS", "RUN_BYTES", "Calls", "Instants", "Launches", "Ops", "Picked", "Trace", "decode", "pick",
           "read_bytes", "read_events", "ts_ns"]  # the collectors and ts_ns live in _kineto_columns and _kineto_ts

CHUNK_EVENTS = 2048  # events decoded at a time: bounds the memory held per event, and keeps them in the CPU cache
RUN_BYTES = 512 * 1024  # bytes of events cut from the file for one decode (about CHUNK_EVENTS events of Kineto's)
MISSES_PER_CHUNK = 8  # events the union may refuse in a chunk before the rest goes the slow way


class Trace(msgspec.Struct):
    traceEvents: list[msgspec.Raw]
    schemaVersion: Any = None
    deviceProperties: Any = None
    computeProperties: Any = None  # the key PyTorch's profiler wrote before deviceProperties
    distributedInfo: Any = None
    baseTimeNanoseconds: int | None = None
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None


_TRACE_DECODER = msgspec.json.Decoder(Trace)
_EXECUTION_TRACE = re.compile(rb'^\s*\{\s*"schema"\s*:[^{]*"nodes"\s*:\s*\[')  # ExecutionTraceObserver's head
_ROCPROFILER_SDK = re.compile(rb'^\s*\{\s*"rocprofiler-sdk-tool"\s*:')  # rocprofv3's JSON output's head

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
        if _EXECUTION_TRACE.search(data[:4096]):
            raise TraceFormatError(path, "a PyTorch execution trace (ExecutionTraceObserver: operators and tensors, "
                                         "no GPU times), not a torch.profiler trace: read the Kineto trace "
                                         "(*.pt.trace.json) the profiler writes for the same run") from None
        if _ROCPROFILER_SDK.search(data[:4096]):
            raise TraceFormatError(path, "a rocprofiler-sdk JSON (rocprofv3 --output-format json: its kernel "
                                         "dispatches and API calls as buffer records, no traceEvents), which tracelab "
                                         "does not read: profile the run with torch.profiler for a Kineto trace") from None
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



_AT_INDEX = re.compile(r"at `\$\[(\d+)\]")
_RAWS_DECODER = msgspec.json.Decoder(list[msgspec.Raw])


class _Unsplit(Exception):
    """A run cut from the bytes is no JSON array of whole events: read the trace the general way."""


def read_events(path: Path, data: bytes | bytearray, groups: list[tuple[set[str], type]]) -> tuple[Trace, list]:
    """The trace's top-level fields (traceEvents emptied) and, per (categories, collector)
    group, the events whose `cat` is among the categories, in a new collector: by runs cut
    from the bytes where the layout allows (module docstring), else by pick()."""
    layout = array_layout(data)
    if layout is not None:
        try:
            trace, picked = pick_runs(path, data, *layout, groups)
            trace.traceEvents = []
            return trace, picked
        except _Unsplit:
            pass
    trace = decode(path, data)
    picked = pick(path, data, trace.traceEvents, groups)
    trace.traceEvents = []
    return trace, picked


def array_layout(data: bytes | bytearray) -> tuple[list[tuple[int, int]], bytes, bytes] | None:
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


def pick_runs(path: Path, data: bytearray, runs: list[tuple[int, int]], head: bytes, tail: bytes,
               groups: list[tuple[set[str], type]]) -> tuple[Trace, list]:
    """read_events by runs: each through the union; a run it refuses is split into raw values
    and goes _pick_chunk's way; then the events after the runs as pick() reads them."""
    trace = _top_level(path, head, tail)
    picked = [collector() for _, collector in groups]
    union, source, first = _Union(groups), Source(data), 0
    try:
        for start, end in runs:
            first += _pick_run(path, start, end, first, groups, picked, union, source)
        _pick_raws(path, trace.traceEvents, first, groups, picked, union, Source(tail))
    except RecursionError as e:
        raise limits.json_error(path, e) from None
    return trace, picked


def _pick_run(path: Path, start: int, end: int, first: int, groups: list, picked: list, union: "_Union",
              source: Source) -> int:
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
        _pick_raws(path, raws, 0, groups, picked, _Union(groups), Source(data, raws))
    except RecursionError as e:
        raise limits.json_error(path, e) from None
    return picked


def _pick_raws(path: Path, raws: list[msgspec.Raw], offset: int, groups: list, picked: list, union: "_Union",
               source: Source) -> None:
    """The events of these raw values, traceEvents[offset:...], CHUNK_EVENTS at a time."""
    tail = uncategorised_tail(raws)
    for first in range(0, tail, CHUNK_EVENTS):
        _pick_chunk(path, raws[first:min(first + CHUNK_EVENTS, tail)], offset + first, groups, picked, union, source)
    if tail < len(raws):
        _slow(path, raws[tail:], offset + tail, groups, picked, union)


def uncategorised_tail(raws: list[msgspec.Raw], most: int = 4096, with_cat: int = 8) -> int:
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
                source: Source) -> None:
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
