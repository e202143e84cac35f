"""nsys SQLite parser: every real export, counts and sums straight from SQL (per
process), names against nsys's own short names, NVTX scopes from an independent
query per chosen kernel, rank rules, broken inputs."""
from __future__ import annotations

import hashlib
import re
import sqlite3
from pathlib import Path

import pytest
from helpers import shared_trace, slow_beyond

import tracelab
from tracelab.core import classify
from tracelab.core.errors import RankError, TraceFormatError
from tracelab.parsers import nsys

DATA = Path(__file__).resolve().parent / "data"
# nsys-ai's public exports by name (helpers.shared_trace: CI has them) and our own captures
PUBLIC = [f"nsys-ai/{name}.sqlite" for name in ("h100_2gpu_1s", "mfu_2gpu_after", "mfu_2gpu_before", "mock")]
FILES = PUBLIC + sorted(DATA.glob("*-nsys/*.sqlite"))
PID = "((globalPid >> 24) & 16777215)"
# A rule on every file repeats its check on more captures of one kind: the default run reads the small
# public export, a public one of two processes with NVTX, one of our ranks and our capture whose only
# NVTX ranges are steps; CI's slow stage reads every file.
FAST = {PUBLIC[0], PUBLIC[3], DATA / "overlap-2gpu-nsys/rank0.sqlite", DATA / "idle-sync-1gpu-nsys/rank0.sqlite"}
TABLES = {"kernel": "CUPTI_ACTIVITY_KIND_KERNEL", "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
          "memset": "CUPTI_ACTIVITY_KIND_MEMSET"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sql(path: Path, query: str, *args) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query, args).fetchall()
    finally:
        con.close()


def _has(path: Path, table: str) -> bool:
    return bool(_sql(path, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", table))


def _need_nvtx(path: Path) -> None:
    if not _has(path, "NVTX_EVENTS"):
        pytest.skip(f"{path.name} has no NVTX_EVENTS table")


class _Reads(dict):
    """path -> nsys.read(path), read once on first use."""

    def __missing__(self, path: Path) -> list:
        self[path] = nsys.read(path)
        return self[path]


@pytest.fixture(scope="module")
def parsed() -> dict[Path, list]:
    return _Reads()


@pytest.fixture
def path(request) -> Path:
    """A FILES entry as a path: a public export (skips when absent) or one of ours."""
    return shared_trace(request.param) if isinstance(request.param, str) else request.param


def _name(entry: str | Path) -> str:
    return "/".join(Path(entry).parts[-2:])


def test_our_captures_are_found() -> None:
    assert len([f for f in FILES if isinstance(f, Path)]) >= 4


@pytest.mark.parametrize("path", slow_beyond(FILES, FAST), ids=_name, indirect=True)
@pytest.mark.parametrize("kind", sorted(TABLES))
def test_counts_and_sums_per_process(parsed, path: Path, kind: str) -> None:
    got = {p.meta.pid: p.events[p.events["kind"] == kind] for p in parsed[path]}
    want = {}
    if _has(path, TABLES[kind]):
        want = {pid: (n, total) for pid, n, total in
                _sql(path, f"SELECT {PID}, count(*), sum(end - start) FROM {TABLES[kind]} GROUP BY 1")}
    assert {pid: (len(df), int(df["dur_ns"].sum())) for pid, df in got.items() if len(df)} == want


@pytest.mark.parametrize("path", slow_beyond(FILES, FAST), ids=_name, indirect=True)
def test_file_totals_and_shape(parsed, path: Path) -> None:
    profiles = parsed[path]
    n, total = _sql(path, "SELECT count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    kernels = [p.events[p.events["kind"] == "kernel"] for p in profiles]
    assert sum(len(k) for k in kernels) == n and sum(int(k["dur_ns"].sum()) for k in kernels) == total
    assert min(int(p.events["start_ns"].min()) for p in profiles) == 0
    assert all((p.events["source"] == "nsys").all() and (p.events["count"] == 1).all() for p in profiles)
    pids = sorted(pid for (pid,) in _sql(path, f"SELECT DISTINCT {PID} FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    assert [p.meta.pid for p in profiles] == pids


@pytest.mark.parametrize("path", slow_beyond(PUBLIC, FAST), ids=_name, indirect=True)
def test_kernel_names_agree_with_nsys_short_names(parsed, path: Path) -> None:
    want = sorted(_sql(path, f"SELECT {PID}, s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                             "JOIN StringIds s ON s.id = k.shortName GROUP BY 1, 2"))
    got = []
    for p in parsed[path]:
        events = classify.classified(p.events)
        kernels = events[events["kind"] == "kernel"]["kernel"].astype(str).value_counts()
        got += [(p.meta.pid, name, int(n)) for name, n in kernels.items()]
    assert sorted(got) == want


# The NVTX ranges open on the launching thread when the launch call began, by a
# query that shares nothing with the parser's sweep.
_EXPECTED_SCOPE = """
    SELECT COALESCE(n.text, s.value) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
    JOIN NVTX_EVENTS n ON n.globalTid = r.globalTid
    LEFT JOIN StringIds s ON s.id = n.textId
    WHERE r.correlationId = ? AND (r.globalTid >> 24) = (? >> 24) AND n.eventType IN (59, 60)
      AND n.start <= r.start AND (n.end IS NULL OR n.end > r.start)
      AND COALESCE(n.text, s.value) IS NOT NULL
    ORDER BY n.start, n.end DESC"""
# the launch calls (correlation id, process) as one set, looked up per kernel: an IN list is
# searched through a temporary index, a correlated EXISTS scans every call again per kernel
_CALLS = "SELECT r.correlationId, r.globalTid >> 24 FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId IS NOT NULL"
_CHOSEN = f"""
    SELECT k.start, k.deviceId, k.streamId, k.correlationId, k.globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL k
    WHERE (k.correlationId, k.globalPid >> 24) IN ({_CALLS})
    ORDER BY k.start"""


@pytest.mark.parametrize("path", slow_beyond(PUBLIC, FAST), ids=_name, indirect=True)
def test_nvtx_scope_encloses_the_launch(parsed, path: Path) -> None:
    _need_nvtx(path)
    by_pid = {p.meta.pid: p for p in parsed[path]}
    launched = _sql(path, _CHOSEN)
    chosen = launched[:: max(1, len(launched) // 25)]
    scoped = 0
    for start, device, stream, correlation, global_pid in chosen:
        # emit_nvtx's per-call counters ("aten::view, op_id = 314290") are not part of a scope
        want = "/".join(t.split(", op_id = ")[0].split(", seq = ")[0].split(", sizes = ")[0]
                        for (t,) in _sql(path, _EXPECTED_SCOPE, correlation, global_pid))
        profile = by_pid[(global_pid >> 24) & 0xFFFFFF]
        df = profile.events
        row = df[(df["start_ns"] == start - profile.meta.trace_start_ns) & (df["device"] == device)
                 & (df["stream"] == stream) & (df["kind"] == "kernel")]
        assert row["scope"].tolist() == [want]
        scoped += bool(want)
    assert scoped >= len(chosen) // 2  # most launches here sit inside NVTX ranges


@pytest.mark.parametrize("path", slow_beyond(FILES, FAST), ids=_name, indirect=True)
def test_no_scope_without_a_launch_call(parsed, path: Path) -> None:
    _need_nvtx(path)
    launched = len(_sql(path, _CHOSEN))
    with_scope = sum(int((p.events.query("kind == 'kernel'")["scope"] != "").sum()) for p in parsed[path])
    assert with_scope <= launched
    # a capture whose only NVTX ranges are steps (tests/data/idle-sync-1gpu-nsys) has no scopes at all
    texts = [t for (t,) in _sql(path, "SELECT COALESCE(n.text, s.value) FROM NVTX_EVENTS n "
                                      "LEFT JOIN StringIds s ON s.id = n.textId") if t]
    if any(not re.fullmatch(r"step \d+", t) for t in texts):
        assert with_scope > 0


# kernels whose correlation id has launch calls, none of them in the kernel's own process
_ONLY_ELSEWHERE = f"""
    SELECT k.start, k.globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL k
    WHERE k.correlationId IN (SELECT r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r)
      AND (k.correlationId, k.globalPid >> 24) NOT IN ({_CALLS})"""


@pytest.mark.shared
def test_correlation_ids_are_joined_per_process(parsed) -> None:
    # In h100_2gpu_1s, 11 kernels have their launch cut from the capture but share a
    # correlation id with the other process's launch calls, inside NVTX ranges: a join
    # that ignores the process would hand them the other rank's scope.
    path = shared_trace("nsys-ai/h100_2gpu_1s.sqlite")
    kernels = _sql(path, _ONLY_ELSEWHERE)
    assert len(kernels) == 11
    by_pid = {p.meta.pid: p for p in parsed[path]}
    for start, global_pid in kernels:
        profile = by_pid[(global_pid >> 24) & 0xFFFFFF]
        df = profile.events
        row = df[(df["start_ns"] == start - profile.meta.trace_start_ns) & (df["kind"] == "kernel")]
        assert row["scope"].tolist() == [""]


@pytest.mark.slow
@pytest.mark.shared
def test_ranks_by_process_order_and_override() -> None:
    path = shared_trace("nsys-ai/mfu_2gpu_before.sqlite")
    profiles = nsys.read(path)
    pids = [p.meta.pid for p in profiles]
    assert pids == sorted(pids) and [p.meta.rank for p in profiles] == [0, 1]
    assert all(p.meta.rank_from == "process order" and p.meta.world_size == 2 for p in profiles)
    assert [p.events["rank"].unique().tolist() for p in profiles] == [[0], [1]]
    swapped = nsys.read(path, ranks={pids[0]: 1, pids[1]: 0})
    assert [p.meta.rank for p in swapped] == [1, 0] and swapped[0].meta.rank_from == "caller"
    assert (swapped[0].events["rank"] == 1).all()
    with pytest.raises(RankError):
        nsys.read(path, ranks={pids[0]: 0})


@pytest.mark.slow
@pytest.mark.shared
def test_a_file_of_two_processes_is_two_ranks() -> None:
    """load() is one rank: it refuses a two-process file and names load_many, which gives one
    Profile per process whose .rank, rows and devices agree with the SQLite's pids."""
    path = shared_trace("nsys-ai/h100_2gpu_1s.sqlite")
    with pytest.raises(RankError, match=r"2 processes \(ranks 0, 1\).*load_many"):
        tracelab.load(path)
    profiles = tracelab.load_many(path)
    pids = sorted(pid for (pid,) in _sql(path, f"SELECT DISTINCT {PID} FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    devices = dict(_sql(path, f"SELECT {PID}, min(deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1"))
    assert [p.rank for p in profiles] == [0, 1]
    assert [p.meta.pid for p in profiles] == pids
    for p in profiles:
        assert p.events["rank"].unique().tolist() == [p.rank]
        kernels = p.events[p.events["kind"] == "kernel"]
        assert kernels["device"].unique().tolist() == [devices[p.meta.pid]]


@pytest.mark.shared
def test_read_returns_a_list_for_one_process_too() -> None:
    path = shared_trace("nsys-ai/mock.sqlite")
    profiles = nsys.read(path)
    assert isinstance(profiles, list) and len(profiles) == 1
    profile = profiles[0]
    assert profile.meta.rank is None and (profile.events["rank"] == -1).all()
    assert tracelab.load(path).meta.rank == 0
    assert tracelab.load(path, rank=4).events["rank"].unique().tolist() == [4]


@pytest.mark.slow
@pytest.mark.shared
def test_meta() -> None:
    mock = nsys.read(shared_trace("nsys-ai/mock.sqlite"))[0].meta
    gpu = mock.devices[0]
    assert gpu["name"] == "NVIDIA GeForce RTX 3080" and gpu["num_sms"] == 68 and gpu["arch"] == "86"
    assert gpu["memory_bandwidth_gb_s"] == pytest.approx(760.08)
    assert mock.profiler_version == "2026.1.1.204" and mock.pid == 91186
    h100 = nsys.read(shared_trace("nsys-ai/h100_2gpu_1s.sqlite"))[0].meta
    assert h100.profiler_version == "2026.2.1.210"
    # the first event falls inside the capture: after the session start, before the export
    utc_start, = _sql(shared_trace("nsys-ai/h100_2gpu_1s.sqlite"),
                      "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0]
    assert utc_start < h100.trace_start_epoch_ns < utc_start + 295_659 * 10**6


@pytest.mark.slow
@pytest.mark.shared
def test_memcpy_names() -> None:
    profile = nsys.read(shared_trace("nsys-ai/h100_2gpu_1s.sqlite"))[0]
    events = classify.classified(profile.events)
    copies = events[events["kind"] == "memcpy"]
    assert set(copies["kernel"].astype(str)) == {"Memcpy HtoD", "Memcpy DtoH", "Memcpy DtoD"}
    assert (copies["op_class"] == "memory").all() and copies["bytes"].notna().all()


@pytest.mark.parametrize("path", slow_beyond(FILES, {PUBLIC[3], DATA / "overlap-2gpu-nsys/rank0.sqlite"}), ids=_name,
                         indirect=True)  # a second read, uncached: the default run on a public file and one of ours
def test_input_unchanged(path: Path) -> None:
    before = _sha(path)
    nsys.read(path)
    assert _sha(path) == before


def _sqlite_without_cupti(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE foo (x INTEGER)")
    con.commit()
    con.close()


def _cupti_without_rows(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER)")
    con.commit()
    con.close()


BROKEN = {
    "empty": (lambda p: p.write_bytes(b""), "empty file"),
    "no CUPTI tables": (_sqlite_without_cupti, "without CUPTI_ACTIVITY_KIND_"),
    "random bytes": (lambda p: p.write_bytes(bytes(range(256)) * 20), "file is not a database"),
    "truncated": (lambda p: p.write_bytes((DATA / "decode-1gpu-nsys" / "rank0.sqlite").read_bytes()[:4096]),
                  "malformed"),
    "no GPU activity": (_cupti_without_rows, "without GPU activity"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_input(tmp_path: Path, case: str) -> None:
    path = tmp_path / "broken.sqlite"
    make, reason = BROKEN[case]
    make(path)
    before = _sha(path)
    with pytest.raises(TraceFormatError) as err:
        nsys.read(path)
    assert err.value.where == str(path) and reason in err.value.reason
    assert _sha(path) == before


@pytest.mark.parametrize("value, fallback, kind", [("CAST('k' AS BLOB)", None, "blob"), ("''", "X'6b'", "blob")])
def test_a_kernel_name_that_is_no_text_names_its_row(tmp_path: Path, value: str, fallback: str | None,
                                                     kind: str) -> None:
    """Names are looked up once per distinct id, not joined per row: a demangled name that is
    no text (a blob), or empty with a short name that is no text, still names the row and what
    SQLite holds there; the same ids on a good file give each kernel its name."""
    path = tmp_path / "rank0.sqlite"
    path.write_bytes((DATA / "decode-1gpu-nsys" / "rank0.sqlite").read_bytes())
    con = sqlite3.connect(path)
    with con:
        row, short = con.execute("SELECT rowid, shortName FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid "
                                 "LIMIT 1 OFFSET 2").fetchone()
        con.execute(f"INSERT INTO StringIds (id, value) VALUES (987654321, {value})")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 987654321 WHERE rowid = ?", (row,))
        if fallback is not None:
            con.execute(f"UPDATE StringIds SET value = {fallback} WHERE id = ?", (short,))
    con.close()
    with pytest.raises(TraceFormatError) as err:
        nsys.read(path)
    assert f"CUPTI_ACTIVITY_KIND_KERNEL row {row}: name: demangledName 987654321" in err.value.reason
    assert err.value.reason.endswith(f"no text in StringIds ({kind})")


def test_first_match_equals_a_dict_of_first_occurrences() -> None:
    """The launch lookup (sort and binary search per process) against a plain walk: repeated
    (pid, correlation id) pairs give the first, ids repeat across processes, negative values
    (an int64 minimum in globalTid is real data) and misses give -1."""
    import numpy as np

    rng = np.random.default_rng(7)
    pid = rng.choice(np.array([-(1 << 63), 0, 5 << 24, 9 << 24]), 5000)
    corr = rng.integers(-20, 400, 5000)
    want_pid = rng.choice(np.array([-(1 << 63), 0, 5 << 24, 9 << 24, 11 << 24]), 3000)
    want_corr = rng.integers(-25, 420, 3000)
    first: dict[tuple[int, int], int] = {}
    for i, key in enumerate(zip(pid.tolist(), corr.tolist())):
        first.setdefault(key, i)
    got = nsys._first_match(pid, corr, want_pid, want_corr)
    assert got.tolist() == [first.get(k, -1) for k in zip(want_pid.tolist(), want_corr.tolist())]
    assert (got == -1).any() and (got >= 0).any()
    assert nsys._first_match(pid[:0], corr[:0], want_pid, want_corr).tolist() == [-1] * 3000
    assert nsys._first_match(pid, corr, want_pid[:0], want_corr[:0]).tolist() == []
