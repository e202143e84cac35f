"""`tracelab export perfetto`: the merged trace of all ranks checked against the Chrome trace
event format (a checker below, with broken traces beside good ones), its event counts per
rank and kind against the raw Kineto JSON and nsys SQLite, and its clock alignment against
the traces' own epoch starts. No Perfetto trace processor runs here: the `perfetto` wheel
downloads its binary on first use, which this offline machine cannot."""
from __future__ import annotations

import gzip
import json
import sqlite3
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracelab.core.errors import UsageError
from tracelab.ingest.inputs import label_inputs
from tracelab.ingest.loading import load_many
from tracelab.reports.perfetto import perfetto
from tracelab.reports.html import slices
from tracelab.reports.ranks import Input
from tracelab.core.schema import coerce

from helpers import format_errors, run_cli_output, shared_trace, slow_after

DATA = Path(__file__).resolve().parent / "data"
KINETO_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
NSYS_TABLES = {"kernel": "CUPTI_ACTIVITY_KIND_KERNEL", "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
               "memset": "CUPTI_ACTIVITY_KIND_MEMSET"}


# ---- the Chrome trace event format, checked -------------------------------------------------


GOOD = {"traceEvents": [
    {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "rank 0"}},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "stream 7"}},
    {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
    {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 2, "dur": 3},
    {"ph": "s", "name": "c", "cat": "collective", "id": 1, "pid": 1, "tid": 1, "ts": 3},
    {"ph": "f", "name": "c", "cat": "collective", "id": 1, "bp": "e", "pid": 1, "tid": 1, "ts": 8}]}


@pytest.mark.parametrize("breakage, found", [
    (lambda ev: ev.pop(), "not one s and one f"),
    (lambda ev: ev[3].update(dur=20), "overlaps its parent"),
    (lambda ev: ev[2].pop("dur"), "X without dur"),
    (lambda ev: ev[5].update(ts=50), "binds to no slice"),
    (lambda ev: ev.pop(1), "no process or thread name"),
    (lambda ev: ev[2].update(ph="Q"), "phase 'Q'"),
    (lambda ev: ev[2].update(ts=-1), "ts=-1"),
])
def test_the_format_check_catches_broken_traces(breakage, found):
    assert format_errors(GOOD) == []
    broken = json.loads(json.dumps(GOOD))
    breakage(broken["traceEvents"])
    assert any(found in m for m in format_errors(broken)), format_errors(broken)


# ---- counts per rank and kind against the raw files -----------------------------------------


def _raw_kineto(path: Path) -> Counter:
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return Counter(KINETO_KINDS[e["cat"]] for e in events if e.get("cat") in KINETO_KINDS)


def _raw_nsys(path: Path) -> dict[int, Counter]:
    """pid -> kind -> rows, straight from the CUPTI tables."""
    out: dict[int, Counter] = defaultdict(Counter)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for kind, table in NSYS_TABLES.items():
            if table in tables:
                for pid, n in db.execute(f"SELECT (globalPid >> 24) & 16777215, count(*) FROM {table} GROUP BY 1"):
                    out[pid][kind] = n
    return out


def _export(paths: list[Path], epochs: bool = True, **pick) -> dict:
    paths = [str(p) for p in paths]
    inputs = label_inputs(paths, [load_many([p]) for p in paths])
    doc = perfetto.trace(inputs if epochs else [replace(i, epoch_ns=None) for i in inputs], **pick)
    assert format_errors(doc) == []
    return json.loads(json.dumps(doc, allow_nan=False))  # what a file holds


def _counts(doc: dict) -> dict[int, Counter]:
    """rank -> kind -> complete events (one run)."""
    rank_of = {p: int(r) for r, p in doc["otherData"]["tracelab"]["clocks"][0]["pids"].items()}
    out: dict[int, Counter] = defaultdict(Counter)
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] in ("kernel", "memcpy", "memset", "cpu_op"):
            out[rank_of[e["pid"]]][e["cat"]] += 1
    return out


@pytest.mark.parametrize("folder", ["decode-2gpu-torch", "train-2gpu-torch"])
def test_kineto_pair_counts_per_rank_and_kind(folder):
    doc = _export([DATA / folder])
    want = {r: _raw_kineto(DATA / folder / f"rank{r}.pt.trace.json.gz") for r in (0, 1)}
    assert _counts(doc) == want and sum(want[0].values()) > 300


@pytest.mark.parametrize("folder", ["decode-2gpu-nsys", "train-2gpu-nsys"])
def test_nsys_pair_counts_per_rank_and_kind(folder):
    doc = _export([DATA / folder])
    want = {r: sum(_raw_nsys(DATA / folder / f"rank{r}.sqlite").values(), Counter()) for r in (0, 1)}
    assert _counts(doc) == want


@pytest.mark.slow
@pytest.mark.shared
def test_two_process_nsys_file_counts_per_rank_and_kind():
    path = shared_trace("nsys-ai/h100_2gpu_1s.sqlite")
    doc = _export([path])
    raw = _raw_nsys(path)
    rank_of_pid = {p.meta.pid: p.rank for p in load_many([path])}
    assert len(raw) == 2 and _counts(doc) == {rank_of_pid[pid]: c for pid, c in raw.items()}
    assert doc["otherData"]["tracelab"]["clocks"][0]["clock"] == "trace starts on the epoch clock"


# ---- clocks ---------------------------------------------------------------------------------


def _kernel_at(doc: dict, point: dict) -> dict:
    return next(e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel" and e["pid"] == point["pid"]
                and e["tid"] == point["tid"] and e["ts"] <= point["ts"] <= e["ts"] + e["dur"])


def _epoch_offset_ns(folder: Path) -> int:
    """Rank 1's trace start less rank 0's on the epoch clock, from the raw files."""
    if folder.name.endswith("torch"):
        base = [json.loads(gzip.decompress((folder / f"rank{r}.pt.trace.json.gz").read_bytes()))["baseTimeNanoseconds"]
                for r in (0, 1)]
        first = [min(e["ts"] for e in json.loads(gzip.decompress((folder / f"rank{r}.pt.trace.json.gz").read_bytes()))
                     ["traceEvents"] if e.get("cat") in KINETO_KINDS) for r in (0, 1)]
        return round((base[1] + first[1] * 1000) - (base[0] + first[0] * 1000))
    starts = []
    for r in (0, 1):
        with sqlite3.connect(f"file:{folder / f'rank{r}.sqlite'}?mode=ro", uri=True) as db:
            epoch = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
            first = min(db.execute(f"SELECT min(start) FROM {t}").fetchone()[0] or 1 << 62
                        for t in NSYS_TABLES.values())
            starts.append(epoch + first)
    return starts[1] - starts[0]


EPOCH_BASIS = "trace starts on the epoch clock, collective ends agree"
ESTIMATED_BASIS = "estimated from the ends of 24 collectives (the traces give no common clock)"


@pytest.mark.parametrize("folder, epochs, basis", [  # each profiler and each clock once; the other pairs under -m slow
    ("decode-2gpu-torch", True, EPOCH_BASIS), ("decode-2gpu-nsys", False, ESTIMATED_BASIS),
    pytest.param("decode-2gpu-torch", False, ESTIMATED_BASIS, marks=pytest.mark.slow),
    pytest.param("decode-2gpu-nsys", True, EPOCH_BASIS, marks=pytest.mark.slow)])
def test_ranks_aligned_by_collectives_agree_with_the_epoch_clock(folder, epochs, basis):
    """The one-shot all-reduce ends on both ranks together: with the traces' epoch starts the
    ends agree, and without them the offset estimated from the ends is the one the epoch
    starts give (same host); every linked pair of all-reduces then ends within a few us."""
    doc = _export([DATA / folder], epochs=epochs)
    clock = doc["otherData"]["tracelab"]["clocks"][0]
    assert clock["clock"] == basis
    offset = clock["offsets_ns"]["1"] - clock["offsets_ns"]["0"]
    assert abs(offset - _epoch_offset_ns(DATA / folder)) < 20_000, (offset, _epoch_offset_ns(DATA / folder))
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s"}
    finishes = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f"}
    assert len(starts) == 24 == len(finishes)  # 2 all-reduces per layer x 2 layers x 6 forward passes
    gaps_us = [abs(sum(_kernel_at(doc, p[i]).get(k) for k in ("ts", "dur")) -
                   sum(_kernel_at(doc, p2[i]).get(k) for k in ("ts", "dur")))
               for i in starts for p, p2 in [(starts, finishes)]]
    assert max(gaps_us) < 5, gaps_us
    kernels = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert min(e["ts"] for e in kernels) == 0


def test_timestamps_grow_along_each_stream():
    doc = _export([DATA / "train-2gpu-torch"])
    last: dict[tuple, float] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == "kernel":
            key = (e["pid"], e["tid"])
            assert e["ts"] >= last.get(key, 0)
            last[key] = e["ts"] + e["dur"]


# ---- several runs, ranks, window, steps, proton, overlapping kernels ------------------------


@pytest.mark.slow
def test_several_runs_get_their_own_processes_and_clocks():
    doc = _export([DATA / "train-2gpu-torch", DATA / "train-2gpu-nsys", DATA / "train-2gpu-proton"])
    meta = doc["otherData"]["tracelab"]
    assert [c["run"] for c in meta["clocks"]] == ["torch", "nsys"]
    assert meta["skipped"] == ["proton/rank0: no timestamps (proton)", "proton/rank1: no timestamps (proton)"]
    names = sorted(e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name")
    assert names == ["nsys rank 0 (nsys)", "nsys rank 1 (nsys)", "torch rank 0 (torch)", "torch rank 1 (torch)"]


def test_ranks_and_window_keep_what_overlaps():
    full = _export([DATA / "decode-2gpu-torch"])
    lo_ms, hi_ms = 1.0, 2.5
    doc = _export([DATA / "decode-2gpu-torch"], ranks={1}, window_ns=(int(lo_ms * 1e6), int(hi_ms * 1e6)))
    pid1 = full["otherData"]["tracelab"]["clocks"][0]["pids"]["1"]
    want = [e for e in full["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel" and e["pid"] == pid1
            and e["ts"] < hi_ms * 1000 and e["ts"] + e["dur"] > lo_ms * 1000]
    got = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel"]
    assert 0 < len(got) == len(want) < 325
    assert {e["pid"] for e in doc["traceEvents"]} == {1} and not any(e["ph"] == "s" for e in doc["traceEvents"])


def _synthetic(rank: int, start_ns: list[int], dur_ns: list[int], **columns) -> Input:
    n = len(start_ns)
    df = coerce({"rank": rank, "source": "torch", "kind": "kernel", "name": columns.pop("name", "k"),
                 "kernel": "k", "op_class": "gemm", "device": 0, "stream": 7, "start_ns": start_ns,
                 "dur_ns": dur_ns, **{k: v for k, v in columns.items() if k != "step"}}, n_rows=n)
    if "step" in columns:
        df["step"] = pd.array(columns["step"], dtype="Int64")
    return Input(f"rank{rank}", "", rank, "torch", df, None)


def test_overlapping_kernels_of_one_stream_get_a_second_lane():
    """PDL lets a kernel start before the one before it on its stream ends."""
    doc = perfetto.trace([_synthetic(0, [0, 50, 100, 300], [100, 100, 20, 10], scope="a/b")])
    assert format_errors(doc) == []
    tracks = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert tracks == {"stream 7", "stream 7 (overlapping, lane 1)"}
    assert slices.lanes(np.array([0, 50, 100, 300]), np.array([100, 150, 120, 310])).tolist() == [0, 1, 0, 0]


def test_scopes_nest_over_their_kernels():
    doc = perfetto.trace([_synthetic(0, [0, 10, 20, 30], [5, 5, 5, 5], scope=["a/b", "a/b", "a/c", ""])])
    assert format_errors(doc) == []
    scopes = sorted((e["name"], e["ts"], e["dur"]) for e in doc["traceEvents"] if e.get("cat") == "scope")
    assert scopes == [("a", 0, 0.025), ("b", 0, 0.015), ("c", 0.02, 0.005)]


def test_steps_become_slices_and_select():
    step = [0, 0, 1, 1, 2]
    one = _synthetic(0, [0, 10, 20, 30, 40], [5, 15, 5, 5, 5], step=step)
    doc = perfetto.trace([one])
    assert format_errors(doc) == []
    slices = [(e["name"], e["ts"], e["dur"]) for e in doc["traceEvents"] if e.get("cat") == "step"]
    assert slices == [("step 0", 0, 0.02), ("step 1", 0.02, 0.015), ("step 2", 0.04, 0.005)]  # step 0 cut at 1's start
    kept = perfetto.trace([one], steps={1})
    assert sum(e.get("cat") == "kernel" for e in kept["traceEvents"]) == 2
    with pytest.raises(UsageError, match="none of"):
        perfetto.trace([one], steps={9})
    with pytest.raises(UsageError, match="mark no steps"):
        perfetto.trace([_synthetic(0, [0], [5])], steps={1})


@pytest.mark.slow
def test_real_steps_become_slices_and_select():
    """HTA's sampled ranks hold ProfilerStep#551 and #552: a step's slice spans its kernels
    and --steps 552 keeps exactly the rows of step 552."""
    folder = shared_trace("hta/trace_filter/sampled_rank-0.json.gz").parent
    profiles = load_many([folder])
    doc = _export([folder], steps={552})
    want = {p.rank: int(((p.events["step"] == 552) & p.events["kind"].isin(["kernel", "memcpy", "memset"])).sum())
            for p in profiles}
    assert {r: sum(c.values()) for r, c in _counts(doc).items()} == want and min(want.values()) > 100
    steps = [e for e in doc["traceEvents"] if e.get("cat") == "step"]
    assert sorted(e["name"] for e in steps) == ["step 552", "step 552"]
    with pytest.raises(UsageError, match="none of 0-40 is in the inputs"):
        _export([folder], steps=set(range(41)))


def test_cpu_only_trace_gets_thread_tracks():
    path = shared_trace("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    doc = _export([path])
    events = load_many([path])[0].events
    assert _counts(doc) == {34: Counter({"cpu_op": int((events["kind"] == "cpu_op").sum())})}
    tracks = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"} - {"steps"}
    assert tracks and all(t.startswith("CPU thread ") for t in tracks)


def test_proton_alone_is_refused():
    paths = [str(DATA / "decode-2gpu-proton")]
    with pytest.raises(UsageError, match="no input has timestamps"):
        perfetto.trace(label_inputs(paths, [load_many(paths)]))


@pytest.mark.parametrize("text, want", [("1:2.5", (1_000_000, 2_500_000)), (":3", (0, 3_000_000)),
                                        ("2:", (2_000_000, np.iinfo(np.int64).max))])
def test_window_parsing(text, want):
    assert perfetto.parse_window_ms(text) == want


@pytest.mark.parametrize("text", ["5", "3:1", "a:b", "-1:2"])
def test_bad_windows_are_refused(text):
    with pytest.raises(UsageError, match="--window"):
        perfetto.parse_window_ms(text)


def test_rank_lists():
    assert perfetto.parse_ints("--ranks", "0,2,4-6") == {0, 2, 4, 5, 6}
    with pytest.raises(UsageError):
        perfetto.parse_ints("--ranks", "x")


# ---- the command ----------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_writes_gzip_and_refuses_to_overwrite(tmp_path, capsys):
    """Through the CLI's entry point in this process (tests/test_cli_errors.py runs it as a process)."""
    out = tmp_path / "merged.json.gz"
    cmd = ["export", "perfetto", str(DATA / "decode-2gpu-torch"), "-o", str(out)]
    status, _, err = run_cli_output(capsys, *cmd)
    assert status == 0, err
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert format_errors(doc) == [] and _counts(doc)[1]["kernel"] == 325
    status, _, err = run_cli_output(capsys, *cmd)
    assert status == 2 and "--force" in err and err.count("\n") == 1
    status, _, err = run_cli_output(capsys, *cmd, "--force", "--window", "9")
    assert status == 2 and "--window" in err and err.count("\n") == 1


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracelab", *args], capture_output=True, text=True)


@pytest.fixture
def cached(monkeypatch) -> None:
    """The twenty ranks parsed once by the test's first read, then read from the run's caches by the
    others (as tracelab reads a large trace again): the rules here are the export's, not the parse's."""
    from tracelab.ingest import cache

    monkeypatch.setattr(cache, "MIN_BYTES", 0)


@pytest.mark.slow
def test_an_export_past_max_events_is_refused_naming_ranks_to_pick(tmp_path, capsys, cached, twenty_late_ranks):
    run = twenty_late_ranks
    rows = sum(len(p.events) for p in load_many(run))  # every row is timed here (Kineto)
    status, _, err = run_cli_output(capsys, "export", "perfetto", str(run), "-o", str(tmp_path / "all.json"),
                                    "--max-events", str(rows // 5))
    assert status == 2 and not (tmp_path / "all.json").exists()
    line = err.strip()
    assert line.count("\n") == 0 and f"about {rows:,} events from 20 ranks" in line
    fit = int((rows // 5) // (rows / 20))  # ranks of a typical size that fit: the late one (the outlier) and the first
    assert fit >= 3 and f"--ranks 0-{fit - 2},7 " in line
    status, _, err = run_cli_output(capsys, "export", "perfetto", str(run), "-o", str(tmp_path / "all.json"),
                                    "--max-events", str(rows))
    assert status == 0, err
    assert perfetto.MAX_EVENTS == 2_000_000  # the CLI's default, written there so that --help imports no pandas
    assert "default: 2000000" in _cli("export", "perfetto", "--help").stdout.replace(",", "")


@pytest.mark.slow
def test_steps_of_many_ranks_kept_in_the_workers_give_the_same_trace(tmp_path, capsys, cached, twenty_late_ranks):
    """Of more than 16 traces the export reads each rank's rows of the picked steps in its
    worker; the file equals the trace made from every rank's events, as before."""
    run = twenty_late_ranks
    status, _, err = run_cli_output(capsys, "export", "perfetto", str(run), "-o", str(tmp_path / "s.json"),
                                    "--steps", "2-3")
    assert status == 0, err
    got = json.loads((tmp_path / "s.json").read_text())
    want = json.loads(json.dumps(perfetto.trace(label_inputs([str(run)], [load_many(run)]), steps={2, 3}),
                                 separators=(",", ":"), allow_nan=False))
    assert got == want and len(got["traceEvents"]) > 200
    from functools import partial

    from tracelab.ingest.inputs import with_events
    from tracelab.ingest.session import Session

    lean = Session.open([str(run)]).inputs
    kept = with_events(lean, None, partial(perfetto.rows_of_steps, steps=frozenset({2, 3})))
    assert all(set(i.events["step"].dropna().astype(int)) == {2, 3} and i.events["step"].notna().all() for i in kept)


@pytest.mark.slow
def test_report_perfetto_of_many_ranks_reads_them_again_or_is_refused(tmp_path, monkeypatch, cached, twenty_late_ranks):
    from typer.testing import CliRunner

    from tracelab.cli import app

    run = twenty_late_ranks
    runner = CliRunner()
    done = runner.invoke(app, ["report", str(run), "-o", str(tmp_path / "r.html"), "--perfetto"])
    assert done.exit_code == 0, done.output
    merged = json.loads(gzip.decompress((tmp_path / "r.perfetto.json.gz").read_bytes()))
    want = json.loads(json.dumps(perfetto.trace(label_inputs([str(run)], [load_many(run)])),
                                 separators=(",", ":"), allow_nan=False))
    assert merged == want
    monkeypatch.setattr(perfetto, "MAX_EVENTS", 1000)
    refused = runner.invoke(app, ["report", str(run), "-o", str(tmp_path / "r2.html"), "--perfetto"])
    assert isinstance(refused.exception, UsageError)  # main() makes it one line and exit status 2
    assert "--perfetto" in str(refused.exception) and "export perfetto --ranks 7`" in str(refused.exception)
    assert not (tmp_path / "r2.html").exists()


@pytest.fixture(scope="module")
def two_runs() -> list[Input]:
    """A Kineto run and an nsys run, labelled, read once for the module (write_json and trace only read them)."""
    data = Path(__file__).parent / "data"
    paths = [str(data / "train-2gpu-torch"), str(data / "decode-2gpu-nsys")]
    return label_inputs(paths, [load_many([p]) for p in paths])


@slow_after(1)
@pytest.mark.parametrize("pick", [{}, {"ranks": {1}}, {"window_ns": (0, 20_000_000)}])
def test_the_streamed_json_is_the_trace_dict(two_runs, pick):
    """write_json hands the trace to its sink rank by rank; joined, it is trace()'s dict."""
    inputs = two_runs
    parts: list[bytes] = []
    n = perfetto.write_json(parts.append, inputs, **pick)
    doc = json.loads(b"".join(parts))
    want = json.loads(json.dumps(perfetto.trace(inputs, **pick)))
    assert doc == want and n == len(want["traceEvents"]) > 100 and len(parts) >= 4  # head, ranks, tail


def test_a_producer_that_fails_leaves_no_file(tmp_path):
    from tracelab.ingest.inputs import write

    def produce(put):
        put(b"{" * 1000)
        raise RuntimeError("stopped")

    with pytest.raises(RuntimeError):
        write(tmp_path / "t.json.gz", produce, gz=True)
    assert list(tmp_path.iterdir()) == []
    written = write(tmp_path / "t.json.gz", lambda put: [put(b'{"a":'), put(b"1}")], gz=True)
    assert json.loads(gzip.decompress(written.read_bytes())) == {"a": 1}
