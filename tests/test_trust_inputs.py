"""Trust boundaries, the input side: snapshot pickles bounded while they load, scenario values
bounded to what a step can mean, user regexes matched with a time bound, error lines that
stay short, special files in a run folder named, nsys whole-graph launches read as GPU work,
memory compared like with like. Each case recomputes its truth from the file; the table at
the end is an adversarial round on inputs: one line and exit 2, or exit 0 (with its note),
never a hang or a traceback."""
from __future__ import annotations

import faulthandler
import gzip
import json
import os
import pickle
import re
import shutil
import socket
import sqlite3
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import malformed as m
import tracelab
from tracelab.core import regexes
from tracelab.core.errors import UsageError
from tracelab.parsers import snapshot
from tracelab.reports.fmt import clipped
from tracelab.reports.memory import across
from tracelab.cli.terminal import LINE_CHARS, VALUE_CHARS, shortened

DATA = Path(__file__).resolve().parent / "data"
SMALL = DATA / "roofline-1gpu-torch"  # the smallest GPU trace with kernels
GRAPH_NSYS = DATA / "graph-1gpu-nsys" / "rank0.sqlite"
HANG_S = 60  # a case still running after this is a hang: the process is stopped with its stacks


@pytest.fixture(autouse=True)
def _no_hang():
    faulthandler.dump_traceback_later(HANG_S, exit=True)  # a watchdog thread: no signal of ours disturbed
    yield
    faulthandler.cancel_dump_traceback_later()


# ---- snapshot pickles: bounded while unpickling, shared frames walked once --------------------------

def _dicts_bomb(n: int) -> bytes:
    """A list of n empty dicts: one byte each in the file, 64 in memory."""
    return b"\x80\x02](" + b"}" * n + b"e."


@pytest.mark.slow
def test_a_dict_bomb_is_refused_while_unpickling(tmp_path, capsys):
    path = tmp_path / "rank0.memory.pickle"
    path.write_bytes(_dicts_bomb(3_000_000))
    status, err = m.run_cli(capsys, "memory", str(path))
    assert status == 2 and len(err) == 1 and "pickle bomb" in err[0], err
    built = int(re.search(r"([\d,]+) dicts", err[0]).group(1).replace(",", ""))
    read = int(re.search(r"first ([\d,]+) bytes", err[0]).group(1).replace(",", ""))
    assert read < 3_000_000 // 10 and built > read / snapshot.MIN_BYTES_PER_CONTAINER  # stopped early, as said


@pytest.mark.slow
def test_a_real_sized_snapshot_is_not_a_bomb(tmp_path):
    """Frames of their own per action (no memo sharing), the densest honest layout: read."""
    actions = [{"action": "alloc", "addr": 512 * i, "size": 512, "time_us": i,
                "frames": [{"filename": f"/w/m{i}.py", "line": i, "name": "f"}]} for i in range(10_000)]
    doc = {"segments": [{"device": 0, "total_size": 512 * 10_000,
                         "blocks": [{"state": "active_allocated", "size": 512 * 10_000}]}], "device_traces": [actions]}
    path = tmp_path / "rank0.memory.pickle"
    path.write_bytes(pickle.dumps(doc, protocol=4))
    mem = tracelab.load(path).memory
    assert len(mem) == 10_000 and mem["op"].iloc[-1] == "f (m9999.py:9999)"


def _shared_frames_doc(n_actions: int, n_frames: int) -> dict:
    frames = [{"filename": "/opt/torch/csrc/x.cpp", "line": 1, "name": "c10::alloc"},
              *({"filename": f"/w/model{i}.py", "line": i, "name": f"f{i}"} for i in range(n_frames))]
    actions = [{"action": "alloc", "addr": 64 * i, "size": 64, "time_us": i, "frames": frames} for i in range(n_actions)]
    return {"segments": [{"device": 0, "total_size": 64 * n_actions,
                          "blocks": [{"state": "active_allocated", "size": 64 * n_actions}]}], "device_traces": [actions]}


def test_frames_shared_by_memo_are_walked_once(tmp_path, monkeypatch):
    doc = _shared_frames_doc(5_000, 500)
    path = tmp_path / "rank0.memory.pickle"
    path.write_bytes(pickle.dumps(doc, protocol=4))  # pickle's memo writes the one frames list once
    walked = []
    real = snapshot._placed
    monkeypatch.setattr(snapshot, "_placed", lambda frames: walked.append(1) or real(frames))
    mem = tracelab.load(path).memory
    assert len(walked) == 1  # one frames object, 5,000 actions naming it
    user = [f for f in doc["device_traces"][0][0]["frames"] if f["filename"].endswith(".py")]
    assert set(mem["op"]) == {f"{user[0]['name']} (model0.py:0)"}  # the C++ frame skipped
    assert mem["scope"].iloc[0] == "/".join(f"model{i}.py:f{i}" for i in reversed(range(snapshot.MAX_SCOPE_FRAMES)))


def test_snapshot_frames_are_the_users_python_frames():
    frames = [{"filename": "??", "line": 0, "name": "torch::unwind::unwind()"},
              {"filename": "/pytorch/c10/cuda/CUDACachingAllocator.cpp", "line": 9, "name": "c10::cuda::malloc"},
              {"filename": "", "line": 0, "name": "libtorch_cuda.so"},
              {"filename": "/usr/lib/python3/site-packages/torch/nn/modules/linear.py", "line": 1, "name": "forward"},
              {"filename": "/w/train.py", "line": 42, "name": "step"}, {"filename": "<stdin>", "line": 1, "name": "<module>"}]
    assert snapshot._placed(frames) == ("step (train.py:42)", "<stdin>:<module>/train.py:step")


# ---- scenarios: values bounded, regexes matched safely --------------------------------------------

@pytest.mark.parametrize("spec", ["scale:.=1e30", "scale:.=1e300", "busbw:1e-300", "scale:.=nan", "scale:.=inf",
                                  "scale:.=-1", "busbw:0", "busbw:1e12", "scale:.=1001"])
def test_scenario_values_outside_what_a_step_can_mean(spec):
    from tracelab.reports.whatif import scenarios

    with pytest.raises(UsageError, match="must be a number from"):
        scenarios.parse(spec)


def test_scenario_bounds_inside_are_taken():
    from tracelab.reports.whatif import scenarios

    assert scenarios.parse(f"scale:.={scenarios.MAX_SCALE:g}").name == "scale"
    assert scenarios.parse(f"busbw:{scenarios.MIN_BUS_GB_S:g}").name == "busbw"


def test_durations_clipped_below_int64():
    from tracelab.core import limits
    from tracelab.reports.whatif.scenarios import changed_durations_ns

    out = changed_durations_ns(np.array([1e30, 5.4, 2.0**62]))
    assert out.dtype == np.int64 and out.tolist() == [limits.MAX_DUR_NS, 5, limits.MAX_DUR_NS]


def test_matches_agree_with_re_search_and_do_not_warn():
    names = ["ampere_sgemm_128x64", "void gemv<float>(...)", "Memset", None, "ampere_sgemm_128x64", "a\nb"]
    regex = re.compile("(gemm|gemv)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = regexes.matches(regex, names, "--scenario")
    assert got.tolist() == [regex.search(str(n)) is not None for n in names]


def test_a_backtracking_regex_is_stopped_in_its_budget():
    names = ["a" * 40 + "!", "b" * 40]
    with pytest.raises(UsageError, match="backtracks without bound"):
        regexes.matches(re.compile(r"(a+)+$"), names, "--scenario", budget_s=0.2)


@pytest.mark.slow
def test_whatif_remove_with_a_group_prints_no_warning(capsys):
    status, _, err = m.run_cli_output(capsys, "whatif", str(SMALL), "--scenario", "remove:(gemm|gemv)")
    assert status == 0 and "warning" not in err, err


def _long_named(tmp_path: Path) -> Path:
    def rename(doc):
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel":
                e["name"] = "a" * 48 + "!"
    return m.kineto(rename)(tmp_path)


@pytest.mark.slow
def test_whatif_remove_of_a_catastrophic_regex_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(regexes, "BUDGET_S", 0.3)
    status, err = m.run_cli(capsys, "whatif", str(_long_named(tmp_path)), "--scenario", "remove:(a+)+$")
    assert status == 2 and len(err) == 1 and "backtracks" in err[0], err


# ---- error lines: echoed values capped -----------------------------------------------------------

def test_an_echoed_value_of_5_mb_is_cut(capsys):
    spec = "scale:" + "x" * 5_000_000 + "=1e30"
    status, err = m.run_cli(capsys, "whatif", str(SMALL), "--scenario", spec)
    assert status == 2 and len(err) == 1 and len(err[0]) < LINE_CHARS + 200, len(err[0])
    shown = int(re.search(r"\(([\d,]+) characters\)", err[0]).group(1).replace(",", ""))
    assert len(spec) < shown < len(spec) + 10  # the value's length, with its quotes and what follows it


def test_shortened_keeps_short_text_and_cuts_long_runs():
    assert shortened("a: b c") == "a: b c"
    word = "k" * 1000
    assert shortened(f"f: {word} is bad") == f"f: {'k' * VALUE_CHARS}... (1,000 characters) is bad"
    many = " ".join(["w" * 100] * 100)  # long, but no single run beyond VALUE_CHARS
    out = shortened(many)
    assert len(out) < LINE_CHARS + 100 and out.startswith("w" * 100) and out.endswith("w" * 100)


def test_clipped_never_cuts_mid_word():
    text = "forward (model.py:12) in train.py:step/model.py:forward/attention.py:scaled_dot_product"
    out = clipped(text, 60)
    assert len(out) <= 60 and out.endswith("...") and text.startswith(out[:-3])
    assert out[:-3].endswith(("/", " ", ",")) or out[:-3] in text.split()  # at a boundary
    assert clipped("short", 60) == "short" and clipped("x" * 100, 10) == "x" * 7 + "..."


# ---- run folders: special files named, never opened -------------------------------------------------

def _run_with(tmp_path: Path, make_rank1) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(DATA / "ddp-2gpu-equal-torch" / "rank0.pt.trace.json.gz", run / "rank0.pt.trace.json.gz")
    make_rank1(run / "rank1.pt.trace.json")
    return run


def _socket(path: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()


@pytest.mark.parametrize("make, kind", [(os.mkfifo, "FIFO"), (lambda p: p.symlink_to("/dev/zero"), "character device"),
                                        (_socket, "socket")])
def test_a_special_file_named_like_a_trace_is_named(tmp_path, capsys, make, kind):
    run = _run_with(tmp_path, make)
    status, err = m.run_cli(capsys, "breakdown", str(run))
    assert status == 2 and len(err) == 1 and "rank1.pt.trace.json" in err[0] and kind in err[0], err


# ---- nsys: whole-graph launches ---------------------------------------------------------------------

def graph_mode(folder: Path) -> Path:
    """graph-1gpu-nsys as nsys's default --cuda-graph-trace=graph writes it: the graphs' node rows
    replaced by one CUPTI_ACTIVITY_KIND_GRAPH_TRACE row per launch (their span)."""
    path = folder / "rank0.sqlite"
    shutil.copy(GRAPH_NSYS, path)
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                    "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, "
                    "correlationId INTEGER, globalPid INTEGER, graphId INTEGER, graphExecId INTEGER)")
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMSET"):
            con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE SELECT MIN(start), MAX(end), deviceId, contextId, "
                        f"streamId, correlationId, globalPid, 3, 4 FROM {table} WHERE graphNodeId IS NOT NULL "
                        "GROUP BY globalPid, correlationId")
            con.execute(f"DELETE FROM {table} WHERE graphNodeId IS NOT NULL")
    return path


def test_whole_graph_launches_are_gpu_work(tmp_path):
    path = graph_mode(tmp_path)
    with sqlite3.connect(path) as con:
        launches = con.execute("SELECT start, end - start FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE ORDER BY start").fetchall()
        rest = con.execute("SELECT (SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL) "
                           "+ (SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMSET)").fetchone()[0]
    profile = tracelab.load(path)
    ev = profile.events
    graphs = ev[ev["name"].astype(str) == "CUDA graph 3 (whole launch)"]
    assert len(launches) == 10 and len(graphs) == len(launches)
    assert sorted(graphs["dur_ns"].tolist()) == sorted(d for _, d in launches)
    assert len(ev[ev["kind"].isin(["kernel", "memcpy", "memset"])]) == len(launches) + rest
    assert any("--cuda-graph-trace=node" in n.text and n.values == {"launches": 10} for n in profile.meta.notes)


def test_node_mode_rows_are_not_counted_twice(tmp_path):
    """A file with both (a graph launch's node rows and its whole-launch row): read through its nodes."""
    path = tmp_path / "rank0.sqlite"
    shutil.copy(GRAPH_NSYS, path)
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER, end INTEGER, deviceId INTEGER, "
                    "streamId INTEGER, correlationId INTEGER, globalPid INTEGER, graphId INTEGER)")
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE SELECT MIN(start), MAX(end), deviceId, streamId, "
                    "correlationId, globalPid, 3 FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL "
                    "GROUP BY correlationId")
    before = tracelab.load(GRAPH_NSYS).events
    after = tracelab.load(path).events
    assert len(after) == len(before) and not after["name"].astype(str).str.contains("whole launch").any()


# ---- memory: like with like, times before the start said --------------------------------------------

def _peaks(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["input", "rank", "device", "peak_allocated_bytes", "peak_reserved_bytes", "step",
                                       "peak_during"])


def test_runs_compare_only_a_quantity_both_inputs_have():
    gib = 2**30
    peaks = _peaks([("nsys", 0, 0, None, 2 * gib, None, ""), ("torch", 0, 0, 1.5 * gib, None, 0, ""),
                    ("torch2", 0, 0, 1.6 * gib, 2.5 * gib, 0, "")])
    runs = across.runs(peaks).set_index("input")
    assert runs.loc["torch", "of"] is None and pd.isna(runs.loc["torch", "delta_bytes"])  # allocated vs reserved: none
    assert runs.loc["torch2", "of"] == "reserved" and runs.loc["torch2", "delta_bytes"] == 0.5 * gib
    both = _peaks([("a", 0, 0, 1.0 * gib, 3.0 * gib, 0, ""), ("b", 0, 0, 1.25 * gib, 2.0 * gib, 0, "")])
    b = across.runs(both).set_index("input").loc["b"]
    assert b["of"] == "allocated" and b["delta_bytes"] == 0.25 * gib and b["ratio"] == 1.25


def test_a_peak_before_the_trace_start_is_said(tmp_path, capsys):
    from helpers import nsys_with_memory

    path = nsys_with_memory(tmp_path, [(-17_700_000, 0x1000, 2**30, 2, 0), (-1_000_000, 0x1000, 2**30, 2, 1),
                                        (1_000, 0x5000, 2**20, 2, 0)])
    status, out, _ = m.run_cli_output(capsys, "memory", str(path), "--format", "json")
    peak_at_ns = json.loads(out)["steps"][0]["peak_at_ns"]
    assert status == 0 and peak_at_ns < 0
    status, out, _ = m.run_cli_output(capsys, "memory", str(path))
    said = " ".join(out.split())
    assert f"as early as {peak_at_ns / 1e6:,.1f} ms" in said and "before the capture began" in said


# ---- the adversarial round: one line and exit 2, or exit 0 (with its note); never a hang ------------

def _pickled(doc) -> callable:
    return lambda folder: m.raw(pickle.dumps(doc, protocol=4), "rank0.memory.pickle")(folder)


def _snap(actions=(), segments=()) -> dict:
    return {"segments": list(segments), "device_traces": [list(actions)]}


def _deep(n: int) -> bytes:
    """n lists nested in one another, as the size of an alloc (under the bomb check's slack)."""
    nested = b"]" * n + b"a" * (n - 1)
    return (b"\x80\x02}(X\x08\x00\x00\x00segments]X\x0d\x00\x00\x00device_traces]]}(X\x06\x00\x00\x00actionX\x05"
            b"\x00\x00\x00allocX\x04\x00\x00\x00size" + nested + b"uaau.")


def _kineto_bytes(edit) -> callable:
    return m.with_bytes(m.kineto(lambda doc: None), edit)


def _first_kernel(**fields) -> callable:
    return m.kineto_event("kernel", **fields)


def _named(name: str) -> callable:
    def change(doc):
        m.first(doc["traceEvents"], "kernel")["name"] = name
    return m.kineto(change)


def _fifo(folder: Path) -> Path:
    os.mkfifo(folder / "rank0.pt.trace.json")
    return folder / "rank0.pt.trace.json"


def _graph_trace_text(folder: Path) -> Path:
    path = graph_mode(folder)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_GRAPH_TRACE SET start = 'soon' WHERE rowid = 1")
    return path


def _many_devices(folder: Path) -> Path:
    doc = {"segments": [{"device": 0, "total_size": 0, "blocks": []}] * 2_000, "device_traces": [[]] * 20_000}
    return m.raw(pickle.dumps(doc, protocol=4), "rank0.memory.pickle")(folder)


def _in_run(make_rank1) -> callable:
    return lambda folder: _run_with(folder, make_rank1)


def _file(path: str) -> callable:
    return lambda folder: Path(path)


_SMALL_TRACE = SMALL / "rank0.pt.trace.json.gz"
_BIDI = "evil\u202e\u2066kernel\x1b[2J\nline"
# (case, maker of the input, extra arguments, the command, expected status, what stderr or stdout must say)
ROUND = [
    ("snapshot: 300 KB of empty dicts", m.raw(_dicts_bomb(300_000), "r.pickle"), [], "memory", 2, "pickle bomb"),
    ("snapshot: empty lists", m.raw(b"\x80\x02](" + b"]" * 300_000 + b"e.", "r.pickle"), [], "memory", 2, "pickle bomb"),
    ("snapshot: 1-tuples of None", m.raw(b"\x80\x02](" + b"N\x85" * 200_000 + b"e.", "r.pickle"), [], "memory", 2,
     "pickle bomb"),
    ("snapshot: 5,000 nested lists as a size", m.raw(_deep(5_000), "r.pickle"), [], "memory", 2, "is not an integer"),
    ("snapshot: a size of 2**100", _pickled(_snap([{"action": "alloc", "size": 2**100}])), [], "memory", 2,
     "is not an integer"),
    ("snapshot: time_us NaN", _pickled(_snap([{"action": "alloc", "size": 1, "time_us": float("nan")}])), [],
     "memory", 2, "is not a time"),
    ("snapshot: time_us inf", _pickled(_snap([{"action": "alloc", "size": 1, "time_us": float("inf")}])), [],
     "memory", 2, "is not a time"),
    ("snapshot: segments past 2**63 bytes", _pickled(_snap(segments=[{"device": 0, "total_size": 2**62 + 2**61,
                                                                       "blocks": []}] * 2)), [], "memory", 2,
     "past 2**63"),
    ("snapshot: truncated", m.raw(pickle.dumps(_shared_frames_doc(50, 5), protocol=4)[:-400], "r.pickle"), [],
     "memory", 2, "not a readable pickle"),
    ("snapshot: header only", m.raw(b"\x80\x04", "r.pickle"), [], "memory", 2, "not a readable pickle"),
    ("snapshot: empty file", m.raw(b"", "r.pickle"), [], "memory", 2, "empty file"),
    ("snapshot: calls os.system", _pickled(_snap([{"action": "alloc", "frames": [__import__("os").getcwd]}])), [],
     "memory", 2, "refused"),
    ("snapshot: a list as a segment's device", _pickled(_snap(segments=[{"device": [0], "total_size": 1, "blocks": []}])),
     [], "memory", 0, "no device_traces"),
    ("snapshot: 20,000 empty device traces x 2,000 segments", _many_devices, [], "memory", 0, "no device_traces"),
    ("snapshot: memo-shared frames of 50,000 actions", lambda folder: _pickled(_shared_frames_doc(50_000, 200))(folder),
     [], "memory", 0, ""),  # made when the case runs, not as every worker collects the module
    ("snapshot: control chars and RTL in frames", _pickled(_snap([{"action": "alloc", "size": 8, "addr": 1, "frames": [
        {"filename": "/w/\x1b[2Jx.py", "line": 1, "name": _BIDI}]}], [{"device": 0, "total_size": 8, "blocks": [
            {"state": "active_allocated", "size": 8}]}])), [], "memory", 0, ""),
    ("kineto: NaN duration", _kineto_bytes(lambda b: re.sub(rb'"dur": [0-9.]+', b'"dur": NaN', b, count=1)), [],
     "breakdown", 2, ""),
    ("kineto: Infinity timestamp", _kineto_bytes(lambda b: re.sub(rb'"ts": [0-9.]+', b'"ts": Infinity', b, count=1)),
     [], "breakdown", 2, ""),
    ("kineto: a timestamp of 1e30", _first_kernel(ts=1e30), [], "breakdown", 2, "ts"),
    ("kineto: a duration of 10**30", _first_kernel(dur=10**30), [], "breakdown", 2, "dur"),
    ("kineto: a negative duration", _first_kernel(dur=-5), [], "breakdown", 2, "dur"),
    ("kineto: truncated gzip", m.raw(_SMALL_TRACE.read_bytes()[:3000], "rank0.pt.trace.json.gz"), [], "breakdown", 2,
     ""),
    ("kineto: truncated JSON", m.raw(gzip.decompress(_SMALL_TRACE.read_bytes())[:5000], "rank0.pt.trace.json"), [],
     "breakdown", 2, ""),
    ("kineto: empty file", m.raw(b"", "rank0.pt.trace.json"), [], "breakdown", 2, "empty file"),
    ("kineto: 3,000 nested arrays", m.raw(b'{"traceEvents": [' + b"[" * 3000 + b"]" * 3000 + b"]}",
                                          "rank0.pt.trace.json"), [], "breakdown", 2, ""),
    ("kineto: a kernel named with ESC, RTL and a newline", _named(_BIDI), [], "breakdown", 0, ""),
    ("whatif: scale:.=1e30", m.raw(_SMALL_TRACE.read_bytes(), "rank0.pt.trace.json.gz"), ["--scenario", "scale:.=1e30"],
     "whatif", 2, "from 0 to 1000"),
    ("whatif: scale:.=1e300", m.raw(_SMALL_TRACE.read_bytes(), "rank0.pt.trace.json.gz"),
     ["--scenario", "scale:.=1e300"], "whatif", 2, "from 0 to 1000"),
    ("whatif: busbw:1e-300", m.raw(_SMALL_TRACE.read_bytes(), "rank0.pt.trace.json.gz"), ["--scenario", "busbw:1e-300"],
     "whatif", 2, "from 0.001"),
    ("whatif: scale:.=nan", m.raw(_SMALL_TRACE.read_bytes(), "rank0.pt.trace.json.gz"), ["--scenario", "scale:.=nan"],
     "whatif", 2, "must be a number"),
    ("whatif: remove:[ (not a regex)", m.raw(_SMALL_TRACE.read_bytes(), "rank0.pt.trace.json.gz"),
     ["--scenario", "remove:["], "whatif", 2, "not a regular expression"),
    ("whatif: remove:(a+)+$ on long names", _long_named, ["--scenario", "remove:(a+)+$"], "whatif", 2, "backtracks"),
    ("whatif: remove with a named group and a backreference", m.raw(_SMALL_TRACE.read_bytes(), "rank0.pt.trace.json.gz"),
     ["--scenario", "remove:(?P<x>m)(?P=x)"], "whatif", 0, ""),
    ("whatif: a 5 MB pattern", m.raw(_SMALL_TRACE.read_bytes(), "rank0.pt.trace.json.gz"),
     ["--scenario", "scale:" + "y" * 5_000_000 + "=2"], "whatif", 2, "a pattern of 5,000,000 characters"),
    ("run folder: rank 1 a FIFO", _in_run(os.mkfifo), [], "breakdown", 2, "FIFO"),
    ("run folder: rank 1 a link to /dev/zero", _in_run(lambda p: p.symlink_to("/dev/zero")), [], "breakdown", 2,
     "character device"),
    ("run folder: rank 1 a socket", _in_run(_socket), [], "breakdown", 2, "socket"),
    ("run folder: rank 1 a link to itself", _in_run(lambda p: p.symlink_to(p.name)), [], "breakdown", 2, "loop"),
    ("a FIFO given by name", _fifo, [], "breakdown", 2, ""),
    ("/dev/null given by name", _file("/dev/null"), [], "breakdown", 2, ""),
    ("nsys: whole-graph launches", graph_mode, [], "breakdown", 0, "--cuda-graph-trace=node"),
    ("nsys: a whole-graph launch starting 'soon'", _graph_trace_text, [], "breakdown", 2, "start"),
]


@pytest.mark.parametrize("case, make, extra, command, status, says", ROUND, ids=[r[0] for r in ROUND])
def test_adversarial_round(tmp_path, capsys, monkeypatch, case, make, extra, command, status, says):
    monkeypatch.setattr(regexes, "BUDGET_S", 0.3)
    path = make(tmp_path)
    got, out, err = m.run_cli_output(capsys, command, str(path), *extra)
    lines = err.splitlines()
    assert got == status, (case, err[-2000:])
    assert "Traceback" not in err and all(len(line) < LINE_CHARS + 300 for line in lines)
    if status == 2:
        assert len(lines) == 1 and lines[0].startswith("tracelab: error: "), lines
    assert "tracelab: warning" not in err, err
    assert says in err + " ".join(out.split()), (case, err, out[-500:])
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]", out + err)  # escaped, never raw
