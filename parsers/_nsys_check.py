"""The nsys parser's edge (parsers/nsys.py): every column it reads is checked in SQL before
it is read, so a text, blob, real or NULL where an integer belongs, a time past +-2**62 ns,
an end before its start or a device id beyond int16 names the table, row and column
instead of failing later inside pandas. One scan per table finds whether any row is bad;
only then is the bad row looked at column by column."""
from __future__ import annotations

import sqlite3
from pathlib import Path

from tracelab.core import limits
from tracelab.core.errors import TraceFormatError

_T = limits.MAX_TIME_NS
_INT = "typeof({c}) = 'integer'"
_TIME = f"typeof({{c}}) = 'integer' AND {{c}} BETWEEN {-_T} AND {_T}"
# column -> (SQL condition a good value meets, what it must be), {c} = the column
RULES: dict[str, tuple[str, str]] = {
    "start": (_TIME, "an integer time within +-2**62 ns"),
    "end": (_TIME + " AND {c} >= start", "an integer time within +-2**62 ns, at or after start"),
    "deviceId": (_INT + f" AND {{c}} BETWEEN {limits.INT16[0]} AND {limits.INT16[1]}", "an int16 device id"),
    "streamId": (_INT, "an integer"),
    "globalPid": ("{c} IS NULL OR " + _INT, "an integer or NULL"),
    "globalTid": ("{c} IS NULL OR " + _INT, "an integer or NULL"),
    "correlationId": ("{c} IS NULL OR " + _INT, "an integer or NULL"),
    "bytes": ("{c} IS NULL OR " + _INT + " AND {c} >= 0", "a whole number of bytes or NULL"),
    "graphNodeId": ("{c} IS NULL OR " + _INT, "an integer or NULL"),
    "originalGraphNodeId": ("{c} IS NULL OR " + _INT, "an integer or NULL"),
    "graphId": ("{c} IS NULL OR " + _INT, "an integer or NULL"),
}
_ACTIVITY = ("start", "end", "deviceId", "streamId", "globalPid", "correlationId", "bytes", "graphNodeId")
# table -> (columns checked, which rows the parser reads, the columns that choice needs)
TABLES: dict[str, tuple[tuple[str, ...], str, set[str]]] = {
    "CUPTI_ACTIVITY_KIND_KERNEL": (_ACTIVITY, "1", set()),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (_ACTIVITY, "1", set()),
    "CUPTI_ACTIVITY_KIND_MEMSET": (_ACTIVITY, "1", set()),
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": (("start", "end", "deviceId", "streamId", "globalPid", "correlationId", "graphId"),
                                        "1", set()),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (("start", "globalTid", "correlationId"),
                                    "correlationId IS NOT NULL AND globalTid IS NOT NULL",
                                    {"correlationId", "globalTid"}),
    "NVTX_EVENTS": (("start", "globalTid"), "eventType IN (59, 60)", {"eventType"}),
    "CUDA_GRAPH_NODE_EVENTS": (("start", "globalTid", "graphNodeId", "originalGraphNodeId"),
                               "graphNodeId IS NOT NULL AND globalTid IS NOT NULL", {"graphNodeId", "globalTid"}),
}
_COUNT = ("{c} IS NULL OR " + _INT + " AND {c} >= 0", "a whole number of 0 or more, or NULL")
_OPT_TIME = ("{c} IS NULL OR " + _TIME, "NULL or an integer time within +-2**62 ns")
_OPT_TEXT = ("{c} IS NULL OR typeof({c}) = 'text'", "text or NULL")
_ID16 = (_INT + f" AND {{c}} BETWEEN {limits.INT16[0]} AND {limits.INT16[1]}", "an int16 device id")
# the session and device tables (parsers/_nsys_meta.py): table -> column -> rule, every row
META_TABLES: dict[str, dict[str, tuple[str, str]]] = {
    "TARGET_INFO_GPU": {"id": _ID16, "name": _OPT_TEXT, "clockRate": _COUNT, "memoryBandwidth": _COUNT,
                        "smCount": _COUNT, "totalMemory": _COUNT, "computeMajor": _COUNT, "computeMinor": _COUNT},
    "TARGET_INFO_CUDA_DEVICE": {"gpuId": ("{c} IS NULL OR " + _ID16[0], "NULL or an int16 device id"),
                                "cudaId": _ID16, "pid": ("{c} IS NULL OR " + _INT, "an integer or NULL")},
    "TARGET_INFO_SESSION_START_TIME": {"utcEpochNs": _OPT_TIME},
    "ANALYSIS_DETAILS": {"startTime": _OPT_TIME, "stopTime": _OPT_TIME},
    "PROCESSES": {"pid": ("{c} IS NULL OR " + _INT, "an integer or NULL"), "name": _OPT_TEXT},
    "META_DATA_EXPORT": {"name": _OPT_TEXT, "value": _OPT_TEXT},
    # their names before nsys 2021.2 (the GPUs) and 2023 (the version): parsers/_nsys_meta.py
    "TARGET_INFO_CUDA_GPU": {"deviceId": _ID16, "name": _OPT_TEXT, "coreClockRate": _COUNT,
                             "numMultiprocessors": _COUNT, "computeCapabilityMajor": _COUNT,
                             "computeCapabilityMinor": _COUNT},
    "EXPORT_META_DATA": {"name": _OPT_TEXT, "value": _OPT_TEXT},
}
_KEYS = ("id", "cudaId", "deviceId")  # the column a GPU table's rows are looked up by
_NVTX_END = ("end IS NULL OR " + _TIME.format(c="end") + " AND end >= start",
             "NULL or an integer time within +-2**62 ns, at or after start")


def check(con: sqlite3.Connection, tables: set[str], path: Path) -> None:
    """Raise TraceFormatError naming table, row, column and value for the first bad value."""
    for table, (columns, rows, needs) in TABLES.items():
        present = {r[1] for r in con.execute(f"PRAGMA table_info({table})")} if table in tables else set()
        if present and needs <= present:  # else the parser does not read it (or says what is missing)
            rules = {c: RULES[c] for c in columns if c in present}
            if table == "NVTX_EVENTS" and "end" in present:
                rules["end"] = _NVTX_END
            _check_table(con, table, rows, rules, path)
    for table, rules in META_TABLES.items():
        if table in tables:
            present = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
            if missing := [c for c in _KEYS if c in rules and c not in present]:
                raise TraceFormatError(path, f"{table} has no column {missing[0]}")
            _check_table(con, table, "1", {c: r for c, r in rules.items() if c in present}, path)
    _check_names(con, tables, path)


def _good(rule: str, column: str) -> str:
    return f"COALESCE(({rule.format(c=column)}), 0)"


def _check_table(con: sqlite3.Connection, table: str, rows: str, rules: dict[str, tuple[str, str]],
                 path: Path) -> None:
    if not rules:
        return
    all_good = " AND ".join(_good(rule, c) for c, (rule, _) in rules.items())
    bad = con.execute(f"SELECT rowid FROM {table} WHERE ({rows}) AND NOT ({all_good}) LIMIT 1").fetchone()
    if bad is None:
        return
    for column, (rule, wanted) in rules.items():
        raw, kind, good = con.execute(f"SELECT CAST({column} AS BLOB), typeof({column}), {_good(rule, column)} "
                                      f"FROM {table} WHERE rowid = ?", bad).fetchone()
        if not good:
            start = f" (start {_shown(*_value(con, table, 'start', bad[0]))})" if column == "end" else ""
            raise TraceFormatError(path, f"{table} row {bad[0]}: {column} {_shown(raw, kind)} ({kind}) "
                                         f"is not {wanted}{start}")


def _value(con: sqlite3.Connection, table: str, column: str, rowid: int) -> tuple[bytes | None, str]:
    return con.execute(f"SELECT CAST({column} AS BLOB), typeof({column}) FROM {table} WHERE rowid = ?",
                       (rowid,)).fetchone()


def _shown(raw: bytes | None, kind: str) -> str:
    """The value as read back as bytes (text that is not UTF-8 must not fail the message)."""
    value = raw if kind in ("blob", "null") else raw.decode("utf-8", "replace")
    text = value if kind in ("integer", "real") else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_NAMES = """
    SELECT k.rowid, k.demangledName, k.shortName, typeof(COALESCE(NULLIF(d.value, ''), s.value))
    FROM CUPTI_ACTIVITY_KIND_KERNEL k
    LEFT JOIN StringIds d ON d.id = k.demangledName
    LEFT JOIN StringIds s ON s.id = k.shortName
    WHERE typeof(COALESCE(NULLIF(d.value, ''), s.value)) != 'text' LIMIT 1"""


def kernel_names(con: sqlite3.Connection, path: Path) -> None:
    """Raise TraceFormatError naming the first kernel whose name (demangled unless empty, else
    short) is no text in StringIds: the parser calls it when a name it looked up is not text."""
    bad = con.execute(_NAMES).fetchone()
    where = f"row {bad[0]}: name: demangledName {bad[1]!r} and shortName {bad[2]!r} give" if bad else "a name:"
    raise TraceFormatError(path, f"CUPTI_ACTIVITY_KIND_KERNEL {where} no text in StringIds"
                                 + (f" ({bad[3]})" if bad else ""))


def _check_names(con: sqlite3.Connection, tables: set[str], path: Path) -> None:
    """No name or range text is longer than the limit (that every kernel's name is text is
    checked by the parser on the distinct names it looks up: kernel_names)."""
    texts = {"StringIds": "value", "NVTX_EVENTS": "text"}
    for table, column in texts.items():
        if table in tables and column in {r[1] for r in con.execute(f"PRAGMA table_info({table})")}:
            longest = con.execute(f"SELECT MAX(LENGTH({column})) FROM {table}").fetchone()[0] or 0
            if complaint := limits.long_name(longest):
                raise TraceFormatError(path, f"{table} {column}: {complaint}")
