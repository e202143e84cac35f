#!/usr/bin/env python3
"""Make a big Nsight Systems SQLite export from a real one, for the nsys parse benchmark
(issue 13: "nsys with 5M kernels: time and memory").

usage: make_nsys_big.py SRC.sqlite OUT.sqlite --kernels 5000000

OUT is SRC with its kernels, runtime calls, memcpys, memsets and NVTX ranges repeated in
time until it holds at least --kernels kernels: copy k has every start and end moved by k x
the capture's span and every correlationId by k x its largest, so each kernel still finds
its own launch call and its ranges. Strings (StringIds) are shared, as nsys would.
"""
from __future__ import annotations

import argparse
import shutil
import sqlite3
from pathlib import Path

MOVED = {"CUPTI_ACTIVITY_KIND_KERNEL": True, "CUPTI_ACTIVITY_KIND_RUNTIME": True,
         "CUPTI_ACTIVITY_KIND_MEMCPY": True, "CUPTI_ACTIVITY_KIND_MEMSET": True, "NVTX_EVENTS": False}


def _select(con: sqlite3.Connection, table: str, with_correlation: bool) -> str:
    """SELECT of every column of `table`, times moved by :shift and correlationIds by :corr."""
    cols = [row[1] for row in con.execute(f"PRAGMA table_info({table})")]
    moved = {"start": "start + :shift", "end": "end + :shift"}
    if with_correlation:
        moved["correlationId"] = "correlationId + :corr"
    return ", ".join(moved.get(c, c) for c in cols)


def make(src: Path, out: Path, kernels: int) -> int:
    shutil.copyfile(src, out)
    con = sqlite3.connect(out)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        first, last, n = con.execute("SELECT MIN(start), MAX(end), COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        corr = max(con.execute(f"SELECT MAX(correlationId) FROM {t}").fetchone()[0] or 0
                   for t, c in MOVED.items() if c and t in tables) + 1
        span = last - first + 1_000
        originals = {t: con.execute(f"SELECT MAX(rowid) FROM {t}").fetchone()[0] or 0 for t in MOVED if t in tables}
        copies = -(-kernels // n)
        for k in range(1, copies):
            for table, with_corr in MOVED.items():
                if table in tables:
                    con.execute(f"INSERT INTO {table} SELECT {_select(con, table, with_corr)} FROM {table} "
                                f"WHERE rowid <= :rows", {"shift": k * span, "corr": k * corr, "rows": originals[table]})
        con.commit()
        return con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    finally:
        con.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--kernels", type=int, default=5_000_000)
    a = p.parse_args()
    n = make(a.src, a.out, a.kernels)
    print(f"{a.out}: {n:,} kernels, {a.out.stat().st_size / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
