"""The `step` column and cross-thread scopes, against independent readings: a plain walk
of the Kineto JSON and SQL straight on the nsys export, on real traces (ours in
tests/data, public ones in ../shared/traces)."""
from __future__ import annotations

import sqlite3
from collections import Counter, defaultdict
from pathlib import Path

import pandas as pd
import pytest
from helpers import kineto_steps, on_shared, per_step, shared_trace

from tracelab.core.options import Options
from tracelab.core.errors import UsageError
from tracelab.parsers import chrome, hatchet, nsys
from tracelab.parsers._steps import assign, compile_pattern, step_of_scope

DATA = Path(__file__).resolve().parent / "data"


def _need(path: Path | str) -> Path:
    """Ours by path; a public trace by its path under shared/traces (helpers.shared_trace)."""
    return shared_trace(path) if isinstance(path, str) else path


KINETO = [
    on_shared("hta/nccl_parser_config/nccl_data.json.gz", None, r"ProfilerStep#(\d+)"),
    ("hta/trace_filter/sampled_rank-0.json.gz", None, r"ProfilerStep#(\d+)"),
    (DATA / "decode-2gpu-torch/rank0.pt.trace.json.gz", "decode_one_token", "decode_one_token"),
    (DATA / "decode-2gpu-torch/rank1.pt.trace.json.gz", "decode_one_token", "decode_one_token"),
]


@pytest.mark.parametrize("path, pattern, plain", KINETO, ids=lambda v: getattr(v, "name", v))
def test_kineto_steps_equal_a_plain_walk(path: Path, pattern: str | None, plain: str) -> None:
    path = _need(path)
    want = kineto_steps(path, plain)
    assert want and len(want) >= 2
    assert per_step(chrome.read(path, Options(step_pattern=pattern)).events) == want


def _sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def _nsys_steps(path: Path, like: str) -> dict[int, tuple[int, int]]:
    """step -> (kernels, summed ns) by SQL: the kernel's launch (RUNTIME, same correlation id
    and process), inside an NVTX range named `like` of the same process; ranges numbered
    in start order per process."""
    rows = _sql(path, f"""
        WITH r AS (SELECT n.globalTid & ~16777215 AS gpid, n.start, n.end,
                          ROW_NUMBER() OVER (PARTITION BY n.globalTid & ~16777215 ORDER BY n.start) - 1 AS step
                   FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                   WHERE n.eventType IN (59, 60) AND COALESCE(n.text, s.value) = '{like}')
        SELECT r.step, count(*), sum(k.end - k.start)
        FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME c ON c.correlationId = k.correlationId
             AND (c.globalTid & ~16777215) = k.globalPid
        JOIN r ON r.gpid = k.globalPid AND c.start >= r.start AND c.start < r.end
        GROUP BY r.step""")
    return {s: (n, t) for s, n, t in rows}


@pytest.mark.parametrize("rank", [0, 1])
def test_nsys_steps_equal_sql(rank: int) -> None:
    path = DATA / f"decode-2gpu-nsys/rank{rank}.sqlite"
    (profile,) = nsys.read(path, Options(step_pattern="decode_one_token"))
    kernels = profile.events[profile.events["kind"] == "kernel"]
    want = _nsys_steps(path, "decode_one_token")
    assert len(want) == 5
    assert per_step(kernels) == want


@pytest.mark.shared
def test_default_pattern_numbers_steps_and_leaves_them_out_of_scopes() -> None:
    df = chrome.read(_need("hta/nccl_parser_config/nccl_data.json.gz")).events
    assert set(df["step"].dropna().astype(int)) == {4, 5, 6}
    assert not df["scope"].str.contains("ProfilerStep").any()


def test_no_step_ranges_gives_na_everywhere() -> None:
    for df in (chrome.read(DATA / "train-2gpu-torch/rank0.pt.trace.json.gz").events,
               nsys.read(DATA / "train-2gpu-nsys/rank0.sqlite")[0].events,
               hatchet.read(DATA / "train-2gpu-proton/rank0.hatchet").events):
        assert str(df["step"].dtype) == "Int64" and df["step"].isna().all()


@pytest.mark.parametrize("name, step", [
    ("ProfilerStep#12", 12), ("step 3", 3), ("step3", 3), ("Step_7", 7), ("iteration 2", 2),
    ("token 5", 5), ("forward", None), ("steps", None), ("stepper 3", None), ("step 3 extra", None),
])
def test_default_pattern(name: str, step: int | None) -> None:
    assert step_of_scope((name, "forward"), compile_pattern(None)) == (step, ("forward",) if step is not None
                                                                        else (name, "forward"))


def test_bad_pattern_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--step"):
        compile_pattern("step(")


def test_assign_picks_the_innermost_holding_range_else_the_enclosing_one() -> None:
    # ranges of one process: step 1 = [0, 100), a nested step 7 = [10, 20), step 2 = [100, 150)
    ranges = {"group": [5, 5, 5], "start_ns": [0, 10, 100], "end_ns": [100, 20, 150], "step": [1, 7, 2]}
    ranges = {k: pd.Series(v).to_numpy() for k, v in ranges.items()}
    at = pd.Series([0, 15, 20, 99, 100, 150, 15]).to_numpy()
    group = pd.Series([5, 5, 5, 5, 5, 5, 6]).to_numpy()
    got = assign(group, at, ranges)
    assert got.tolist() == [1, 7, 1, 1, 2, pd.NA, pd.NA]


def _nsys_scope_by_hand(path: Path) -> Counter:
    """(kernel start, scope) by SQL and a plain loop: NVTX ranges holding the launch on the
    launching thread, nested in the ranges of the process's main thread (most range time)
    when launched from another thread."""
    ranges = defaultdict(list)
    for tid, start, end, text in _sql(path, """
            SELECT n.globalTid, n.start, n.end, COALESCE(n.text, s.value) FROM NVTX_EVENTS n
            LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType IN (59, 60) AND n.end > n.start"""):
        ranges[tid].append((start, end, text))
    total = Counter({tid: sum(e - s for s, e, _ in r) for tid, r in ranges.items()})
    main = {}
    for tid, t in total.items():
        pid = tid & ~0xFFFFFF
        if pid not in main or t > total[main[pid]]:
            main[pid] = tid

    def holding(tid: int, at: int) -> list[str]:
        return [t for s, e, t in sorted(ranges.get(tid, []), key=lambda r: (r[0], -r[1])) if s <= at < e]

    out = Counter()
    for start, tid, at in _sql(path, """
            SELECT k.start, c.globalTid, c.start FROM CUPTI_ACTIVITY_KIND_KERNEL k
            JOIN CUPTI_ACTIVITY_KIND_RUNTIME c ON c.correlationId = k.correlationId
                 AND (c.globalTid & ~16777215) = k.globalPid"""):
        outer = holding(main.get(tid & ~0xFFFFFF, tid), at) if main.get(tid & ~0xFFFFFF, tid) != tid else []
        out[(start, "/".join(outer + holding(tid, at)))] += 1
    return out


@pytest.mark.parametrize("path", [DATA / "train-2gpu-nsys/rank0.sqlite", DATA / "train-2gpu-nsys/rank1.sqlite"],
                         ids=lambda p: p.parent.name + "/" + p.name)
def test_nsys_kernels_of_the_autograd_thread_nest_in_the_main_threads_ranges(path: Path) -> None:
    (profile,) = nsys.read(path)
    k = profile.events[profile.events["kind"] == "kernel"]
    first = _sql(path, "SELECT min(start) FROM (SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
                       "SELECT start FROM CUPTI_ACTIVITY_KIND_MEMCPY)")[0][0]
    got = Counter(zip((k["start_ns"] + first).tolist(), k["scope"]))
    want = _nsys_scope_by_hand(path)
    assert got == want
    threads = _sql(path, """SELECT count(DISTINCT c.globalTid) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                            JOIN CUPTI_ACTIVITY_KIND_RUNTIME c ON c.correlationId = k.correlationId""")[0][0]
    assert threads >= 2  # the autograd thread launches the backward kernels
    assert (k["scope"] == "").sum() == 0
    assert k["scope"].str.startswith("backward").sum() > 100


@pytest.mark.slow
def test_two_step_patterns_in_one_process_do_not_interfere(tmp_path, monkeypatch) -> None:
    """Options travel as values (tracelab/options.py): one trace loaded with two patterns, one
    after the other, through the Parquet cache and through worker processes, numbers its steps
    twice differently; each as the parser reads it with that pattern, and the cache keys on it."""
    import tracelab
    from tracelab.ingest import cache

    path = DATA / "decode-2gpu-torch" / "rank0.pt.trace.json.gz"
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    named, plain = Options(step_pattern="decode_one_token"), Options()
    want = {o: per_step(chrome.read(path, o).events) for o in (named, plain)}
    assert len(want[named]) == 5 and want[plain] != want[named]
    for _ in range(2):  # the second time from the cache
        for o in (named, plain):
            assert per_step(tracelab.load(path, options=o).events) == want[o]
    assert cache.key(path, chrome.__file__, named) != cache.key(path, chrome.__file__, plain)
    in_workers = {o: tracelab.load_many([path, DATA / "decode-2gpu-torch" / "rank1.pt.trace.json.gz"], workers=2,
                                        options=o)[0] for o in (named, plain)}
    assert {o: per_step(p.events) for o, p in in_workers.items()} == want
