"""Bounds on what one trace file may hold, checked by the parsers where data enters, so
that a damaged or hostile file gives one TraceFormatError instead of a traceback, an
exhausted memory or an hour of work. The bounds are those of the load's Options
(core/options.py: Options.from_environment reads the variables below).

- Decompressed size: TRACELAB_MAX_TRACE_BYTES (default 2 GiB). Gzip is inflated as a
  stream and stops at the bound: a 4 MB gzip that inflates to 4 GiB costs at most the
  bound in memory. Raise it for bigger traces.
- Name length: TRACELAB_MAX_NAME_CHARS (default 1 Mi characters) per kernel, operator
  or range name; real demangled kernel names stay under ~20 k.
- Nesting: JSON deeper than the interpreter's recursion limit (about 1000 levels; Kineto
  and proton files nest under 10) is refused as damaged.
- Times: timestamps within +-2**62 ns (146 years) and durations within 2**61 ns, so
  that start + dur and differences of starts stay inside int64.
"""
from __future__ import annotations

import os
import zlib
from pathlib import Path

from tracelab.core import options
from tracelab.core.errors import TraceFormatError

try:  # ISA-L's inflate, twice as fast as zlib's, the same bytes (optional: pip install tracelab[fast])
    from isal import isal_zlib as _isal_zlib
except ImportError:  # pragma: no cover - the stdlib's zlib then
    _isal_zlib = None

MAX_TIME_NS = 2**62
MAX_DUR_NS = 2**61
MAX_WORK = 2.0**62  # FLOPs or bytes of one kernel or scope: a sum of millions stays finite
INT16 = (-(2**15), 2**15 - 1)
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
GZIP_MAGIC = b"\x1f\x8b"
_CHUNK_BYTES = 1024**2  # compressed bytes read at a time
_INFLATE_BYTES = 4 * 1024**2  # inflated bytes per step: 1 MiB of a bomb would be 1 GiB at once


def max_trace_bytes() -> int:
    """The bound of the load in progress (its Options, core/options.applied)."""
    return options.current().max_trace_bytes


def max_name_chars() -> int:
    return options.current().max_name_chars


def too_large(path: Path, what: str) -> TraceFormatError:
    return TraceFormatError(path, f"{what} more than {max_trace_bytes():,} bytes, the limit "
                                  "(set TRACELAB_MAX_TRACE_BYTES to raise it)")


def read_trace_bytes(path: Path) -> bytearray:
    """The file's bytes, gunzipped as a stream when gzip, at most max_trace_bytes(), in a
    bytearray (parsers may decode runs of it in place: parsers/_kineto_json.Source);
    TraceFormatError for unreadable, oversized or damaged files."""
    limit = max_trace_bytes()
    try:
        with open(path, "rb") as f:
            if f.read(2) == GZIP_MAGIC:
                if _isal_zlib is not None:
                    try:
                        f.seek(0)
                        return _gunzip(path, f, limit, _isal_zlib)
                    except TraceFormatError:  # damaged or too big: zlib names it, in its own words, as always
                        pass
                f.seek(0)
                return _gunzip(path, f, limit, zlib)
            if (size := os.fstat(f.fileno()).st_size) > limit:
                raise too_large(path, "holds")
            f.seek(0)
            out = bytearray(size)
            del out[f.readinto(out):]
            out += f.read(limit + 1 - len(out))  # a file that grew since fstat
            if len(out) > limit:
                raise too_large(path, "holds")
            return out
    except OSError as e:
        raise TraceFormatError(path, f"cannot read: {e.strerror or e}") from None


def _gunzip(path: Path, f, limit: int, inflater=zlib) -> bytearray:
    """Inflate every gzip member of `f` with `inflater` (zlib, or isal_zlib: its API) (RFC 1952:
    members one after another, as zcat reads them) into one buffer, never past `limit` bytes. At a member's end zlib puts the rest of
    the input in `unused_data` and nothing in `unconsumed_tail`; only that rest starts the next
    member (keeping both read the rest twice, doubling it at every member)."""
    out = bytearray()
    inflate, fresh, pending = inflater.decompressobj(16 + zlib.MAX_WBITS), True, b""
    while True:
        if not pending and not (pending := f.read(_CHUNK_BYTES)):
            break
        try:
            out += inflate.decompress(pending, min(_INFLATE_BYTES, limit + 1 - len(out)))
        except inflater.error as e:
            raise TraceFormatError(path, f"damaged gzip: {e}") from None
        fresh = False
        if len(out) > limit:
            raise too_large(path, "inflates to")
        if inflate.eof:  # a member ended: what follows is the next member
            pending = inflate.unused_data
            inflate, fresh = inflater.decompressobj(16 + zlib.MAX_WBITS), True
        else:
            pending = inflate.unconsumed_tail
    if not fresh:
        raise TraceFormatError(path, "truncated gzip: the compressed stream ends early")
    return out


# glibc's malloc serves a block over its mmap threshold (32 MB at most, by default) from fresh
# pages of its own, given back when freed: each trace's inflated bytes (35 MB for a 77k-event
# rank) and its larger columns page-fault ~10k times again at every rank a worker parses (0.02 s
# of system time of its ~0.2 s). Kept in the heap, freed blocks are reused by the next rank.
HEAP_MMAP_BYTES = 64 * 1024**2  # blocks below this come from the heap (larger: mmap, as before)
HEAP_KEEP_BYTES = 128 * 1024**2  # free memory at the heap's top beyond this goes back to the system


def reuse_freed_memory(given: options.Options) -> bool:
    """Make this process (and the workers it forks) reuse freed blocks of up to HEAP_MMAP_BYTES
    instead of mapping fresh pages for each, keeping up to HEAP_KEEP_BYTES free; the CLI calls it
    with the command's options (a process-wide setting: a library user chooses for their own
    process). False where the C library has no glibc mallopt, or `given.keep_malloc` (the user
    set MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_: their choice stands)."""
    if given.keep_malloc:
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (macOS) or no C library to ask
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
    return bool(mallopt(m_mmap_threshold, HEAP_MMAP_BYTES)) and bool(mallopt(m_trim_threshold, HEAP_KEEP_BYTES))


def long_name(n_chars: int) -> str | None:
    """What is wrong with a name of `n_chars` characters; None when it is within the limit."""
    limit = max_name_chars()
    if n_chars <= limit:
        return None
    return f"a name of {n_chars:,} characters, over the limit of {limit:,} (set TRACELAB_MAX_NAME_CHARS to raise it)"


def json_error(path: Path, error: UnicodeDecodeError | RecursionError) -> TraceFormatError:
    """What a JSON decoder's UTF-8 or recursion failure means, naming the file."""
    if isinstance(error, UnicodeDecodeError):
        return TraceFormatError(path, f"invalid UTF-8 in a string ({error.reason})")
    return TraceFormatError(path, "JSON nested deeper than the parser's limit (~1000 levels): damaged or hostile")


def out_of_range(path: Path, where: str, field: str, value, bounds: tuple[int, int]) -> TraceFormatError:
    return TraceFormatError(path, f"{where}: {field} {value!r} is outside {bounds[0]}..{bounds[1]}")


def _bad(path: Path | str, where: str, value, wanted: str) -> TraceFormatError:
    shown = repr(value)
    return TraceFormatError(path, f"{where} is {shown[:80] + '...' if len(shown) > 80 else shown}, not {wanted}")


def whole(path: Path | str, where: str, value, bounds: tuple[int, int] = INT64, optional: bool = False) -> int | None:
    """`value`, read from `path` at `where` (file part, row and field), as an int within
    `bounds`; a float that is whole counts (JSON writes 3.0). None passes when `optional`;
    anything else (text, bool, a list, 2.5, NaN) is a TraceFormatError naming it."""
    if value is None and optional:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if type(value) is not int:
        raise _bad(path, where, value, "a whole number" + (" or null" if optional else ""))
    if not bounds[0] <= value <= bounds[1]:
        raise TraceFormatError(path, f"{where} {value!r} is outside {bounds[0]}..{bounds[1]}")
    return value


def real(path: Path | str, where: str, value, low: float = 0.0, high: float = float("inf"),
         optional: bool = False) -> float | None:
    """`value` as a finite float within low..high (an int counts); else a TraceFormatError."""
    import math

    if value is None and optional:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or not low <= value <= high:
        raise _bad(path, where, value, f"a finite number in {low:g}..{high:g}" + (" or null" if optional else ""))
    return float(value)


def text(path: Path | str, where: str, value, optional: bool = False) -> str | None:
    """`value` as a str within the name limit; else a TraceFormatError."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _bad(path, where, value, "text" + (" or null" if optional else ""))
    if (wrong := long_name(len(value))) is not None:
        raise TraceFormatError(path, f"{where}: {wrong}")
    return value


def ascii_digits(label: str) -> str | None:
    """The first run of ASCII digits in `label` ("stream 7" -> "7"), None when there is none:
    str.isdigit also accepts "²" and other digits int() refuses."""
    import re

    found = re.search(r"[0-9]+", label)
    return found.group() if found else None
