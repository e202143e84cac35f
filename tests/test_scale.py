"""Many ranks (issue 13): exact integer timestamps without Decimal per event, the cache
threshold on inflated size, a cheap `import tracelab`, per-rank summaries computed where
the rank is parsed, and the same through a Dask cluster. Truths are computed another way:
Decimal walks of the raw JSON, N x one rank's figures."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from tracelab.parsers import chrome
from tracelab.reports import ranks as session
from tracelab.core.schema import OnEvents
from helpers import run_cli_output, slow_after

DATA = Path(__file__).parent / "data"
RANK_TRACE = DATA / "decode-2gpu-torch" / "rank0.pt.trace.json.gz"


def _trace(ts_texts: list[str], base_ns: int | None = None) -> str:
    """A Kineto trace of kernels whose ts are written exactly as given."""
    events = ",".join(f'{{"ph":"X","cat":"kernel","name":"k{i}","pid":0,"tid":7,"ts":{t},"dur":1.5,'
                      f'"args":{{"device":0,"stream":7,"correlation":{i}}}}}' for i, t in enumerate(ts_texts))
    base = f'"baseTimeNanoseconds":{base_ns},' if base_ns is not None else ""
    return f'{{{base}"distributedInfo":{{"rank":0,"world_size":1}},"traceEvents":[{events}]}}'


def _decimal_ns(ts_texts: list[str]) -> list[int]:
    ns = [int((Decimal(t) * 1000).to_integral_value()) for t in ts_texts]
    return [n - min(ns) for n in ns]


TS_CASES = {
    "relative, 3 decimals": ["10.001", "2500000.999", "0.5", "7199999999.123"],
    "epoch microseconds (old traces)": ["1712345678901234.567", "1712345678901235.001", "1712345678901234.999"],
    "more than 3 decimals": ["1.0004", "1.0006", "2.12345"],
    "integers": ["5", "4000000000000001", "4000000000000003"],
    "exponent": ["1.5e3", "2E2", "1e-3"],
}


@pytest.mark.parametrize("case", TS_CASES)
def test_start_ns_exact_as_a_decimal_walk_of_the_json(tmp_path, case):
    texts = TS_CASES[case]
    path = tmp_path / "rank0.json"
    path.write_text(_trace(texts, base_ns=1_700_000_000_000_000_000))
    got = chrome.read(path).events.sort_values("name", key=lambda s: s.str[1:].astype(int))["start_ns"]
    assert got.astype("int64").tolist() == _decimal_ns(texts)


def test_start_ns_of_a_real_trace_equal_a_decimal_walk():
    doc = json.loads(gzip.decompress(RANK_TRACE.read_bytes()), parse_float=Decimal)
    gpu = [e for e in doc["traceEvents"] if e.get("cat") in chrome.GPU_KINDS]
    ns = sorted(int((Decimal(e["ts"]) * 1000).to_integral_value()) for e in gpu)
    got = sorted(chrome.read(RANK_TRACE).events["start_ns"].astype("int64").tolist())
    assert got == [n - ns[0] for n in ns] and len(got) > 100


def test_a_ts_that_is_no_number_still_names_the_event(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text(_trace(["1.0", '"soon"']))
    with pytest.raises(Exception, match=r"traceEvents\[1\].*ts"):
        chrome.read(path)


@pytest.mark.slow
def test_import_tracelab_and_the_cli_leave_pandas_unimported():
    code = ("import sys, tracelab, tracelab.cli, tracelab.cli.terminal; print(sorted(m for m in ('pandas', 'numpy') "
            "if m in sys.modules)); print(tracelab.load.__module__, tracelab.COLUMNS['rank'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == ["[]", "tracelab.ingest.loading int32"]


def test_the_cli_still_turns_a_schema_error_into_one_line():
    from tracelab.core.schema import SchemaError
    from tracelab.cli.terminal import error_line

    assert error_line(SchemaError("missing columns ['rank']")) == "tracelab: error: missing columns ['rank']"
    assert error_line(ValueError("a bug")) is None


def test_the_cache_threshold_applies_to_a_gzip_files_inflated_size(tmp_path, monkeypatch):
    from tracelab.ingest import cache

    inflated = len(gzip.decompress(RANK_TRACE.read_bytes()))
    compressed = RANK_TRACE.stat().st_size
    assert compressed < inflated // 4
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TRACELAB_CACHE", raising=False)
    plain = tmp_path / "rank0.json"
    plain.write_bytes(gzip.decompress(RANK_TRACE.read_bytes()))
    for limit, cached in [(inflated, True), (inflated + 1, False), (compressed + 1, True)]:
        monkeypatch.setattr(cache, "MIN_BYTES", limit)
        assert (cache.key(RANK_TRACE, chrome.__file__) is not None) == cached, limit
        assert (cache.key(plain, chrome.__file__) is not None) == cached, limit


@pytest.mark.slow
def test_tracelab_load_stays_the_function_once_its_module_is_imported():
    code = ("import tracelab, tracelab.ingest.loading, tracelab.cli; from tracelab.ingest.loading import expand; "
            "print(callable(tracelab.load), tracelab.load is tracelab.ingest.loading.load)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "True True\n"


@pytest.mark.slow
def test_per_rank_summaries_computed_in_the_workers_equal_the_parents():
    import tracelab
    from tracelab.reports.align import align as compare
    from tracelab.reports.timeline import intervals as timeline

    folder = DATA / "train-2gpu-torch"
    profiles = tracelab.load_many(folder, workers=2, reduce=session.RANK_DIGESTS)
    for p in profiles:
        assert p.summary["timeline"].equals(timeline.rank_timeline(p.events).drop(columns="rank"))
    bare = tracelab.load_many(folder, workers=2)
    assert all(not p.summary for p in bare)
    labelled = [session.label([folder], [True], [ps]) for ps in (profiles, bare)]
    with_summaries, without = (compare._timelines(inputs) for inputs in labelled)
    assert with_summaries.equals(without) and len(with_summaries) == 2


def _same(a, b) -> None:
    assert [p.rank for p in a] == [p.rank for p in b]
    for x, y in zip(a, b):
        assert x.events.equals(y.events)
        assert x.summary["timeline"].equals(y.summary["timeline"])


def _breakdown_csv(folder: Path, *options: str) -> str:
    from typer.testing import CliRunner

    from tracelab.cli import app

    result = CliRunner().invoke(app, ["breakdown", str(folder), "--format", "csv", "--top", "0", *options])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.slow
@pytest.mark.dist
def test_a_dask_cluster_gives_what_local_processes_give(monkeypatch):
    pytest.importorskip("distributed")
    import tracelab
    from distributed import LocalCluster

    from tracelab.core import classify
    from tracelab.core.options import Options
    from tracelab.reports.ranks import RANK_DIGESTS

    folder = DATA / "train-2gpu-torch"
    monkeypatch.setenv("TRACELAB_CACHE", "0")
    classify.add_pattern("^ncclDevKernel", "other")  # the caller's patterns reach the cluster's workers
    try:
        local = tracelab.load_many(folder, workers=2, reduce=RANK_DIGESTS)
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            on = Options.from_environment(scheduler=cluster.scheduler_address)
            on_cluster = tracelab.load_many(folder, reduce=RANK_DIGESTS, options=on)
            by_url = tracelab.load_many(folder.resolve().as_uri(), reduce=RANK_DIGESTS, options=on)  # fsspec file:// URL
            cli = [_breakdown_csv(folder), _breakdown_csv(folder, "--scheduler", cluster.scheduler_address)]
    finally:
        classify.reset_patterns()
    assert cli[0] == cli[1] and cli[0].count("\n") > 10
    _same(local, on_cluster)
    _same(local, by_url)
    assert by_url[0].meta.path.startswith("file://")
    nccl = local[0].events["kernel"].astype(str).str.startswith("ncclDevKernel")
    assert nccl.any() and (local[0].events.loc[nccl, "op_class"] == "other").all()


@pytest.mark.slow
@pytest.mark.dist
def test_an_unreachable_scheduler_is_one_usage_error(monkeypatch):
    pytest.importorskip("distributed")
    import tracelab
    from tracelab.core import options
    from tracelab.core.errors import UsageError

    with pytest.raises(UsageError, match="cannot reach the Dask scheduler"):
        tracelab.load_many(DATA / "train-2gpu-torch", options=options.Options(scheduler="tcp://127.0.0.1:9"))
    monkeypatch.setenv(options.SCHEDULER_ENV, "tcp://127.0.0.1:9")  # the CLI's default, read once there
    assert options.Options.from_environment().scheduler == "tcp://127.0.0.1:9"


@pytest.mark.parametrize("case", TS_CASES)
def test_start_ns_exact_when_chunks_differ(tmp_path, monkeypatch, case):
    """Chunks of 2 events: an earlier chunk read fast, a later one through Decimal, or the other way."""
    monkeypatch.setattr("tracelab.parsers._kineto_json.CHUNK_EVENTS", 2)
    texts = ["1", "2.5"] + TS_CASES[case] + ["3"]
    path = tmp_path / "rank0.json"
    path.write_text(_trace(texts))
    got = chrome.read(path).events.sort_values("name", key=lambda s: s.str[1:].astype(int))["start_ns"]
    assert got.astype("int64").tolist() == _decimal_ns(texts)


@pytest.mark.slow
def test_the_report_analyses_who_waits_once_per_run_and_shows_the_same(monkeypatch):
    import tracelab
    from tracelab.reports.align import align as compare
    from tracelab.reports.html import html
    from tracelab.reports.steps import steps_html
    from tracelab.reports.timeline import waits

    folder = DATA / "gloo-2cpu-late"
    inputs = session.label([folder], [True], [tracelab.load_many(folder, workers=1)])
    calls = []
    real = waits.analyse_digests
    monkeypatch.setattr(waits, "analyse_digests", lambda *a: calls.append(1) or real(*a))
    c = compare.comparison(inputs, by="kernel")
    assert len(calls) == 1 and set(c.waits) == {""}

    def render(analysed):
        figs: dict = {}
        return steps_html.sections(inputs, lambda fig, note: html._figure(figs, fig, note), html.table, analysed), figs

    reused, again = render(c.waits), render(None)
    assert len(calls) == 2  # only the call without the comparison's Waits analysed again
    assert reused == again and "straggler: rank 1" in "".join(reused[0])


@pytest.mark.slow
def test_collective_skew_from_the_workers_comm_rows_equals_the_whole_frames():
    import pandas as pd

    import tracelab
    from tracelab.reports.align import align as compare
    from tracelab.reports.timeline import intervals as timeline

    folder = DATA / "train-2gpu-torch"
    with_rows = tracelab.load_many(folder, workers=2, reduce=session.RANK_DIGESTS)
    bare = tracelab.load_many(folder, workers=1)  # the whole frames, parsed here: no pool to pickle them back
    inputs = session.label([folder], [True], [with_rows])
    offsets = timeline.clock_offsets([p.meta.to_dict() for p in bare])
    whole = timeline.skew_summary(timeline.collective_skew(pd.concat([p.events for p in bare], ignore_index=True),
                                                           offsets))
    got = compare._skews(inputs)
    assert len(whole) > 0 and got.drop(columns=["group", "clock"]).equals(whole)
    assert compare._skews(session.label([folder], [True], [bare])).equals(got)
    assert all(len(p.summary["comm_kernels"]) < len(p.events) / 3 for p in with_rows)


_STACKED_FOLDERS = ["train-2gpu-torch", "decode-2gpu-nsys", "decode-2gpu-proton", "gloo-2cpu-late"]
_STACKED_BY = [("kernel", 5), ("op_class", None), ("scope", 3), ("step", None)]


@slow_after(1)
@pytest.mark.parametrize("folder,by,top", [  # each folder and each --by once in the default run, every pair in the slow one
    pytest.param(folder, by, top, marks=() if i == j else pytest.mark.slow)
    for i, folder in enumerate(_STACKED_FOLDERS) for j, (by, top) in enumerate(_STACKED_BY)])
def test_breakdown_stacked_from_the_workers_equals_the_whole_frames(folder, by, top):
    import tracelab
    from tracelab.reports.breakdown import breakdown as B

    path = DATA / folder
    reduced = tracelab.load_many(path, workers=2, reduce=B.per_rank(by), keep_events=False)
    assert all(len(p.events) == 0 for p in reduced)
    whole = tracelab.events(tracelab.load_many(path, workers=1))
    assert B.top_rows(B.stacked(reduced, "breakdown"), by, top).equals(B.breakdown(whole, by=by, top=top))
    assert B.stacked(reduced, "summary").equals(B.summary(whole))


@pytest.mark.slow
def test_n_ranks_made_from_one_give_n_times_its_breakdown(tmp_path):
    """benchmarks/make_ranks.py copies a real rank to N ranks (distributedInfo rewritten); the
    stacked per-rank breakdown of the N is one rank's, N times, each under its own rank."""
    import importlib.util

    import tracelab
    from tracelab.reports.breakdown import breakdown as B

    spec = importlib.util.spec_from_file_location("make_ranks", Path(__file__).parents[1] / "benchmarks/make_ranks.py")
    make_ranks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_ranks)
    files = make_ranks.make(tmp_path, 6, [RANK_TRACE])
    doc = json.loads(gzip.decompress(files[5].read_bytes()))
    assert doc["distributedInfo"]["rank"] == 5 and doc["distributedInfo"]["world_size"] == 6
    reduced = tracelab.load_many(tmp_path, workers=2, reduce=B.per_rank("kernel"), keep_events=False)
    one = B.breakdown(chrome.read(RANK_TRACE).events.pipe(_classified), by="kernel")
    table = B.stacked(reduced, "breakdown")
    assert sorted(table["rank"].unique()) == list(range(6))
    for r, g in table.groupby("rank"):
        assert g.drop(columns="rank").reset_index(drop=True).equals(one.drop(columns="rank"))
    assert table["total_ns"].sum() == 6 * one["total_ns"].sum() > 0


def _classified(events):
    from tracelab.core import classify

    return classify.classified(events)


@slow_after(1)
@pytest.mark.parametrize("folder", ["gloo-2cpu-late", "ddp-2gpu-late-nsys",  # Kineto's CPU ranks, nsys's GPU ranks
                                    *(pytest.param(f, marks=pytest.mark.slow)  # a worker pool each: the rule, again
                                      for f in ("train-2gpu-torch", "decode-2gpu-nsys", "tp-2gpu-late-torch"))])
def test_who_waits_from_the_workers_digests_equals_on_whole_frames(folder):
    """The report's path: each rank digested in the worker that parsed it, its events dropped
    there (load_many keep_events=False); only the digests meet. Same answer as the whole frames."""
    import tracelab
    from tracelab.reports.timeline import waits

    lean = tracelab.load_many(DATA / folder, workers=2, reduce={"waits": OnEvents(waits.rank_digest)}, keep_events=False)
    assert all(p.events.empty for p in lean)
    members = session.label([DATA / folder], [True], [lean])
    epochs = {i.rank: i.epoch_ns for i in members}
    slim = waits.run_waits(members)
    whole = waits.analyse(tracelab.events(tracelab.load_many(DATA / folder, workers=1)), epochs)
    assert slim.line == whole.line and slim.verdict == whole.verdict and slim.clock == whole.clock
    for name in ("collectives", "steps", "gating", "waits", "causes"):
        assert getattr(slim, name).equals(getattr(whole, name)), name
    assert len(slim.collectives) > 0


def test_the_steps_section_of_many_ranks_shows_the_waits_spread_not_a_column_per_rank():
    """20 ranks (gloo-2cpu-late's rank 1 copied as ranks 1-19): the who-waits table has the
    median and largest wait and who waited most, not 20 wait columns; a page that stays
    bounded at a thousand ranks."""
    import re

    import tracelab
    from tracelab.reports.html import html
    from tracelab.reports.steps import steps_html
    from tracelab.core.schema import Profile

    zero, one = tracelab.load_many(DATA / "gloo-2cpu-late", workers=1)
    copies = [zero] + [Profile(one.events.assign(rank=r), one.meta.but(rank=r)) for r in range(1, 20)]
    inputs = session.label([DATA / "gloo-2cpu-late"], [True], [copies])
    figs: dict = {}
    page = "".join(steps_html.sections(inputs, lambda fig, note: html._figure(figs, fig, note), html.table))
    assert "median wait (ms)" in page and "waited most" in page and "rank 0" in page
    assert not re.search(r"wait r\d+ \(ms\)", page)
    two = "".join(steps_html.sections(inputs[:2], lambda fig, note: html._figure({}, fig, note), html.table))
    assert "wait r0 (ms)" in two and "wait r1 (ms)" in two and "median wait" not in two


def test_tracelab_steps_on_many_ranks_prints_spreads_and_a_bounded_clock_line(tmp_path):
    """The terminal table of 20 ranks: one row per step with median and most (and its rank),
    the same numbers as the step table; the clock line names 8 offsets and the range."""
    import numpy as np

    import tracelab
    from tracelab.reports.steps import steps_text
    from tracelab.reports.timeline import waits
    from tracelab.core.schema import Profile

    zero, one = tracelab.load_many(DATA / "gloo-2cpu-late", workers=1)
    events = tracelab.events([zero] + [Profile(one.events.assign(rank=np.int32(r)), one.meta.but(rank=r))
                                       for r in range(1, 20)])
    w = waits.analyse(events, {r: None for r in range(20)})
    from rich.console import Console

    with open(tmp_path / "out.txt", "w") as out:
        console = Console(width=250, record=True, file=out)
        console.print(steps_text.steps_tables(w))
    text = console.export_text()
    assert "per step over ranks" in text and "wait r5" not in text
    first = w.steps[w.steps["step"] == w.steps["step"].min()]
    top = first.loc[first["span_ns"].idxmax()]
    assert f"{top['span_ns'] / 1e6:,.3f} (rank {int(top['rank'])})" in text
    clock = steps_text.clock_line(w.clock)
    assert clock.count("rank ") == steps_text.OFFSETS_SHOWN and "12 more ranks" in clock


@pytest.mark.parametrize("folders", [["ddp-2gpu-late-torch"], pytest.param(["gloo-2cpu-late"], marks=pytest.mark.slow),
                                     pytest.param(["train-2gpu-proton", "train-2gpu-torch", "train-2gpu-nsys"],
                                                  marks=pytest.mark.slow),
                                     pytest.param(["overlap-2gpu-nsys"], marks=pytest.mark.slow)])
@pytest.mark.slow
def test_the_report_from_the_workers_summaries_equals_the_report_from_events(tmp_path, folders):
    """The report's path at scale: every rank reduced in its worker (events dropped there),
    the timeline's few shown ranks binned by reading them again. The page is the one made
    from every rank's events, byte for byte; compare's JSON too."""
    from tracelab.cli.html_report import write_report
    from tracelab.reports.align.align import comparison
    from tracelab.reports.compare.compare_text import COMPARE_RENDERERS
    from tracelab.ingest.session import Session

    def as_json(session):
        c = comparison(session.inputs, "kernel")
        return COMPARE_RENDERERS["json"](c, ["kernel"], 0)

    paths = [str(DATA / f) for f in folders]
    lean_session, full_session = Session.open(paths), Session.open(paths, keep_events=True)
    # each session opened once: the comparison first, the lean one still without events for its report
    assert as_json(lean_session) == as_json(full_session)
    assert all(p.events.empty for p in lean_session.profiles) and all(i.events.empty for i in lean_session.inputs)
    full = write_report(full_session, tmp_path / "full.html", title="t")
    lean = write_report(lean_session, tmp_path / "lean.html", title="t")
    assert lean.read_bytes() == full.read_bytes()
    assert ('<h2 id="timeline">Timeline</h2>' in full.read_text()) == any(f.endswith(("torch", "nsys")) and "gloo" not in f
                                                            for f in folders)


def test_load_reads_one_file_by_url_through_fsspec():
    """tracelab.load("memory://...") (any fsspec URL): the same events as the local file, its
    path the URL, its rank from the URL's file name."""
    fsspec = pytest.importorskip("fsspec")
    import tracelab

    local = DATA / "ddp-2gpu-late-torch" / "rank1.pt.trace.json.gz"
    url = "memory://tracelab-test/run/rank1.pt.trace.json.gz"
    with fsspec.open(url, "wb") as f:
        f.write(local.read_bytes())
    try:
        by_url, by_path = tracelab.load(url), tracelab.load(local)
    finally:
        fsspec.filesystem("memory").rm("/tracelab-test", recursive=True)
    assert by_url.meta.path == url and by_url.rank == by_path.rank == 1
    assert by_url.events.equals(by_path.events)


def _die(rank):
    """A reduce that kills the process running it (a Dask worker), as running out of memory would."""
    import os

    os._exit(3)


@pytest.mark.slow
@pytest.mark.dist
def test_a_dask_worker_that_dies_is_one_line_naming_the_file(monkeypatch):
    pytest.importorskip("distributed")
    import dask
    from distributed import LocalCluster

    import tracelab
    from tracelab.core.errors import TraceFormatError
    from tracelab.core.options import Options

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            with pytest.raises(TraceFormatError, match="the Dask worker reading it died") as caught:
                tracelab.load_many(DATA / "gloo-2cpu-late", reduce={"die": _die},
                                   options=Options.from_environment(scheduler=cluster.scheduler_address))
    assert "rank0" in str(caught.value) and "\n" not in str(caught.value)


def test_nsys_in_bulk_equals_sql_on_a_tiled_export_with_nulls_and_missing_names(tmp_path):
    """benchmarks/make_nsys_big.py tiles a real export (3 copies in time); a few kernels then
    get a NULL correlationId and globalPid, one a demangled-name id StringIds lacks, one an
    empty demangled name. Per kernel name, calls and ns equal SQL over the file with the
    joins the parser no longer makes; the NULLs are rows with no launch."""
    import sqlite3
    import sys

    sys.path.insert(0, str(DATA.parents[1] / "benchmarks"))
    import make_nsys_big

    import tracelab

    src = DATA / "train-1gpu-steps-nsys" / "rank0.sqlite"
    big = tmp_path / "big.sqlite"
    n = make_nsys_big.make(src, big, 3 * 1216)
    con = sqlite3.connect(big)
    with con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = NULL, globalPid = NULL WHERE rowid <= 5")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 987654321 WHERE rowid = 7")
        empty = con.execute("INSERT INTO StringIds (id, value) VALUES (987654322, '')").lastrowid
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 987654322 WHERE rowid = 8")
    want = dict(((name, (calls, ns)) for name, calls, ns in con.execute(
        "SELECT COALESCE(NULLIF(d.value, ''), s.value), COUNT(*), SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "LEFT JOIN StringIds d ON d.id = k.demangledName LEFT JOIN StringIds s ON s.id = k.shortName "
        "WHERE k.globalPid IS NOT NULL GROUP BY 1")))
    con.close()
    assert n == 3 * 1216 and empty
    events = tracelab.load_many(big)[0].events
    kernels = events[events["kind"] == "kernel"]
    got = kernels.groupby(kernels["name"].astype(str))[["count", "dur_ns"]].sum()
    assert {k: (int(c), int(d)) for k, (c, d) in got.iterrows()} == want


@pytest.mark.slow  # over 1.2 s of CPU here: the default run stays under 90 s
def test_compare_of_many_ranks_prints_spreads_not_a_column_per_rank(tmp_path):
    """20 ranks (the late DDP capture's rank 0 nineteen times, its rank 1 as rank 7): the
    aligned table gives per row its min, median and max over the inputs, the totals and the
    timeline one row per measure with the outlier rank, the same numbers as the comparison."""
    import numpy as np
    from rich.console import Console

    import tracelab
    from tracelab.reports.align import align as compare
    from tracelab.reports.compare import compare_text as text
    from tracelab.core.schema import Profile

    zero, one = tracelab.load_many(DATA / "ddp-2gpu-late-torch", workers=1)
    copies = [Profile((one if r == 7 else zero).events.assign(rank=np.int32(r)), (one if r == 7 else zero).meta.but(
                                                                               rank=r)) for r in range(20)]
    c = compare.comparison(session.label([DATA / "ddp-2gpu-late-torch"], [True], [copies]), "kernel")
    with open(tmp_path / "out.txt", "w") as out:
        console = Console(width=250, record=True, file=out)
        console.print(text.compare_tables(c, ["kernel"], 5))
    page = console.export_text()
    assert "over 20 inputs" in page and "rank19 (ms)" not in page
    row = c.table.iloc[0]
    times = row[[f"time_ns[rank{r}]" for r in range(20)]].astype(float)
    assert f"{times.max() / 1e6:,.3f}" in page and f"{times.median() / 1e6:,.3f}" in page
    assert "rank7" in page.split("GPU time per input")[1]  # the outlier of the totals


@pytest.mark.slow
def test_breakdown_of_many_ranks_prints_spreads_not_a_table_per_rank(twenty_late_ranks, capsys, monkeypatch):
    """20 gz ranks (the late DDP capture's waiting rank nineteen times, its late rank as rank 7):
    `tracelab breakdown` prints each measure's spread over the ranks and one row per kernel with
    its least, median and most time, the numbers a pandas groupby of all the events gives."""
    import tracelab

    monkeypatch.setenv("COLUMNS", "250")
    status, out, err = run_cli_output(capsys, "breakdown", str(twenty_late_ranks), "--top", "5")
    assert status == 0, err
    assert "20 ranks" in out and "over the 20 ranks" in out and out.count("rank 19 (torch") == 0
    df = tracelab.events(tracelab.load_many(twenty_late_ranks, workers=1))
    per_rank = df[df["kind"] == "kernel"].groupby(["kernel", "rank"], observed=True)["dur_ns"].sum().unstack()
    first = per_rank.sum(axis=1).idxmax()
    times = per_rank.loc[first].dropna()
    row = next(line for line in out.splitlines() if line.rstrip().endswith(str(first)[:60]))
    assert f"{times.min() / 1e6:,.3f}" in row and f"{times.median() / 1e6:,.3f}" in row and f"{len(times):,}" in row
    kernels = df[df["kind"] == "kernel"].groupby("rank")["dur_ns"].sum()
    assert kernels.idxmax() == 7 and "rank 7" in next(line for line in out.splitlines() if "kernels (ms)" in line)


def test_the_scheduler_help_names_the_extra_to_install():
    """Rich took `[dist]` in the help for markup and printed "pip install 'tracelab'"."""
    from typer.testing import CliRunner

    from tracelab.cli import app

    result = CliRunner().invoke(app, ["breakdown", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "pip install 'tracelab[dist]'" in result.output


@pytest.mark.parametrize("folder, options", [("ddp-2gpu-late-nsys", ["--ranks", "1"]),
                                             ("tp-2gpu-late-torch", ["--ranks", "0", "--steps", "2-3"])])
@pytest.mark.slow
def test_export_perfetto_of_some_ranks_reads_only_their_events_and_writes_the_same(tmp_path, folder, options,
                                                                                   monkeypatch, capsys):
    """--ranks: every rank's summaries put the run on one clock; only the picked ranks' events
    are read (again). The file equals the one made from every rank's events."""
    import json

    from tracelab.ingest import inputs as I
    from tracelab.reports.perfetto import perfetto

    read = []
    real = I.with_events
    monkeypatch.setattr(I, "with_events", lambda inputs, ranks, *a, **k: read.append(ranks) or real(inputs, ranks, *a, **k))
    lean = tmp_path / "lean.json"
    status, _, err = run_cli_output(capsys, "export", "perfetto", str(DATA / folder), "-o", str(lean), *options)
    assert status == 0, err
    from tracelab.ingest.session import Session

    session = Session.open([str(DATA / folder)], keep_events=True)
    picks = {"ranks": perfetto.parse_ints("--ranks", options[1]),
             "steps": perfetto.parse_ints("--steps", options[3]) if len(options) > 2 else None}
    full = perfetto.trace(session.inputs, **picks)
    assert json.loads(lean.read_text()) == json.loads(json.dumps(full)) and read == [picks["ranks"]]


def test_the_timeline_of_many_ranks_draws_the_outlier_beside_the_first_ranks():
    """20 ranks, the late DDP capture's rank 1 as rank 19: the timeline draws 16 ranks, rank
    19 among them (its compute is the outlier), and says which."""
    import numpy as np

    import tracelab
    from tracelab.reports.html import figures
    from tracelab.core.schema import Profile

    zero, one = tracelab.load_many(DATA / "ddp-2gpu-late-torch", workers=1)
    copies = [Profile((one if r == 19 else zero).events.assign(rank=np.int32(r)),
                      (one if r == 19 else zero).meta.but(rank=r)) for r in range(20)]
    inputs = session.label([DATA / "ddp-2gpu-late-torch"], [True], [copies])
    (_, shown, n), = figures.timeline_shown(inputs)
    assert n == 20 and [i.rank for i in shown] == [*range(15), 19]
    (note, _), = figures.timelines(inputs)
    assert "16 of 20 ranks: 0-14, 19" in note
