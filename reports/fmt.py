"""One formatter for the quantities renderers print, so each prints the same way everywhere: durations, sizes, rates and
counts. Sentences take the value with its unit (`ms`, `us`, `duration`); table cells take the
number alone, the unit in the column's header, and "-" where there is none (`ms_cell`,
`us_cell`). Analyses return numbers; only renderers call these.
"""
from __future__ import annotations

import math
import os
from typing import Iterable


def _missing(x) -> bool:
    try:
        return x is None or math.isnan(float(x))
    except (TypeError, ValueError):
        return True


def ms(ns: float, places: int = 3) -> str:
    """'1,234.568 ms': to the microsecond, or to `places` decimals ('8.0 ms' with 1: the
    straggler's lateness per step, whose noise is far above a microsecond)."""
    return f"{ns / 1e6:,.{places}f} ms"


def us(ns: float) -> str:
    """'12.3 us'."""
    return f"{ns / 1e3:,.1f} us"


def duration(ns: float) -> str:
    """About three significant figures in the unit that suits: '450.0 us' under 1 ms,
    '3.45 ms' under 10 ms, '34.5 ms' above."""
    if abs(ns) < 1e6:
        return us(ns)
    return f"{ns / 1e6:,.1f} ms" if abs(ns) >= 1e7 else f"{ns / 1e6:,.2f} ms"


def ms_cell(ns: float | None) -> str:
    """A table cell in ms, to the microsecond: '1,234.568', '-' where none."""
    return "-" if _missing(ns) else f"{ns / 1e6:,.3f}"


def us_cell(ns: float | None) -> str:
    """A table cell in us, to 10 ns: '12.35', '-' where none."""
    return "-" if _missing(ns) else f"{ns / 1e3:,.2f}"


def size(n_bytes: float) -> str:
    """'12.3 MB' (1e6 bytes)."""
    return f"{n_bytes / 1e6:,.1f} MB"


def binary_size(n_bytes: float) -> str:
    """'1.50 GiB' in binary units, the way memory is counted: GiB from a quarter GiB up, then
    MiB, KiB, bytes ('768 B')."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n_bytes) >= scale / 4:
            return f"{n_bytes / scale:,.2f} {unit}"
    return f"{n_bytes:,.0f} B"


def rate(x: float) -> str:
    """A rate as a reader reads it: '1,234' from 100 up, else 3 significant digits ('12.3',
    '0.0193'), never a rounded '0' for a rate that is not zero."""
    return f"{x:,.0f}" if abs(x) >= 100 or x == 0 else f"{x:.3g}"


def rate_gb_s(gb_s: float) -> str:
    """'1,234 GB/s' (1e9 bytes per second); '0.0193 GB/s' for a small one (rate)."""
    return f"{rate(gb_s)} GB/s"


def tflops(tflop_s: float) -> str:
    """'12.3 TFLOP/s'."""
    return f"{tflop_s:,.1f} TFLOP/s"


def flop(n_flop: float) -> str:
    """'1.23 TFLOP' from a TFLOP up, else '12.34 GFLOP' (an amount of work, not a rate)."""
    return f"{n_flop / 1e12:,.2f} TFLOP" if n_flop >= 1e12 else f"{n_flop / 1e9:,.2f} GFLOP"


def count(n: float) -> str:
    """'1,234'."""
    return f"{int(n):,}"


def distinct_name(name: str, others: Iterable[str], chars: int) -> str:
    """A kernel's `name` cut to `chars` characters with '...' (as clipped marks a cut), but never
    where the cut would also begin another of `others`: a cut name stands for one kernel."""
    if len(name) <= chars:
        return name
    shared = max((len(os.path.commonprefix([name, other])) for other in others if other != name), default=0)
    keep = max(chars - 3, shared + 1)
    return name if keep >= len(name) - 3 else name[:keep] + "..."


def clipped(text: str, chars: int) -> str:
    """`text` at most `chars` characters: cut after the last space, '/' or ',' that fits, with
    '...' (never mid-word); a single word longer than that is cut at `chars` with '...'."""
    if len(text) <= chars:
        return text
    room = text[:chars - 3]
    cut = max(room.rfind(" "), room.rfind("/"), room.rfind(","))
    return (room[:cut + 1] if cut > 0 else room).rstrip() + "..."
