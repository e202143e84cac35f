"""What an nsys SQLite export says about its session and devices, for parsers/nsys.py:
the profiler and export versions, the session clock (to put events on the epoch clock),
process names, the GPUs (name, SMs, clock, memory bandwidth) per process, and what an older
export names differently (its version and GPU tables, NVTX texts inline) or lacks (a note)."""
from __future__ import annotations

import sqlite3
from typing import Any

from tracelab.core.note import Note


# the export's description of itself: META_DATA_EXPORT from nsys 2023 on, EXPORT_META_DATA before
EXPORT_META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
# the GPUs: TARGET_INFO_GPU from nsys 2021.2 on; nsys 2021.1 and before wrote TARGET_INFO_CUDA_GPU,
# keyed by the CUDA device id, whose columns are renamed here to TARGET_INFO_GPU's (clock in Hz in both)
GPU_TABLES = ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU")
_OLDER_GPU_COLUMNS = {"deviceId": "id", "numMultiprocessors": "smCount", "coreClockRate": "clockRate",
                      "computeCapabilityMajor": "computeMajor", "computeCapabilityMinor": "computeMinor"}


def session_meta(con: sqlite3.Connection, tables: set[str]) -> dict[str, Any]:
    """Versions and session clock (utcEpochNs, start, stop) where the file has them; process names."""
    meta: dict[str, Any] = {"profiler_version": None, "export_schema_version": None}
    if table := next((t for t in EXPORT_META_TABLES if t in tables), None):
        export = dict(con.execute(f"SELECT name, value FROM {table}").fetchall())
        meta["profiler_version"] = export.get("EXPORT_PRODUCT_VERSION")
        meta["export_schema_version"] = export.get("EXPORT_SCHEMA_VERSION")
    meta["session_utc_epoch_ns"] = meta["session_start_ns"] = None
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        meta["session_utc_epoch_ns"] = row[0] if row else None
    if "ANALYSIS_DETAILS" in tables:
        row = con.execute("SELECT startTime, stopTime FROM ANALYSIS_DETAILS").fetchone()
        meta["session_start_ns"], meta["session_stop_ns"] = row if row else (None, None)
    if "PROCESSES" in tables:
        meta["process_names"] = dict(con.execute("SELECT pid, name FROM PROCESSES").fetchall())
    return meta


def epoch_ns(file_meta: dict[str, Any], trace_start_ns: int) -> int | None:
    """UTC epoch ns of the first event. utcEpochNs is the session start; events are on the
    session clock (from ANALYSIS_DETAILS.startTime) in some exports and already counted
    from the session start in others (the mock export), told apart by where they fall."""
    utc, start = file_meta.get("session_utc_epoch_ns"), file_meta.get("session_start_ns")
    if utc is None:
        return None
    stop = file_meta.get("session_stop_ns")
    on_session_clock = start is not None and stop is not None and start <= trace_start_ns <= stop
    return int(utc + trace_start_ns - (start if on_session_clock else 0))


def _rows(con: sqlite3.Connection, sql: str) -> list[dict[str, Any]]:
    cursor = con.execute(sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor]


def device_table(con: sqlite3.Connection, tables: set[str]) -> dict[tuple[int | None, int], dict[str, Any]]:
    """(pid, CUDA device id) -> name, SMs, clock, bandwidth; pid None where the file does
    not tie a GPU to a process. Columns are read with SELECT * since they vary by version."""
    gpus = {row["id"]: _gpu_props(row) for row in _gpu_rows(con, tables)}
    out: dict[tuple[int | None, int], dict[str, Any]] = {(None, i): props for i, props in gpus.items()}
    if "TARGET_INFO_CUDA_DEVICE" in tables:
        for row in _rows(con, "SELECT * FROM TARGET_INFO_CUDA_DEVICE"):
            props = dict(gpus.get(row.get("gpuId"), {"type": "CUDA"}))
            props["num_sms"] = props.get("num_sms") or row.get("numMultiprocessors")
            out[(row.get("pid"), row.get("cudaId"))] = props
    return out


def _gpu_rows(con: sqlite3.Connection, tables: set[str]) -> list[dict[str, Any]]:
    """The GPU table's rows under TARGET_INFO_GPU's column names (GPU_TABLES); none without one."""
    if "TARGET_INFO_GPU" in tables:
        return _rows(con, "SELECT * FROM TARGET_INFO_GPU")
    if "TARGET_INFO_CUDA_GPU" in tables:
        rows = _rows(con, "SELECT * FROM TARGET_INFO_CUDA_GPU")
        return [{_OLDER_GPU_COLUMNS.get(k, k): v for k, v in row.items()} for row in rows]
    return []


def schema_gaps(tables: set[str]) -> list[Note]:
    """A note naming what the export lacks that an older (or trimmed) one may not have: a GPU
    table (then no device is named: no roofline, no device advice) or its version table."""
    missing = [names[0] for names in (GPU_TABLES, EXPORT_META_TABLES) if not tables.intersection(names)]
    return [Note("nsys_tables_missing", {"tables": missing})] if missing else []


def nvtx_text(con: sqlite3.Connection) -> tuple[str, str]:
    """An NVTX event's text in SQL over NVTX_EVENTS n, and the join it needs: its inline `text`,
    else its registered string (`textId` -> StringIds); an export without textId (older nsys)
    holds every text inline."""
    columns = {row[1] for row in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
    if "textId" in columns:
        return "COALESCE(n.text, s.value)", "LEFT JOIN StringIds s ON s.id = n.textId"
    return "n.text", ""


def _gpu_props(row: dict[str, Any]) -> dict[str, Any]:
    major, minor = row.get("computeMajor"), row.get("computeMinor")
    clock_hz, bandwidth = row.get("clockRate"), row.get("memoryBandwidth")  # Hz, B/s
    return {"type": "CUDA", "name": row.get("name"),
            "arch": f"{major}{minor}" if major is not None and minor is not None else None,
            "num_sms": row.get("smCount"), "clock_khz": clock_hz / 1e3 if clock_hz else None,
            "memory_bandwidth_gb_s": bandwidth / 1e9 if bandwidth else None,
            "total_memory_bytes": row.get("totalMemory"), "uuid": row.get("uuid")}


def device_of(devices: dict, pid: int | None, device: int) -> dict[str, Any]:
    return devices.get((pid, device)) or devices.get((None, device)) or {"type": "CUDA"}
