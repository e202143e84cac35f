"""Nsight Systems SQLite export -> the events schema, one Profile per process.

The file is opened read-only. Tables exist only when the run used them:
kernels come from CUPTI_ACTIVITY_KIND_KERNEL (names through StringIds,
demangled where nsys has it, else its short name), copies from ..._MEMCPY
(named like Kineto's "Memcpy HtoD (Pinned -> Device)"), fills from ..._MEMSET;
copies and fills carry their size in `bytes`. A CUDA graph launch traced as a whole (nsys's
default `--cuda-graph-trace=graph`: CUPTI_ACTIVITY_KIND_GRAPH_TRACE, no row per node) is
one GPU op over the graph's span, named "CUDA graph N (whole launch)", and a note says its
kernels are not in the file; a launch whose nodes are in the file is read through them.

Scope: a GPU activity's scope is the NVTX ranges (push/pop and start/end)
open on the thread that launched it, at the start of the launching CUDA API
call, outermost first, joined by "/"; launched from another thread than the
process's main one (autograd, NCCL hooks), the main thread's open ranges come
first. Step: the step range (parsers/_steps.py) open then on any thread of the
process; step ranges stay out of scopes. The launch is found through
CUPTI_ACTIVITY_KIND_RUNTIME by correlation id *within the process*
(globalPid = globalTid & ~0xFFFFFF): correlation ids repeat across processes.
A start/end range belongs to the thread that started it. An activity whose
launch call is not in the file (a capture window cut before it) and unnamed
ranges give no scope. emit_nvtx's per-call counters (", op_id = N", ", seq = N",
", sizes = [...]") are dropped from range names so scopes align across calls and runs.

Ranks: nsys records no rank. `read` returns one Profile per process (a list
even for one), ranked in the order of their pids (meta.rank_from = "process
order") unless the caller maps pid -> rank. A file with one process leaves
the rank to the caller or the file name (rank 0 for a lone file).
"""
from __future__ import annotations

import itertools
import os
import re
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from tracelab.core import classify, schema
from tracelab.core.errors import RankError, TraceFormatError
from tracelab.ingest.budget import check_rows
from tracelab.core.note import Note
from tracelab.core.options import DEFAULT, Options, applying
from tracelab.core.schema import Meta, Profile

from . import _nsys_check, _nsys_graphs, _nsys_host, _nsys_memory
from ._nsys_meta import device_of, device_table, epoch_ns, nvtx_text, schema_gaps, session_meta
from ._shapes import op_work, spread
from ._steps import assign, compile_pattern, is_step, main_threads, numbers, repeat_note

NVTX_RANGE_TYPES = (59, 60)  # ENUM_NSYS_EVENT_TYPE: NvtxPushPopRange, NvtxStartEndRange
PID_MASK = ~0xFFFFFF  # globalTid -> globalPid; pid = (globalPid >> 24) & 0xFFFFFF

# CUpti_ActivityMemcpyKind, for exports without ENUM_CUDA_MEMCPY_OPER
MEMCPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
                7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD"}

# kernel columns: integers always there, and nullable ones (demangled, short: StringIds ids)
_KERNEL_COLUMNS = {"start": "start", "end": "end", "device": "deviceId", "stream": "streamId"}
_KERNEL_NULLABLE = {"correlationId": "correlationId", "globalPid": "globalPid",
                    "demangled": "demangledName", "short": "shortName"}
_BATCH_ROWS = 1 << 18  # rows fetched at a time: each batch's tuples become int64 arrays at once
_MEMCPY = """
    SELECT start, end, deviceId AS device, streamId AS stream, correlationId, globalPid,
           bytes, copyKind, srcKind, dstKind
    FROM CUPTI_ACTIVITY_KIND_MEMCPY"""
_GRAPHS = """
    SELECT start, end, deviceId AS device, streamId AS stream, correlationId, globalPid, graphId
    FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE"""
_MEMSET = """
    SELECT start, end, deviceId AS device, streamId AS stream, correlationId, globalPid, bytes, memKind
    FROM CUPTI_ACTIVITY_KIND_MEMSET"""
_NVTX = f"""
    SELECT n.globalTid AS tid, n.start, COALESCE(n.end, 9223372036854775807) AS end,  -- never closed: open to the end
           {{text}} AS text
    FROM NVTX_EVENTS n {{join}}
    WHERE n.eventType IN {NVTX_RANGE_TYPES}"""
# nsys's memory kinds (srcKind, dstKind, memKind), for exports without ENUM_CUDA_MEM_KIND (before
# nsys 2023): 0-3 mean the same in every export since 2021; later values changed meaning (4 was
# Unknown in nsys 2021.1, Managed since), so they stay unnamed ("?")
MEMORY_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array"}


@applying
def read(path: str | os.PathLike, options: Options = DEFAULT,
         ranks: Mapping[int, int] | None = None) -> list[Profile]:
    """Read one nsys export: one Profile per process, in pid order.

    `ranks` maps a process id (pid) to its rank, overriding the pid order; `options.step_pattern`
    names the NVTX step ranges (parsers/_steps.py; default ProfilerStep#N, step N, ...).
    """
    path = Path(path)
    if path.is_file() and path.stat().st_size == 0:
        raise TraceFormatError(path, "empty file")
    try:
        with closing(_connect(path)) as con:
            activity, file_meta, devices = _read_tables(con, path, compile_pattern(options.step_pattern))
            activity, hosts = _nsys_host.read(con, activity, path, _EMIT_NVTX_COUNTERS, options.step_pattern)
            memory = _nsys_memory.read(con, path)
    except sqlite3.Error as e:
        raise TraceFormatError(path, f"cannot read it as an nsys SQLite export ({e})") from None
    except UnicodeDecodeError as e:  # a text_factory decode; sqlite3's own is an OperationalError
        raise TraceFormatError(path, f"invalid UTF-8 in a string ({e.reason})") from None
    profiles = _nsys_host.with_host(_profiles(activity, file_meta, devices, path, ranks), hosts)
    return _nsys_memory.with_memory(profiles, memory, hosts, options.step_pattern)


def _connect(path: Path) -> sqlite3.Connection:
    """Read-only, and immutable (no lock, no -shm or -wal file made beside it, so a read-only
    folder works and nothing is left behind) unless a -wal file holds pages not yet in the
    database, which only a WAL-aware read sees."""
    wal = path.with_name(path.name + "-wal")
    immutable = "" if wal.exists() and wal.stat().st_size else "&immutable=1"
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro{immutable}", uri=True)


def _read_tables(con: sqlite3.Connection, path: Path, step_re: re.Pattern) -> tuple[pd.DataFrame, dict[str, Any], dict]:
    tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in tables):
        raise TraceFormatError(path, "SQLite file without CUPTI_ACTIVITY_KIND_* tables: not an nsys export "
                                     "(or one made without CUDA trace)")
    _nsys_check.check(con, tables, path)  # every column read below, typed and in range
    activity = _activity(con, tables, path)
    if activity.empty:
        raise TraceFormatError(path, "nsys export without GPU activity (no kernel, memcpy or memset rows)")
    check_rows(path, len(activity), "GPU rows")
    activity["scope"], activity["step"], notes = _regions(con, tables, activity, step_re)
    if whole := activity.attrs.get("whole_graphs"):
        notes = [Note("whole_graphs", {"launches": int(whole)}), *notes]
    activity["flops"] = _nvtx_flops(con, tables, activity)
    notes = [*schema_gaps(tables), *notes]
    return activity, {**session_meta(con, tables), "notes": notes}, device_table(con, tables)


def _query(con: sqlite3.Connection, sql: str) -> pd.DataFrame:
    cursor = con.execute(sql)
    return pd.DataFrame.from_records(cursor.fetchall(), columns=[d[0] for d in cursor.description])


def _ints(con: sqlite3.Connection, table: str, columns: Mapping[str, str],
          nullable: Mapping[str, str] | None = None, where: str = "1") -> tuple[dict[str, np.ndarray], dict]:
    """Integer columns of `table` in bulk (alias -> SQL column), and per nullable column a
    mask of its NULLs (_nsys_check has made sure every value is an integer or NULL): the
    rows are counted, then fetched in batches straight into one int64 array per column, so
    millions of rows never stand as Python tuples at once. A nullable column C is read as
    IFNULL(C, 0), its NULLs as one bit of one extra column (any int64 may be real data: no
    value can stand for NULL, and one small flag per row costs less than one per column)."""
    nullable = nullable or {}
    select = [f'{c} AS "{a}"' for a, c in columns.items()] + [f'IFNULL({c}, 0) AS "{a}"' for a, c in nullable.items()]
    if nullable:
        select.append(" | ".join(f"(({c} IS NULL) << {bit})" for bit, c in enumerate(nullable.values())))
    n_rows = con.execute(f"SELECT COUNT(*) FROM {table} WHERE {where}").fetchone()[0]
    data = np.empty((len(select), n_rows), dtype=np.int64)  # one contiguous row per column
    cursor, at = con.execute(f"SELECT {', '.join(select)} FROM {table} WHERE {where}"), 0
    while rows := cursor.fetchmany(_BATCH_ROWS):
        if at + len(rows) > n_rows:
            raise sqlite3.DatabaseError(f"{table} grew while it was read")
        flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=len(rows) * len(select))
        data[:, at:at + len(rows)] = flat.reshape(len(rows), len(select)).T
        at += len(rows)
    if at != n_rows:
        raise sqlite3.DatabaseError(f"{table} shrank while it was read")
    out = dict(zip([*columns, *nullable], data))
    nulls = {a: (data[-1] >> bit & 1).astype(bool) for bit, a in enumerate(nullable)}
    return out, nulls


def _or_nan(values: np.ndarray, null: np.ndarray) -> np.ndarray:
    """values, as float64 with NaN at its NULLs where it has any (as pandas.from_records gives it)."""
    return np.where(null, np.nan, values) if null.any() else values


def _kernels(con: sqlite3.Connection, tables: set[str], path: Path) -> pd.DataFrame:
    """Kernel rows; the name is the demangled name unless missing or empty, else the short
    one, looked up once per distinct string id (StringIds), not joined per row."""
    ints, nulls = _ints(con, "CUPTI_ACTIVITY_KIND_KERNEL", _KERNEL_COLUMNS, _KERNEL_NULLABLE)
    has_strings = "StringIds" in tables
    strings = dict(con.execute("SELECT id, value FROM StringIds")) if has_strings else {}
    name, missing, used = _lookup(ints["demangled"], nulls["demangled"], strings, lambda v: v is not None and v != "")
    text = all(isinstance(v, str) for v in used if v is not None)
    if (fallback := np.flatnonzero(missing)).size:
        name[fallback], _, used = _lookup(ints["short"][fallback], nulls["short"][fallback], strings,
                                          lambda v: v is not None)
        text = text and all(isinstance(v, str) for v in used)
    if has_strings and not text:
        _nsys_check.kernel_names(con, path)  # raises, naming the first kernel without a text name
    frame = {a: ints[a] for a in _KERNEL_COLUMNS}
    frame |= {a: _or_nan(ints[a], nulls[a]) for a in ("correlationId", "globalPid")}
    return pd.DataFrame(frame).assign(name=name)


def _lookup(ids: np.ndarray, null: np.ndarray, strings: dict, usable) -> tuple[np.ndarray, np.ndarray, list]:
    """Per row, the StringIds value of its id where `usable`, else None, looked up once per
    distinct id; which rows got None; the distinct values the rows got."""
    codes, distinct = pd.factorize(ids)
    values = [v if usable(v) else None for v in (strings.get(int(i)) for i in distinct)]
    if null.any():
        codes = np.where(null, len(values), codes)
        values.append(None)
    table = np.array(values, dtype=object)
    return table[codes], np.array([v is None for v in values], dtype=bool)[codes], values


def _enum(con: sqlite3.Connection, tables: set[str], table: str, column: str = "label") -> dict[int, str]:
    if table not in tables:
        return {}
    return dict(con.execute(f"SELECT id, {column} FROM {table}").fetchall())


# ---- GPU activity --------------------------------------------------------------


def _activity(con: sqlite3.Connection, tables: set[str], path: Path) -> pd.DataFrame:
    """Kernels, copies and fills in one frame: kind, name, start, end, device, stream,
    correlationId, globalPid, bytes."""
    parts = []
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        parts.append(_kernels(con, tables, path).assign(kind="kernel", bytes=np.nan))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        parts.append(_memcpy(con, tables))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        parts.append(_memset(con, tables))
    if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables:
        parts.append(_whole_graphs(con, parts))
    whole = len(parts[-1]) if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables else 0
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame()
    cols = ["kind", "name", "start", "end", "device", "stream", "correlationId", "globalPid", "bytes"]
    df = pd.concat([p[cols] for p in parts], ignore_index=True)
    df = df.sort_values("start", kind="stable", ignore_index=True)
    df.attrs["whole_graphs"] = whole  # said in a note (_read_tables)
    return df


def _memcpy(con: sqlite3.Connection, tables: set[str]) -> pd.DataFrame:
    df = _query(con, _MEMCPY)
    names = _enum(con, tables, "ENUM_CUDA_MEMCPY_OPER", "name")
    kinds = {k: _copy_kind(v) for k, v in names.items()} or MEMCPY_KINDS
    memory = _enum(con, tables, "ENUM_CUDA_MEM_KIND") or MEMORY_KINDS
    name = ("Memcpy " + df["copyKind"].map(lambda k: kinds.get(k, f"kind {k}")) + " ("
            + df["srcKind"].map(memory).fillna("?") + " -> " + df["dstKind"].map(memory).fillna("?") + ")")
    return df.assign(kind="memcpy", name=name, bytes=df["bytes"].astype("float64"))


def _copy_kind(enum_name: str) -> str:
    """CUDA_MEMCPY_KIND_HTOD -> HtoD, CUDA_MEMCPY_KIND_UVM_DTOH -> UVM DtoH."""
    short = enum_name.removeprefix("CUDA_MEMCPY_KIND_")
    short = re.sub(r"([A-Z])TO([A-Z])$", r"\1to\2", short).replace("_", " ")
    return short.capitalize() if short == "UNKNOWN" else short


def _whole_graphs(con: sqlite3.Connection, nodes: list[pd.DataFrame]) -> pd.DataFrame:
    """Graph launches traced as a whole, as kernel rows, but those whose nodes' rows (the same
    process and correlation id) are in `nodes`: their work is counted there already."""
    df = _query(con, _GRAPHS)
    known = pd.concat([p[["globalPid", "correlationId"]] for p in nodes]) if nodes else None
    if known is not None and len(df):
        key = pd.MultiIndex.from_frame(df[["globalPid", "correlationId"]].astype("float64"))
        df = df[~key.isin(pd.MultiIndex.from_frame(known.astype("float64")))]
    names = [f"CUDA graph {'?' if pd.isna(g) else int(g)} (whole launch)" for g in df["graphId"]]
    return df.assign(kind="kernel", name=names, bytes=np.nan)


def _memset(con: sqlite3.Connection, tables: set[str]) -> pd.DataFrame:
    df = _query(con, _MEMSET)
    memory = _enum(con, tables, "ENUM_CUDA_MEM_KIND") or MEMORY_KINDS
    name = "Memset (" + df["memKind"].map(memory).fillna("?") + ")"
    return df.assign(kind="memset", name=name, bytes=df["bytes"].astype("float64"))


# ---- NVTX scopes ----------------------------------------------------------------


# torch.autograd.profiler.emit_nvtx appends per-call counters to every range ("aten::view,
# op_id = 314290", ", seq = 12", ", sizes = [[4, 8]]"): dropped, so that scopes align across
# calls, ranks and runs (the operator name stays).
_EMIT_NVTX_COUNTERS = r", (?:seq|op_id) = \d+|, sizes = \[.*\]$"


def _regions(con: sqlite3.Connection, tables: set[str], activity: pd.DataFrame,
             step_re: re.Pattern) -> tuple[np.ndarray, pd.arrays.IntegerArray, list[str]]:
    """Per activity row, its scope and step: the NVTX ranges open at its launch (_scopes; a
    CUDA-graph replay's row: at its node's capture, parsers/_nsys_graphs.py), and the step
    range open at its launch on any thread of its process (parsers/_steps.py); notes."""
    scopes = np.full(len(activity), "", dtype=object)
    steps = pd.array([None] * len(activity), dtype="Int64")
    if "NVTX_EVENTS" not in tables or "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
        return scopes, steps, []
    launches = _launches(con, activity)
    captured, notes = _nsys_graphs.capture_points(con, tables, activity, launches)
    ranges = _query(con, _nvtx(con))
    ranges = ranges[ranges["text"].notna() & (ranges["end"] > ranges["start"])]  # an open range: end = max
    ranges = ranges.assign(text=ranges["text"].str.replace(_EMIT_NVTX_COUNTERS, "", regex=True))
    step = is_step(ranges["text"].tolist(), step_re)
    rows = launches["row"].to_numpy()
    step_ranges = _step_ranges(ranges[step], step_re)
    steps[rows] = assign(launches["globalPid"].to_numpy(), launches["launch_ns"].to_numpy(), step_ranges)
    scopes[rows] = _scopes(ranges[~step], captured)
    return scopes, steps, notes + repeat_note(ranges["text"][step].tolist(), step_ranges["group"],
                                              step_ranges["start_ns"], step_ranges["step"], step_re)


_SIZES = re.compile(r"^(aten::\w+),.*?, sizes = (\[.*?\])(?:, input_op_ids = .*)?$")


def _nvtx_flops(con: sqlite3.Connection, tables: set[str], activity: pd.DataFrame) -> np.ndarray:
    """Per activity row, FLOPs from torch.autograd.profiler.emit_nvtx(record_shapes=True): the
    `sizes` of the innermost aten range open on the launching thread (parsers/_shapes.py),
    spread over that call's kernels by time. NVTX gives no dtypes, so bytes stay unknown;
    NaN where no range carries sizes (the file is not read twice for nothing)."""
    flops = np.full(len(activity), np.nan)
    if "NVTX_EVENTS" not in tables or "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
        return flops
    text, join = nvtx_text(con)
    if not con.execute(f"SELECT 1 FROM NVTX_EVENTS n {join} WHERE {text} LIKE '%, sizes = [%' LIMIT 1").fetchone():
        return flops
    ranges = _query(con, _nvtx(con))
    shaped = ranges[ranges["text"].notna() & ranges["text"].str.contains(", sizes = [", regex=False)]
    shaped = shaped.reset_index(drop=True)
    shaped = shaped.assign(text=[f"{i}|{t}" for i, t in enumerate(shaped["text"])])  # ids survive the sweep
    launches = _launches(con, activity)
    launches = launches[(activity["kind"].to_numpy()[launches["row"].to_numpy()] == "kernel")]
    by_thread = dict(tuple(shaped.groupby("tid", sort=False)))
    op_of_row = np.full(len(activity), -1, dtype=np.int64)
    for t, group in launches.groupby("tid", sort=False):
        if t in by_thread:
            inner = [path.rsplit("/", 1)[-1] for path in _sweep(by_thread[t], group["launch_ns"].to_numpy())]
            op_of_row[group["row"].to_numpy()] = [int(p.split("|", 1)[0]) if p else -1 for p in inner]
    op_flops = np.full(len(shaped), np.nan)
    for i in np.unique(op_of_row[op_of_row >= 0]).tolist():
        if found := _SIZES.match(shaped["text"].iat[i].split("|", 1)[1]):
            op_flops[i] = op_work(found.group(1), found.group(2), None, "[]")[0]
    dur = (activity["end"] - activity["start"]).to_numpy()
    return spread(op_of_row, dur, op_flops, np.full(len(shaped), np.nan))[0]


def _nvtx(con: sqlite3.Connection) -> str:
    """The NVTX ranges query, its text read as this export holds it (_nsys_meta.nvtx_text)."""
    text, join = nvtx_text(con)
    return _NVTX.format(text=text, join=join)


def _step_ranges(ranges: pd.DataFrame, step_re: re.Pattern) -> dict[str, np.ndarray]:
    group = ranges["tid"].to_numpy() & PID_MASK
    start_ns = ranges["start"].to_numpy()
    end_ns = ranges["end"].to_numpy()
    return {"group": group, "start_ns": start_ns, "end_ns": end_ns,
            "step": numbers(ranges["text"].tolist(), group, start_ns, end_ns, step_re)}


def _scopes(ranges: pd.DataFrame, launches: pd.DataFrame) -> list[str]:
    """Per launch, the NVTX ranges open on its thread at launch ("" if none). A launch from
    another thread than its process's main one (autograd, NCCL hooks) gets the main
    thread's open ranges first, its own nested inside (`backward/ncclAllReduce`)."""
    by_thread = dict(tuple(ranges.groupby("tid", sort=False)))
    tid = ranges["tid"].to_numpy()
    main = main_threads(tid & PID_MASK, tid, (ranges["end"] - ranges["start"]).to_numpy())
    out = pd.Series("", index=launches.index, dtype=object)
    for t, group in launches.groupby("tid", sort=False):
        at = group["launch_ns"].to_numpy()
        own = _sweep(by_thread[t], at) if t in by_thread else [""] * len(at)
        main_tid = main.get(int(t) & PID_MASK, t)
        if main_tid != t:
            outer = _sweep(by_thread[main_tid], at)
            own = [f"{o}/{s}" if o and s else o or s for o, s in zip(outer, own)]
        out[group.index] = own
    return out.tolist()


def _launches(con: sqlite3.Connection, activity: pd.DataFrame) -> pd.DataFrame:
    """Activity rows with the thread and start time of their launching API call: the first
    call in the file with the row's process and correlation id."""
    calls = _ints(con, "CUPTI_ACTIVITY_KIND_RUNTIME", {"tid": "globalTid", "correlationId": "correlationId",
                                                        "launch_ns": "start"},
                  where="correlationId IS NOT NULL AND globalTid IS NOT NULL")[0]
    rows = activity[["globalPid", "correlationId"]].dropna().astype("int64").reset_index(names="row")
    call = _first_match(calls["tid"] & PID_MASK, calls["correlationId"],
                        rows["globalPid"].to_numpy(), rows["correlationId"].to_numpy())
    found = call >= 0
    rows = rows[found].reset_index(drop=True)
    return rows.assign(tid=calls["tid"][call[found]], launch_ns=calls["launch_ns"][call[found]])


def _first_match(pid: np.ndarray, corr: np.ndarray, want_pid: np.ndarray, want_corr: np.ndarray) -> np.ndarray:
    """Per wanted (pid, corr) pair, the index of its first occurrence in (pid, corr), else -1:
    by sorting (stable: the first stays first; correlation ids come nearly sorted) and binary
    search per process, not a hash join (pandas.merge's tables outgrow the caches at millions
    of rows)."""
    order = np.lexsort((corr, pid))
    pid, corr = pid[order], corr[order]
    first = np.r_[True, (pid[1:] != pid[:-1]) | (corr[1:] != corr[:-1])] if len(order) else np.ones(0, bool)
    pid, corr, order = pid[first], corr[first], order[first]
    out = np.full(len(want_pid), -1, dtype=np.int64)
    by_pid = np.argsort(want_pid, kind="stable")
    groups = np.flatnonzero(np.r_[True, want_pid[by_pid][1:] != want_pid[by_pid][:-1]]) if len(by_pid) else []
    for lo_q, hi_q in zip(groups, [*groups[1:], len(by_pid)]):
        at = by_pid[lo_q:hi_q]
        lo, hi = np.searchsorted(pid, want_pid[at[0]], "left"), np.searchsorted(pid, want_pid[at[0]], "right")
        pos = lo + np.searchsorted(corr[lo:hi], want_corr[at])
        hit = pos < hi
        hit[hit] = corr[pos[hit]] == want_corr[at[hit]]
        out[at[hit]] = order[pos[hit]]
    return out


def _sweep(ranges: pd.DataFrame, launch_ns: np.ndarray) -> list[str]:
    """One pass in time over range opens, closes and launches of one thread.

    At equal times a close comes before an open before a launch (ranges are
    [start, end)), and of two ranges opened together the longer (outer) first.
    """
    n = len(ranges)
    times = np.concatenate([ranges["end"].to_numpy(), ranges["start"].to_numpy(), launch_ns])
    what = np.concatenate([np.zeros(n, np.int8), np.ones(n, np.int8), np.full(len(launch_ns), 2, np.int8)])
    ids = np.concatenate([np.arange(n), np.arange(n), np.arange(len(launch_ns))])
    outer_first = np.concatenate([np.zeros(n), -ranges["end"].to_numpy(np.float64), np.zeros(len(launch_ns))])
    texts = ranges["text"].tolist()
    open_ranges: dict[int, str] = {}  # insertion order = opening order = outermost first
    out, current = [""] * len(launch_ns), None
    for k in np.lexsort((outer_first, what, times)):
        event, i = what[k], ids[k]
        if event == 0:
            del open_ranges[i]
            current = None
        elif event == 1:
            open_ranges[i] = texts[i]
            current = None
        else:
            current = "/".join(open_ranges.values()) if current is None else current
            out[i] = current
    return out


# ---- profiles ---------------------------------------------------------------------------


def _profiles(activity: pd.DataFrame, file_meta: dict[str, Any], devices: dict, path: Path,
              ranks: Mapping[int, int] | None) -> list[Profile]:
    trace_start_ns = int(activity["start"].min())
    global_pids = activity["globalPid"].fillna(-1).astype("int64")  # -1: an export without globalPid
    pid_of = {g: int((g >> 24) & 0xFFFFFF) if g >= 0 else None for g in global_pids.unique()}
    order = sorted(pid_of, key=lambda g: (pid_of[g] is None, pid_of[g] or 0))
    rank_of = _ranks([pid_of[g] for g in order], ranks, path)
    file_meta = {**file_meta, "path": str(path), "source": "nsys", "trace_start_ns": trace_start_ns,
                 "trace_start_epoch_ns": epoch_ns(file_meta, trace_start_ns),
                 "world_size": len(order) if len(order) > 1 else None}
    names = file_meta.pop("process_names", {})
    profiles = []
    for g in order:
        rows, pid = activity[global_pids == g], pid_of[g]
        rank = rank_of.get(pid)
        meta = {**file_meta, "pid": pid, "process_name": names.get(pid), "rank": rank,
                "devices": {int(d): device_of(devices, pid, int(d)) for d in sorted(rows["device"].unique())}}
        if rank is not None:
            meta["rank_from"] = "caller" if ranks else "process order"
        meta[classify.LAUNCHED] = _comm_launches(rows, trace_start_ns)
        profiles.append(Profile(_events(rows, trace_start_ns, -1 if rank is None else rank), Meta.of(meta, path)))
    return profiles


def _comm_launches(rows: pd.DataFrame, trace_start_ns: int) -> dict[str, list]:
    """classify.comm_launches of a process's activity rows: the innermost NVTX range open at each
    launch (a communication library's own, NCCL's ncclAllReduce) and the launch call's name."""
    context = [classify.comm_context(None, "", str(s)) for s in rows["scope"].tolist()]
    where = {"device": rows["device"].to_numpy(), "stream": rows["stream"].to_numpy(),
             "start_ns": (rows["start"] - trace_start_ns).to_numpy()}
    api = rows["launch_api"].tolist() if "launch_api" in rows.columns else [""] * len(rows)
    return classify.comm_launches(rows["kind"].to_numpy(), rows["name"].tolist(), context, api, where)


def _ranks(pids: list[int | None], ranks: Mapping[int, int] | None, path: Path) -> dict[int | None, int]:
    if ranks:
        missing = [p for p in pids if p not in ranks]
        if missing:
            raise RankError(path, f"no rank given for process(es) {missing}; the file holds pids {pids}")
        return {p: int(ranks[p]) for p in pids}
    if len(pids) == 1:
        return {}
    return {p: r for r, p in enumerate(pids)}


def _events(rows: pd.DataFrame, trace_start_ns: int, rank: int) -> pd.DataFrame:
    df = schema.coerce({
        "rank": rank, "source": "nsys", "kind": rows["kind"].to_numpy(), "name": rows["name"].to_numpy(),
        "scope": rows["scope"].to_numpy(), "device": rows["device"].to_numpy(),
        "stream": rows["stream"].to_numpy(), "start_ns": (rows["start"] - trace_start_ns).to_numpy(),
        "dur_ns": (rows["end"] - rows["start"]).to_numpy(), "count": 1,
        "bytes": rows["bytes"].to_numpy(), "flops": rows["flops"].to_numpy(), "step": rows["step"].array,
        **_nsys_host.launch_columns(rows, trace_start_ns),
    }, n_rows=len(rows), spec=schema.PARSED)
    return schema.validate(df, schema.PARSED)
