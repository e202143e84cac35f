"""Memory bounded in proportion to the input: before the rows of a trace are built, the
memory they will take (a measured figure per row) is compared with what the machine has
left, and a trace that would not fit is one line instead of a machine swapping or an
out-of-memory kill, which would lose the user's other work with no word of why.

ROW_PEAK_BYTES is the peak resident memory of `tracelab breakdown` per GPU row of a Kineto
trace of tiny kernels (the most rows per byte of JSON there is): 884 MB for 1 million
rows, 2,333 MB for 3 million, 4,334 MB for 6 million (benchmarks/mem_kernels.py,
benchmarks/RESULTS.md), 700-735 bytes a row once the interpreter's own ~150 MB
is counted out.

TRACELAB_MAX_MEMORY_BYTES (Options.max_memory_bytes, core/options.py) sets the peak the check
allows one process (default: what it holds plus the kernel's MemAvailable, or the cgroup's room
where less); 0 switches it off.
"""
from __future__ import annotations

import os
from pathlib import Path

from tracelab.core.errors import MemoryLimitError
from tracelab.core.options import MAX_MEMORY_BYTES_ENV as ENV  # named in the message

ROW_PEAK_BYTES = 750
BASE_BYTES = 150 * 1024**2  # the interpreter, numpy, pandas and tracelab before any trace


def available_bytes() -> int | None:
    """Memory this process may still take: MemAvailable (/proc/meminfo), or the cgroup's room
    where less; None where neither can be read."""
    found = [n for n in (_meminfo_available(), _cgroup_room()) if n is not None]
    return min(found) if found else None


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> int | None:
    """cgroup v2: memory.max less memory.current of this process's group."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text())
    except (OSError, ValueError):
        return None


def _resident_bytes() -> int:
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def peak_bytes(n_rows: int) -> int:
    """The measured peak of a process that reads `n_rows` rows and reports on them."""
    return BASE_BYTES + n_rows * ROW_PEAK_BYTES


def check_rows(path: Path | str, n_rows: int, what: str = "rows") -> None:
    """MemoryLimitError naming the file when reading `n_rows` rows would peak above the
    process's budget: the load's Options.max_memory_bytes (TRACELAB_MAX_MEMORY_BYTES), else
    what it holds plus what is left."""
    from tracelab.core.options import current

    budget = current().max_memory_bytes
    if budget == 0:
        return
    if budget is None and (room := available_bytes()) is not None:
        budget = _resident_bytes() + room
    peak = peak_bytes(n_rows)
    if budget is not None and peak > budget:
        raise MemoryLimitError(path, f"{n_rows:,} {what} need about {peak / 1e9:.1f} GB of memory to read "
                                     f"(~{ROW_PEAK_BYTES:,} bytes each, benchmarks/RESULTS.md), more than the "
                                     f"{budget / 1e9:.1f} GB this process may take: read it on a bigger machine, "
                                     f"or fewer ranks at a time (set {ENV} to change the check)")


JSON_BYTES_PER_ROW = 135  # the smallest a Kineto kernel event gets (benchmarks/mem_kernels.py)


def parallel_files(sizes: list[int], workers: int) -> int:
    """How many of files of these (inflated) sizes to read at once, at most `workers`: as many
    as the memory left holds at their worst case (every JSON_BYTES_PER_ROW bytes a row), at
    least one (which check_rows then judges on its real rows)."""
    room = available_bytes()
    if room is None or not sizes:
        return workers
    worst = max(peak_bytes(size // JSON_BYTES_PER_ROW) for size in sizes)
    return max(1, min(workers, room // max(worst, 1)))
