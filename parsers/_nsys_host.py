"""What the host was doing, from an nsys export (parsers/nsys.py), for reports/idle/idle.py: each
GPU row's launch call (CUPTI_ACTIVITY_KIND_RUNTIME, which holds runtime and driver calls,
found by process and correlation id as the scopes are) and per process the host frame
(schema.HOST_COLUMNS): the synchronising calls (parsers/_host.is_sync) and allocator calls (`alloc`) of that table,
the NVTX push/pop and start/end ranges (`range`) and, where the capture traced them
(`--trace osrt`), the OS runtime calls of OSRT_API (`osrt`). Every column read is checked
first (_nsys_check), as the parser's own are."""
from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracelab.core import schema

from . import _nsys_check
from ._host import host_kinds
from ._nsys_meta import nvtx_text
from ._steps import compile_pattern, is_step

PID_MASK = ~0xFFFFFF  # globalTid -> globalPid
_RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
_NAME_ID = ("{c} IS NULL OR typeof({c}) = 'integer'", "an integer or NULL")
_CALLS = f"""
    SELECT r.globalTid, r.correlationId, r.start, r.end, s.value FROM {_RUNTIME} r
    LEFT JOIN StringIds s ON s.id = r.nameId
    WHERE r.globalTid IS NOT NULL ORDER BY r.rowid"""
_RANGES = """
    SELECT n.globalTid, n.start, n.end, {text} FROM NVTX_EVENTS n {join}
    WHERE n.eventType IN (59, 60) AND n.end IS NOT NULL AND n.globalTid IS NOT NULL"""
_OSRT = """
    SELECT o.globalTid, o.start, o.end, s.value FROM OSRT_API o LEFT JOIN StringIds s ON s.id = o.nameId
    WHERE o.globalTid IS NOT NULL"""


def read(con: sqlite3.Connection, activity: pd.DataFrame, path: Path, counters: str, step_pattern: str | None
         ) -> tuple[pd.DataFrame, dict[int, pd.DataFrame]]:
    """activity with its launch calls (with_launches), and the host frames by pid (host_frames);
    `step_pattern` as the parser's (its step ranges are kind `step`)."""
    tables = _usable(con, {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")})
    runtime = calls(con, tables, path)
    return with_launches(activity, runtime), host_frames(con, tables, runtime, counters, compile_pattern(step_pattern))


# the columns each table must have to be read here (an export without them is read without it)
_NEEDS = {_RUNTIME: {"globalTid", "correlationId", "start", "end", "nameId"},
          "OSRT_API": {"globalTid", "start", "end", "nameId"}, "NVTX_EVENTS": {"globalTid", "start", "end", "eventType"}}


def _usable(con: sqlite3.Connection, tables: set[str]) -> set[str]:
    """The tables this module reads that have the columns it needs, with StringIds."""
    if "StringIds" not in tables:
        return set()
    return {t for t, needs in _NEEDS.items()
            if t in tables and needs <= {r[1] for r in con.execute(f"PRAGMA table_info({t})")}} | {"StringIds"}


def _check(con: sqlite3.Connection, tables: set[str], path: Path) -> None:
    """end and nameId of the runtime calls, and OSRT_API's columns: integers, times in range."""
    rules = {"end": _nsys_check.RULES["end"], "nameId": _NAME_ID}
    if _RUNTIME in tables:
        _nsys_check._check_table(con, _RUNTIME, "globalTid IS NOT NULL", rules, path)
    if "OSRT_API" in tables:
        osrt = {c: _nsys_check.RULES[c] for c in ("start", "end", "globalTid")}
        _nsys_check._check_table(con, "OSRT_API", "1", {**osrt, "nameId": _NAME_ID}, path)


def calls(con: sqlite3.Connection, tables: set[str], path: Path) -> pd.DataFrame:
    """The runtime/driver calls: globalTid, correlationId, start, end, name (empty without the table)."""
    _check(con, tables, path)
    columns = ["globalTid", "correlationId", "start", "end", "name"]
    if _RUNTIME not in tables or "StringIds" not in tables:
        return pd.DataFrame({c: pd.Series(dtype="object" if c == "name" else "int64") for c in columns})
    return pd.DataFrame.from_records(con.execute(_CALLS).fetchall(), columns=columns)


def with_launches(activity: pd.DataFrame, runtime: pd.DataFrame) -> pd.DataFrame:
    """activity with launch_start and launch_dur (Int64, absolute ns) and launch_api (its name, ""
    where unknown): its launch call's, the first call of its process (globalPid) with its
    correlation id; NA where there is none."""
    known = runtime.dropna(subset=["correlationId"])
    first = (known.assign(globalPid=known["globalTid"] & PID_MASK, correlationId=known["correlationId"].astype("int64"))
             .drop_duplicates(["globalPid", "correlationId"], keep="first"))
    keys = activity[["globalPid", "correlationId"]].astype("Int64")
    found = keys.merge(first[["globalPid", "correlationId", "start", "end"]].astype("Int64")
                       .assign(name=first["name"].fillna("").to_numpy(dtype=object)),
                       on=["globalPid", "correlationId"], how="left")
    return activity.assign(launch_start=found["start"].to_numpy(), launch_dur=(found["end"] - found["start"]).to_numpy(),
                           launch_api=found["name"].fillna("").to_numpy(dtype=object))


def launch_columns(rows: pd.DataFrame, trace_start_ns: int) -> dict[str, Any]:
    """The schema's launch columns of activity rows (with_launches), on the events' clock."""
    return {"launch_start_ns": pd.array(rows["launch_start"], dtype="Int64") - trace_start_ns,
            "launch_dur_ns": pd.array(rows["launch_dur"], dtype="Int64")}


def host_frames(con: sqlite3.Connection, tables: set[str], runtime: pd.DataFrame,
                counters: str, step_re: re.Pattern) -> dict[int, pd.DataFrame]:
    """pid -> the raw host intervals of that process (absolute ns): kind, name, tid, start, end.
    `counters`: emit_nvtx's per-call counters, dropped from range names as in scopes."""
    kinds = host_kinds(runtime["name"].fillna("").tolist())
    parts = [runtime[kinds != ""][["globalTid", "start", "end", "name"]].assign(kind=kinds[kinds != ""])]
    if "NVTX_EVENTS" in tables:
        text, join = nvtx_text(con)
        ranges = _records(con, _RANGES.format(text=text, join=join))
        ranges = ranges[ranges["name"].notna()]
        kind = np.where(is_step(ranges["name"].tolist(), step_re), "step", "range")
        parts.append(ranges.assign(kind=kind, name=ranges["name"].str.replace(counters, "", regex=True)))
    if "OSRT_API" in tables:
        parts.append(_records(con, _OSRT).assign(kind="osrt"))
    every = pd.concat(parts, ignore_index=True)
    every = every[every["name"].notna() & (every["end"] >= every["start"])]
    pid = (every["globalTid"].to_numpy(dtype=np.int64) >> 24) & 0xFFFFFF
    return {int(p): g for p, g in every.groupby(pid, sort=False)}


def _records(con: sqlite3.Connection, sql: str) -> pd.DataFrame:
    return pd.DataFrame.from_records(con.execute(sql).fetchall(), columns=["globalTid", "start", "end", "name"])


def with_host(profiles: list[schema.Profile], frames: dict[int, pd.DataFrame]) -> list[schema.Profile]:
    """Each profile with its process's host frame, on its events' clock (meta trace_start_ns)."""
    for p in profiles:
        raw = frames.get(p.meta.pid)
        origin = p.meta.trace_start_ns
        if raw is None:
            p.host = schema.host_frame([], [], [], [], [])
            continue
        start = raw["start"].to_numpy(dtype=np.int64)
        p.host = schema.host_frame(raw["kind"].to_numpy(), raw["name"].to_numpy(), raw["globalTid"].to_numpy(),
                                   start - origin, raw["end"].to_numpy(dtype=np.int64) - start)
    return profiles
