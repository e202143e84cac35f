"""CUDA-graph replays attributed to the scopes where their kernels were captured (issue 24).

The H100 captures tests/data/graph-*-1gpu-{torch,nsys} (benchmarks/graph_scopes.py, in git at da8b67c: 4 layers
captured into one graph inside regions layer0..layer3, replayed once in each of 5 steps, each
step also running the layers eagerly) against a walk of the raw file written here: json/gzip
for Kineto, sqlite3 for nsys, with no tracelab code.
"""
from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
from contextlib import closing
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

import tracelab
from tracelab.core.note import texts
from tracelab.parsers import chrome, nsys

DATA = Path(__file__).parent / "data"
STEP = re.compile(r"step \d+")
NODE_CALL = re.compile(r"cu(da)?(Launch\w*Kernel\w*|Memcpy\w*Async\w*|Memset\w*Async\w*)")
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def _open_ranges(ranges: list[tuple[int, int, str]], at) -> str:
    """The ranges holding `at`, outermost (earliest start, then longest) first, joined by '/'."""
    held = sorted((r for r in ranges if r[0] <= at < r[1]), key=lambda r: (r[0], -r[1]))
    return "/".join(name for _, _, name in held)


# ---- Kineto, from the JSON --------------------------------------------------------------------

def _kineto_walk(events: list[dict]) -> Counter:
    """(scope, step) -> GPU rows: a replay's rows take, in start order, the scopes of the
    capture's node calls in call order (the latest capture before it with as many nodes)."""
    ranges = [(e["ts"], e["ts"] + e["dur"], e["name"]) for e in events if e.get("cat") == "user_annotation"]
    scopes = [r for r in ranges if not STEP.fullmatch(r[2])]
    steps = [r for r in ranges if STEP.fullmatch(r[2])]
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    rows = [e for e in events if e.get("cat") in GPU_CATS]
    with_rows = {e["args"]["correlation"] for e in rows}
    captures, nodes = [], None
    for c in sorted(calls.values(), key=lambda c: c["ts"]):
        if "BeginCapture" in c["name"]:
            nodes = []
        elif "EndCapture" in c["name"]:
            captures.append((c["ts"], nodes))
            nodes = None
        elif nodes is not None and NODE_CALL.fullmatch(c["name"]) and c["args"]["correlation"] not in with_rows:
            nodes.append(c)
    out: Counter = Counter()
    by_launch: dict[int, list[dict]] = {}
    for r in rows:
        by_launch.setdefault(r["args"]["correlation"], []).append(r)
    for corr, group in by_launch.items():
        launch = calls[corr]
        step = _open_ranges(steps, launch["ts"])
        step = int(step.split()[-1]) if step else None
        fit = [n for end, n in captures if end <= launch["ts"] and len(n) == len(group)]
        if "GraphLaunch" in launch["name"] and fit:
            for node in fit[-1]:
                out[(_open_ranges(scopes, node["ts"]), step)] += 1
        else:
            out[(_open_ranges(scopes, launch["ts"]), step)] += len(group)
    return out


def _kineto_events(path: Path) -> list[dict]:
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


def _counts(events) -> Counter:
    steps = [None if v is pd.NA else int(v) for v in events["step"]]
    return Counter(zip(events["scope"], steps))


@pytest.mark.parametrize("folder", ["graph-1gpu-torch", "graph-outside-1gpu-torch"])
def test_kineto_scopes_equal_a_raw_walk(folder):
    path = DATA / folder / "rank0.pt.trace.json.gz"
    profile = chrome.read(path)
    assert _counts(profile.events) == _kineto_walk(_kineto_events(path))


def test_kineto_replays_take_the_capture_scopes():
    expected = json.loads((DATA / "graph-1gpu-torch" / "expected.results.json").read_text())
    events = chrome.read(DATA / "graph-1gpu-torch" / "rank0.pt.trace.json.gz").events
    per_layer = events.groupby("scope").size()
    steps = expected["steps"] * expected["replays"]
    # each layer's nodes (memset + 3 GEMM kernels + GELU + LayerNorm) once per replay, each step
    assert [per_layer[f"capture/layer{i}"] for i in range(expected["layers"])] == [6 * steps] * expected["layers"]
    replayed = events[events["scope"].str.startswith("capture/")]
    assert sorted(replayed["step"].unique()) == list(range(expected["steps"]))  # the replay's step kept


def test_kineto_capture_outside_says_so_and_keeps_the_replay_scope():
    profile = chrome.read(DATA / "graph-outside-1gpu-torch" / "rank0.pt.trace.json.gz")
    assert [n.values for n in profile.meta.notes] == [{"outside": 5, "replays": 5, "gpu_rows": 120}]
    assert texts(profile.meta.notes) == ["5 of 5 CUDA-graph replays (120 GPU rows) were captured outside the "
                                     "trace: their rows keep the replay's scope"]
    assert not profile.events["scope"].str.startswith("capture").any()
    assert chrome.read(DATA / "graph-1gpu-torch" / "rank0.pt.trace.json.gz").meta.notes == []


def _rewrite(tmp_path: Path, change) -> Path:
    trace = json.loads(gzip.open(DATA / "graph-1gpu-torch" / "rank0.pt.trace.json.gz").read())
    change(trace["traceEvents"])
    out = tmp_path / "rank0.pt.trace.json"
    out.write_text(json.dumps(trace))
    return out


def _replay_rows(events: list[dict], nth: int) -> list[dict]:
    launches = sorted((e for e in events if e.get("name") == "cudaGraphLaunch"), key=lambda e: e["ts"])
    corr = launches[nth]["args"]["correlation"]
    return sorted((e for e in events if e.get("cat") in GPU_CATS and e["args"]["correlation"] == corr),
                  key=lambda e: e["ts"])


def test_kineto_replay_missing_a_row_is_not_guessed(tmp_path):
    def drop(events):
        events.remove(_replay_rows(events, 2)[-1])
    profile = chrome.read(_rewrite(tmp_path, drop))
    assert texts(profile.meta.notes) == ["1 of 5 CUDA-graph replays (23 GPU rows) were captured outside the "
                                     "trace: their rows keep the replay's scope"]
    assert (profile.events["scope"].str.startswith("capture/layer") & (profile.events["step"] == 2)).sum() == 0
    assert _counts(profile.events) == _kineto_walk(json.loads(_rewrite(tmp_path, drop).read_text())["traceEvents"])


def test_kineto_replay_on_two_streams_is_flagged(tmp_path):
    def split(events):
        for e in _replay_rows(events, 1)[12:]:
            e["tid"], e["args"]["stream"] = 99, 99
    profile = chrome.read(_rewrite(tmp_path, split))
    assert texts(profile.meta.notes) == ["1 CUDA-graph replays ran on several streams: their rows are matched to the "
                                     "capture's launches in start order, which may swap concurrent branches"]


@pytest.mark.slow
def test_cli_prints_the_note_after_the_output(capsys):
    from helpers import run_cli_output

    status, out, err = run_cli_output(capsys, "breakdown", str(DATA / "graph-outside-1gpu-torch"), "--by", "scope")
    assert status == 0 and "(no scope)" in out
    assert err == (f"tracelab: note: {DATA / 'graph-outside-1gpu-torch' / 'rank0.pt.trace.json.gz'}: 5 of 5 "
                           "CUDA-graph replays (120 GPU rows) were captured outside the trace: their rows keep "
                           "the replay's scope\n")


# ---- nsys, from the SQLite --------------------------------------------------------------------

def _nsys_walk(path: Path) -> Counter:
    """(scope, step) -> GPU rows: a row with a graph node id takes the NVTX ranges open on the
    thread and at the time its first original node was created, if the process's first CUDA
    call came before; any other row (and one captured before that) the ranges at its launch."""
    with closing(sqlite3.connect(path)) as con:
        return _nsys_walk_in(con)


def _nsys_walk_in(con: sqlite3.Connection) -> Counter:
    ranges: dict[int, list] = {}
    for tid, start, end, text in con.execute("SELECT globalTid, start, end, text FROM NVTX_EVENTS "
                                             "WHERE eventType IN (59, 60) AND text IS NOT NULL"):
        ranges.setdefault(tid, []).append((start, end, text))
    original = dict(con.execute("SELECT graphNodeId, originalGraphNodeId FROM CUDA_GRAPH_NODE_EVENTS "
                                "WHERE originalGraphNodeId IS NOT NULL"))
    made = {n: (t, s) for n, t, s in con.execute("SELECT graphNodeId, globalTid, start FROM CUDA_GRAPH_NODE_EVENTS "
                                                 "WHERE originalGraphNodeId IS NULL ORDER BY start DESC")}
    calls = {c: (t, s) for c, t, s in con.execute("SELECT correlationId, globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME")}
    first_call = con.execute("SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    out: Counter = Counter()
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMSET"):
        for corr, node in con.execute(f"SELECT correlationId, graphNodeId FROM {table}"):
            tid, at = calls[corr]
            held = ranges.get(tid, [])
            step = _open_ranges([r for r in held if STEP.fullmatch(r[2])], at)
            seen = set()
            while node in original and node not in seen:  # a clone cycle (a damaged file) ends here
                seen.add(node)
                node = original[node]
            if node in made and made[node][1] >= first_call:
                tid, at = made[node]
            scope = _open_ranges([r for r in ranges.get(tid, []) if not STEP.fullmatch(r[2])], at)
            out[(scope, int(step.split()[-1]) if step else None)] += 1
    return out


@pytest.mark.parametrize("folder", ["graph-1gpu-nsys", "graph-outside-1gpu-nsys"])
def test_nsys_scopes_equal_a_raw_walk(folder):
    path = DATA / folder / "rank0.sqlite"
    profile = nsys.read(path)[0]
    assert _counts(profile.events) == _nsys_walk(path)


def test_nsys_and_kineto_agree_on_the_graph():
    """The same script under both profilers: equal kernels per capture scope and step."""
    torch_rows = _counts(chrome.read(DATA / "graph-1gpu-torch" / "rank0.pt.trace.json.gz").events)
    nsys_rows = _counts(nsys.read(DATA / "graph-1gpu-nsys" / "rank0.sqlite")[0].events)
    layers = {k: n for k, n in torch_rows.items() if k[0].startswith(("capture/", "eager/"))}
    assert layers and layers == {k: n for k, n in nsys_rows.items() if k[0].startswith(("capture/", "eager/"))}


def test_nsys_capture_outside_says_so():
    profile = nsys.read(DATA / "graph-outside-1gpu-nsys" / "rank0.sqlite")[0]
    assert texts(profile.meta.notes) == ["120 of 120 CUDA-graph node rows were captured outside the trace "
                                     "(before its first CUDA call): they keep the replay's scope"]


def _copy(tmp_path: Path, sql: str) -> Path:
    out = tmp_path / "rank0.sqlite"
    shutil.copy(DATA / "graph-1gpu-nsys" / "rank0.sqlite", out)
    with closing(sqlite3.connect(out)) as con:
        con.execute(sql)
        con.commit()
    return out


@pytest.mark.parametrize("sql, outside", [
    ("DROP TABLE CUDA_GRAPH_NODE_EVENTS", 120),  # node ids without their creation: not guessed
    ("UPDATE CUDA_GRAPH_NODE_EVENTS SET originalGraphNodeId = graphNodeId", 120),  # every node its own clone
    ("DELETE FROM CUDA_GRAPH_NODE_EVENTS WHERE graphNodeId = 4294967296", 5),  # one node's creation lost
])
def test_nsys_broken_graph_tables(tmp_path, sql, outside):
    path = _copy(tmp_path, sql)
    profile = nsys.read(path)[0]
    assert [n.values for n in profile.meta.notes] == [{"outside_rows": outside, "node_rows": 120}]
    assert texts(profile.meta.notes) == [f"{outside} of 120 CUDA-graph node rows were captured outside the trace "
                                     "(before its first CUDA call): they keep the replay's scope"]
    if "DROP" not in sql:
        assert _counts(profile.events) == _nsys_walk(path)


def test_nsys_graph_node_id_of_the_wrong_type(tmp_path):
    path = _copy(tmp_path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphNodeId = 'x' WHERE rowid = 200")
    with pytest.raises(tracelab.core.errors.TraceFormatError, match="row 200: graphNodeId 'x'"):
        nsys.read(path)


@pytest.mark.parametrize("call, node, graph_launch", [
    ("cudaLaunchKernel", True, False), ("cuLaunchKernelEx", True, False), ("cudaLaunchKernelExC", True, False),
    ("hipModuleLaunchKernel", True, False), ("cudaMemsetAsync", True, False), ("cuMemsetD32Async", True, False),
    ("cudaMemcpyAsync", True, False), ("cudaLaunchHostFunc", False, False), ("cudaEventRecord", False, False),
    ("cudaGraphLaunch", False, True), ("hipGraphLaunch", False, True), ("cudaMemcpy", False, False),
])
def test_which_calls_make_nodes_and_launch_graphs(call, node, graph_launch):
    from tracelab.parsers._kineto_graphs import GRAPH_LAUNCH, NODE_CALL
    assert (bool(NODE_CALL.fullmatch(call)), bool(GRAPH_LAUNCH.fullmatch(call))) == (node, graph_launch)


def _capture_calls_from_json(doc: dict) -> int:
    """Launch calls between a thread's cudaStreamBeginCapture and EndCapture that launched no GPU row."""
    with_rows = {e["args"]["correlation"] for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    calls = sorted((e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"), key=lambda e: e["ts"])
    open_on, n = set(), 0
    for e in calls:
        thread = (e["pid"], e["tid"])
        if re.fullmatch(r"(cuda|cu|hip)StreamBeginCapture\w*", e["name"]):
            open_on.add(thread)
        elif re.fullmatch(r"(cuda|cu|hip)StreamEndCapture\w*", e["name"]):
            open_on.discard(thread)
        elif thread in open_on and e["args"].get("correlation") not in with_rows and re.fullmatch(
                r"(cuda|cu|hip)(Ext|Module)?(Launch\w*Kernel\w*|Memcpy\w*Async\w*|Memset\w*Async\w*)", e["name"]):
            n += 1
    return n


def test_a_trace_that_is_mostly_capturing_graphs_is_not_told_to_use_them(tmp_path, capsys):
    """graph-1gpu-torch captures a 24-node graph once and launches 162 kernels one by one: it is told to
    use CUDA graphs. The same trace with 200 more launch calls inside its capture (as vLLM's graph-capture
    traces are: 349 calls captured, 7 kernels run) is not; a note says its figures include capturing."""
    from helpers import run_cli_output

    path = DATA / "graph-1gpu-torch" / "rank0.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    p = tracelab.load(path)
    assert p.meta.graph_capture_calls == _capture_calls_from_json(doc) == 24
    assert not [n for n in p.meta.notes if n.code == "graph_captures"]  # 24 captured against 162 launched
    assert "capture the step in a CUDA graph" in run_cli_output(capsys, "breakdown", str(path))[1]
    begin = next(e for e in doc["traceEvents"] if e.get("name", "").startswith("cudaStreamBeginCapture"))
    end = next(e for e in doc["traceEvents"] if e.get("name", "").startswith("cudaStreamEndCapture"))
    top = max(e["args"]["correlation"] for e in doc["traceEvents"] if "correlation" in e.get("args", {}))
    for k in range(200):  # captured launches: no GPU row of their own
        doc["traceEvents"].append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": begin["pid"],
                                   "tid": begin["tid"], "ts": begin["ts"] + (end["ts"] - begin["ts"]) * (k + 1) / 202,
                                   "dur": 0.5, "args": {"correlation": top + 1 + k, "External id": 0}})
    edited = tmp_path / "rank0.pt.trace.json"
    edited.write_text(json.dumps(doc))
    q = tracelab.load(edited)
    assert q.meta.graph_capture_calls == _capture_calls_from_json(doc) == 224
    status, out, err = run_cli_output(capsys, "breakdown", str(edited))
    assert status == 0 and "capture the step in a CUDA graph" not in out
    assert "1 CUDA-graph capture in this trace (224 launch calls inside" in err
