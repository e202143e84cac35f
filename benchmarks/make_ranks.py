#!/usr/bin/env python3
"""Make N rank files of one job from real Kineto traces, for the many-rank benchmarks.

usage: make_ranks.py OUT_DIR --ranks N [--src A.json.gz B.json.gz ...] [--copies K] [--put R:C.json.gz ...]

Rank r is a copy of source r % len(src) with its `distributedInfo` saying rank r of N
(the rest of the trace byte for byte as captured). Default sources: the two real ranks
of a 128-rank NCCL job in ../shared/traces/hta/trace_filter (4.9k events, 1.1k kernels
each). `--copies K` first tiles each source K times in time with the shared
../shared/bench/tile_trace.py (ids kept unique per copy), for bigger ranks. `--put R:FILE`
makes rank R a copy of FILE instead: e.g. every rank the waiting rank of a real 2-GPU job
and one rank its late rank, a straggler among 1,024 with a known answer.

Fast, so that 1,024 ranks take seconds, not a gzip of each file: a gzip file may hold
several members, read back as one stream (gzip(1), Python's gzip, tracelab). Each file
is the source's compressed text before the `distributedInfo` value, a small member with
the new value, and the compressed text after it; the two big members are compressed once.
"""
from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared"
DEFAULT_SRC = [SHARED / "traces/hta/trace_filter/sampled_rank-0.json.gz",
               SHARED / "traces/hta/trace_filter/sampled_rank-1.json.gz"]
TILE = SHARED / "bench/tile_trace.py"
KEY = b'"distributedInfo"'


def split(text: bytes) -> tuple[bytes, dict, bytes]:
    """(text before the distributedInfo value, the value, text after it); a trace without
    one gets it as the first top-level key."""
    at = text.find(KEY)
    if at < 0:
        brace = text.index(b"{") + 1
        return text[:brace] + KEY + b":", {}, b"," + text[brace:]
    start = text.index(b"{", at + len(KEY))
    end = _end(text, start)
    return text[:start], json.loads(text[start:end]), text[end:]


def _end(text: bytes, start: int) -> int:
    """The index just past the JSON object that opens at `start` (strings may hold braces)."""
    depth, i, in_str = 0, start, False
    while True:
        c = text[i]
        if in_str:
            if c == 0x5C:  # backslash: skip the escaped character
                i += 1
            elif c == 0x22:
                in_str = False
        elif c == 0x22:
            in_str = True
        elif c == 0x7B:
            depth += 1
        elif c == 0x7D:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1


def tiled(src: Path, copies: int, folder: Path) -> Path:
    """src tiled `copies` times by the shared tile_trace.py (a new file in `folder`)."""
    dst = folder / f"tiled{copies}-{src.name}"
    subprocess.run([sys.executable, str(TILE), str(src), str(dst), "--copies", str(copies)], check=True)
    return dst


def _parts(src: Path) -> tuple[bytes, dict, bytes]:
    before, info, after = split(gzip.decompress(src.read_bytes()))
    return gzip.compress(before, 6, mtime=0), info, gzip.compress(after, 6, mtime=0)


def make(out: Path, n_ranks: int, sources: list[Path], put: dict[int, Path] | None = None) -> list[Path]:
    """rank{r:05d}.pt.trace.json.gz for r in 0..n_ranks-1 under `out` (rank r from `put[r]`
    where given); the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    parts = [_parts(src) for src in sources]
    placed = {r: _parts(src) for r, src in (put or {}).items()}
    written = []
    for r in range(n_ranks):
        head, info, tail = placed.get(r) or parts[r % len(parts)]
        value = json.dumps({**info, "rank": r, "world_size": n_ranks}, separators=(", ", ": ")).encode()
        path = out / f"rank{r:05d}.pt.trace.json.gz"
        path.write_bytes(head + gzip.compress(value, 6, mtime=0) + tail)
        written.append(path)
    return written


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--src", type=Path, nargs="+", default=DEFAULT_SRC)
    p.add_argument("--copies", type=int, default=1, help="tile each source K times in time first")
    p.add_argument("--put", action="append", default=[], metavar="R:FILE", help="rank R is a copy of FILE")
    a = p.parse_args()
    put = {int(r): Path(f) for r, f in (x.split(":", 1) for x in a.put)}
    with tempfile.TemporaryDirectory() as tmp:
        sources = [tiled(s, a.copies, Path(tmp)) for s in a.src] if a.copies > 1 else a.src
        written = make(a.out, a.ranks, sources, put)
    size = sum(f.stat().st_size for f in written)
    print(f"{len(written)} ranks in {a.out} ({size / 1e6:.1f} MB) from {', '.join(s.name for s in a.src)}"
          + (f" tiled x{a.copies}" if a.copies > 1 else ""))


if __name__ == "__main__":
    main()
