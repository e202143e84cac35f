"""parsers/chrome.py on every Kineto trace of HTA's test data (shared_trace: tests/data/public or
../shared/traces) and our own 2-H200
captures in tests/data, checked against the JSON read independently here (plain json,
exact Decimal timestamps), plus broken inputs."""
from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
import shutil
from collections import Counter
from decimal import Decimal
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from helpers import on_shared, shared_trace, slow_beyond, slow_after

import tracelab
from tracelab.core import classify
from tracelab.core.errors import RankError, TraceFormatError
from tracelab.parsers import chrome
from tracelab.parsers._steps import DEFAULT_STEP_PATTERN

REPO = Path(__file__).resolve().parents[1]

GPU_TRACES = [
    "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "nccl_parser_config/nccl_data.json.gz",
    "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "trace_diff/control/control.json.gz",
    "trace_diff/test/test.json.gz",
    "trace_filter/sampled_rank-0.json.gz",
    "trace_filter/sampled_rank-1.json.gz",
    "triton_example/triton_example.json.gz",
]
CPU_TRACES = ["cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
              "rank_unavailable/rank_not_found.json.gz"]
KIND_OF_CAT = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
NCCL = "nccl_parser_config/nccl_data.json.gz"
# trace_diff's two captures (35 MB of JSON each) repeat what the smaller ones check, the old
# format's absolute timestamps included (ns_resolution_trace): they run under -m slow
TRACE_DIFF = {"trace_diff/control/control.json.gz", "trace_diff/test/test.json.gz"}
ALLREDUCE = "tests/data/allreduce-2gpu-torch/rank0.pt.trace.json.gz"  # ours: 2 H200s, see its README
TRAIN = "tests/data/train-2gpu-torch/rank0.pt.trace.json.gz"


def _path(rel: str) -> Path:
    """Our captures are named from the repository root, the public ones from HTA's folder."""
    return REPO / rel if rel.startswith("tests/") else shared_trace(_public(rel))


def _public(rel: str) -> str | None:
    """A public trace's path under shared/traces; None for ours."""
    return None if rel.startswith("tests/") else f"hta/{rel}"


@lru_cache(maxsize=None)
def _json(rel: str) -> dict:
    """The trace as plain json, floats as Decimal so that timestamps stay exact."""
    with gzip.open(_path(rel), "rt") as f:
        return json.load(f, parse_float=Decimal)


@lru_cache(maxsize=None)
def _profile(rel: str) -> tracelab.Profile:
    return chrome.read(_path(rel))


def _ns(us: Decimal | int) -> int:
    return int(round(Decimal(us) * 1000))


def _events(rel: str, cat: str) -> list[dict]:
    return [e for e in _json(rel)["traceEvents"] if e.get("cat") == cat]


@slow_after(1)
@pytest.mark.parametrize("rel", slow_beyond(GPU_TRACES + CPU_TRACES, set(GPU_TRACES + CPU_TRACES) - TRACE_DIFF, _public))
@pytest.mark.parametrize("cat", list(KIND_OF_CAT))
def test_count_and_total_ns_equal_json_sums(rel: str, cat: str) -> None:
    events = _events(rel, cat)
    rows = _profile(rel).events.query("kind == @KIND_OF_CAT[@cat]")
    assert len(rows) == len(events)
    assert int(rows["dur_ns"].sum()) == sum(round(float(e["dur"]) * 1000) for e in events)


@pytest.mark.parametrize("rel", slow_beyond(GPU_TRACES, set(GPU_TRACES) - TRACE_DIFF, _public))
def test_every_row_matches_one_event_to_the_ns(rel: str) -> None:
    """Rows and JSON events agree as multisets of (kind, device, stream, absolute start, dur, name);
    the ns-resolution trace has epoch-microsecond stamps that a float cannot hold."""
    trace, prof = _json(rel), _profile(rel)
    base_ns = trace.get("baseTimeNanoseconds", 0)
    expected = Counter((KIND_OF_CAT[e["cat"]], e["pid"], e["tid"], _ns(e["ts"]), _ns(e["dur"]), e["name"])
                       for e in trace["traceEvents"] if e.get("cat") in KIND_OF_CAT)
    df = prof.events
    origin = prof.meta.trace_start_epoch_ns - base_ns
    got = Counter(zip(df["kind"].astype(str), df["device"].tolist(), df["stream"].tolist(),
                      (df["start_ns"] + origin).tolist(), df["dur_ns"].tolist(), df["name"].tolist()))
    assert got == expected


@pytest.mark.parametrize("rel, epoch_from", [
    on_shared("ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "absolute ts",  # old format
              relpath=_public("ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")),
    pytest.param("trace_diff/control/control.json.gz", "absolute ts", marks=pytest.mark.slow),
    on_shared(NCCL, "baseTimeNanoseconds", relpath=_public(NCCL)),  # new format
    ("amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "baseTimeNanoseconds"),
])
def test_start_times_old_and_new_format(rel: str, epoch_from: str) -> None:
    trace, prof = _json(rel), _profile(rel)
    assert ("baseTimeNanoseconds" in trace) == (epoch_from == "baseTimeNanoseconds")
    first_ns = min(_ns(e["ts"]) for e in trace["traceEvents"] if e.get("cat") in KIND_OF_CAT)
    assert prof.meta.trace_start_epoch_ns == trace.get("baseTimeNanoseconds", 0) + first_ns
    assert 1.6e18 < prof.meta.trace_start_epoch_ns < 1.8e18  # 2020-09 .. 2027-01
    df = prof.events
    assert df["start_ns"].min() == 0 and (df["dur_ns"] >= 0).all()
    assert df["start_ns"].max() + df["dur_ns"].max() < 60e9  # a profile of seconds, not days


# ---- scope: the user regions around the launch ---------------------------------------

STEP = re.compile(DEFAULT_STEP_PATTERN, re.IGNORECASE)


def _ranges_by_thread(events: list[dict], cat: str) -> dict[tuple, list[tuple[int, int, str]]]:
    """(pid, tid) -> (start ns, end ns, name) of the annotations of `cat`, ProfilerStep#N left out."""
    out: dict[tuple, list] = {}
    for e in events:
        if e.get("cat") == cat and not STEP.fullmatch(e["name"]):
            out.setdefault((e["pid"], e["tid"]), []).append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), e["name"]))
    return out


def _enclosing(ranges: list[tuple[int, int, str]], at_ns: int) -> str:
    holding = sorted((start, -end, name) for start, end, name in ranges if start <= at_ns < end)
    return "/".join(name for _, _, name in holding)


def _main_thread(cpu: dict[tuple, list], pid) -> object:
    """The thread of pid whose ranges add up to the most time (the first of equals)."""
    totals = {tid: sum(end - start for start, end, _ in r) for (p, tid), r in cpu.items() if p == pid}
    return max(totals, key=totals.get) if totals else None


def _brute_force_scopes(events: list[dict]) -> Counter:
    """(absolute start ns, stream, scope) of every GPU row: the CPU user_annotations around
    its launch (the first non-GPU "X" event with its correlation) on the launch's thread,
    nested inside those of its process's main thread when launched from another thread;
    without a launch, or without any CPU user_annotation, the gpu_user_annotations around
    its own start on its device and stream."""
    cpu, gpu = _ranges_by_thread(events, "user_annotation"), _ranges_by_thread(events, "gpu_user_annotation")
    launches: dict[int, dict] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") not in KIND_OF_CAT and "correlation" in e.get("args", {}):
            launches.setdefault(e["args"]["correlation"], e)
    scopes = Counter()
    for e in events:
        if e.get("cat") not in KIND_OF_CAT:
            continue
        launch = launches.get(e["args"].get("correlation"))
        if cpu and launch:
            scope = _enclosing(cpu.get((launch["pid"], launch["tid"]), []), _ns(launch["ts"]))
            main = _main_thread(cpu, launch["pid"])
            if main is not None and main != launch["tid"]:
                outer = _enclosing(cpu[(launch["pid"], main)], _ns(launch["ts"]))
                scope = "/".join(s for s in (outer, scope) if s)
        else:
            scope = _enclosing(gpu.get((e["pid"], e["tid"]), []), _ns(e["ts"]))
        scopes[(_ns(e["ts"]), e["tid"], scope)] += 1
    return scopes


def _got_scopes(prof: tracelab.Profile, trace: dict) -> Counter:
    origin = prof.meta.trace_start_epoch_ns - trace.get("baseTimeNanoseconds", 0)
    df = prof.events
    return Counter(zip((df["start_ns"] + origin).tolist(), df["stream"].tolist(), df["scope"]))


SCOPE_TRACES = [NCCL, "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
                "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "trace_filter/sampled_rank-0.json.gz",
                "trace_diff/test/test.json.gz",  # 614 rows whose launch is not in the trace
                "triton_example/triton_example.json.gz",  # launched by cuLaunchKernel (cuda_driver)
                ALLREDUCE, TRAIN]


@pytest.mark.parametrize("rel", slow_beyond(SCOPE_TRACES, set(SCOPE_TRACES) - TRACE_DIFF - {TRAIN}, _public))  # ours: ALLREDUCE
def test_scope_is_the_user_regions_around_the_launch(rel: str) -> None:
    events = _json(rel)["traceEvents"]
    assert any(e.get("cat") == "user_annotation" for e in events)
    expected = _brute_force_scopes(events)
    assert _got_scopes(_profile(rel), _json(rel)) == expected
    if rel != "triton_example/triton_example.json.gz":  # its one kernel is in no region
        assert {scope for _, _, scope in expected} - {""}


def test_nccl_kernels_are_inside_the_workload_region() -> None:
    """Kineto's GPU copies of the ranges stop at the innermost one (`nccl:all_reduce`); at launch
    the workload region holds the call too. Per size 3 warm-up calls run outside the region,
    5 timed ones inside (README)."""
    df = _profile(ALLREDUCE).events
    nccl = df[df["name"].str.startswith("ncclDevKernel")]
    assert nccl["scope"].str.endswith("nccl:all_reduce").all()
    timed = nccl[nccl["scope"].str.startswith("allreduce_nccl_")]
    assert Counter(timed["scope"]) == {"allreduce_nccl_4096/nccl:all_reduce": 5,
                                       "allreduce_nccl_1048576/nccl:all_reduce": 5}
    assert Counter(nccl["scope"])["nccl:all_reduce"] == 2 * 3
    gpu_annotation_scopes = {e["name"] for e in _events(ALLREDUCE, "gpu_user_annotation")}
    assert not any(name.startswith("allreduce_nccl_") for name in gpu_annotation_scopes)


def test_optimizer_kernels_carry_the_optimizer_region() -> None:
    df = _profile(TRAIN).events
    steps = sum(e["name"] == "optimizer" for e in _events(TRAIN, "user_annotation"))
    in_optimizer = df[df["scope"].str.split("/").str[0] == "optimizer"]
    assert steps == 2 and len(in_optimizer) > 0
    assert set(in_optimizer["scope"]) == {"optimizer/Optimizer.step#AdamW.step"}
    assert not any(e["name"] == "optimizer" for e in _events(TRAIN, "gpu_user_annotation"))


WORKLOAD_REGION = re.compile(r"(allreduce_|ag-matmul_|matmul-rs_).*|forward|backward|grad_sync|optimizer")


@pytest.mark.parametrize("rank", [0, pytest.param(1, marks=pytest.mark.slow)])  # rank 1, the rule again: -m slow
@pytest.mark.parametrize("workload", ["allreduce", "train", "overlap"])
def test_workload_regions_hold_the_same_rows_as_under_nsys(workload: str, rank: int) -> None:
    """Scope by launch, as nsys does with NVTX: the outermost workload region of every GPU row
    counts the same in the torch and the nsys capture of one run of the same command."""
    def regions(path: Path) -> Counter:
        df = tracelab.load(path).events
        outer = df["scope"].str.split("/").str[0]
        return Counter(outer[outer.map(lambda s: WORKLOAD_REGION.fullmatch(s) is not None)])

    data = REPO / "tests" / "data"
    torch_regions = regions(data / f"{workload}-2gpu-torch" / f"rank{rank}.pt.trace.json.gz")
    assert torch_regions and torch_regions == regions(data / f"{workload}-2gpu-nsys" / f"rank{rank}.sqlite")


@pytest.mark.shared
def test_profiler_steps_are_left_out() -> None:
    """ProfilerStep#N holds nearly every launch; kept, it would split each scope step by step."""
    rel = "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    steps = [e for e in _events(rel, "user_annotation") if STEP.fullmatch(e["name"])]
    assert len(steps) == 5
    scopes = set(_profile(rel).events["scope"])
    assert not any("ProfilerStep" in s for s in scopes)
    assert "## optimizer ##/Optimizer.step#SGD.step" in scopes  # nested, outermost first


def _write_without(rel: str, drop, path: Path) -> dict:
    """Write the trace less the events `drop` picks; return it as read back (Decimal times)."""
    trace = json.loads(gzip.decompress(_path(rel).read_bytes()))  # floats: json writes them back as read
    trace["traceEvents"] = [e for e in trace["traceEvents"] if not drop(e)]
    path.write_text(json.dumps(trace))
    return json.loads(path.read_text(), parse_float=Decimal)


@lru_cache(maxsize=None)
def _nccl_correlations(rel: str) -> frozenset[int]:
    return frozenset(e["args"]["correlation"] for e in _events(rel, "kernel") if e["name"].startswith("ncclDevKernel"))


FALLBACKS = {  # a changed capture -> the scope expected of its NCCL kernels
    "no launch for the NCCL kernels": (
        lambda e: e.get("cat") in ("cuda_runtime", "cuda_driver")
        and e.get("args", {}).get("correlation") in _nccl_correlations(ALLREDUCE), {"nccl:all_reduce"}),
    "no CPU annotations": (lambda e: e.get("cat") == "user_annotation", {"nccl:all_reduce"}),
    "no annotations at all": (lambda e: "user_annotation" in str(e.get("cat")), {""}),
}


@pytest.mark.parametrize("case", list(FALLBACKS))
def test_rows_without_a_launch_or_cpu_annotation_fall_back_to_gpu_annotations(tmp_path: Path, case: str) -> None:
    drop, nccl_scopes = FALLBACKS[case]
    trace = _write_without(ALLREDUCE, drop, path := tmp_path / "rank0.pt.trace.json")
    prof = chrome.read(path)
    assert _got_scopes(prof, trace) == _brute_force_scopes(trace["traceEvents"])
    df = prof.events
    assert set(df.loc[df["name"].str.startswith("ncclDevKernel"), "scope"]) == nccl_scopes


def test_nested_annotations_join_outermost_first() -> None:
    ranges = {"pid": np.array([0, 0, 0]), "tid": np.array([7, 7, 7]),
              "start_ns": np.array([0, 10, 50]), "end_ns": np.array([100, 40, 60]),
              "name": ["step", "fwd", "bwd"]}
    rows = np.array([5, 10, 39, 40, 55, 100])
    got = chrome.scopes(np.zeros(6, int), np.full(6, 7), rows, ranges)
    assert got.tolist() == ["step", "step/fwd", "step/fwd", "step", "step/bwd", ""]
    other_thread = chrome.scopes(np.zeros(1, int), np.full(1, 8), np.array([20]), ranges)
    assert other_thread.tolist() == [""]


@pytest.mark.parametrize("rows, launches, expected", [
    ([5, 7, 9], [9, 5], [1, -1, 0]),
    ([5, 5], [3, 5, 5], [1, 1]),  # an id twice: the first
    ([-1, 4], [-1, 4], [-1, 1]),  # -1 = no id: never a match
    ([1, 2], [], [-1, -1]),
])
def test_launch_by_correlation(rows: list[int], launches: list[int], expected: list[int]) -> None:
    got = chrome.launch_index(np.array(rows, dtype=np.int64), np.array(launches, dtype=np.int64))
    assert got.tolist() == expected


@pytest.mark.shared
def test_nccl_kernels_carry_msg_bytes() -> None:
    size = {"Float": 4, "Long": 8}
    expected = Counter((_ns(e["ts"]), max(e["args"]["In msg nelems"], e["args"]["Out msg nelems"])
                        * size[e["args"]["dtype"]])
                       for e in _events(NCCL, "kernel") if "Collective name" in e["args"])
    assert len(expected) == 21
    prof = _profile(NCCL)
    df = prof.events[prof.events["msg_bytes"].notna()]
    origin = prof.meta.trace_start_epoch_ns - _json(NCCL)["baseTimeNanoseconds"]
    assert Counter(zip((df["start_ns"] + origin).tolist(), df["msg_bytes"].astype(int).tolist())) == expected
    assert (classify.classified(df)["op_class"] == "communication").all()


@pytest.mark.parametrize("labels, fallback, expected", [
    ([0, 7, 7], None, [0, 7, 7]),
    (["stream 7", "stream 12 ", 3], None, [7, 12, 3]),
    (["stream 7", "stream 8"], [3, None], [3, 8]),  # args' integer first, then the label's
    (["PyTorch Profiler", "Spans", "stream 2"], None, [-1, -2, 2]),  # stable: -1 - place in sorted labels
])
def test_integer_ids_from_labels(labels: list, fallback: list | None, expected: list) -> None:
    assert chrome.to_ints(labels, fallback).tolist() == expected


def test_amd_trace_with_string_streams(tmp_path: Path) -> None:
    """String streams, and GPU annotations as the scope (the CPU ones taken out)."""
    rel = "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    trace = json.loads(gzip.decompress(_path(rel).read_bytes()))
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("cat") != "user_annotation"]
    expected = _brute_force_scopes([e for e in _json(rel)["traceEvents"] if e.get("cat") != "user_annotation"])
    for e in trace["traceEvents"]:
        if e.get("cat") in (*KIND_OF_CAT, "gpu_user_annotation"):
            e["tid"] = f"stream {e['tid']} "
            e.get("args", {}).pop("stream", None)
    (path := tmp_path / "amd_string_streams.json").write_text(json.dumps(trace))
    df = chrome.read(path).events
    assert str(df["stream"].dtype) == "Int64" and set(df["stream"]) == {0}
    assert set(df["device"]) == {2}
    assert Counter(df["scope"]) == Counter(s for (_, _, s), n in expected.items() for _ in range(n))
    assert Counter(df["scope"])["Optimizer.step#SGD.step"] == 1


def _top_level_brute_force(ops: list[dict]) -> list[dict]:
    start = np.array([_ns(e["ts"]) for e in ops])
    end = start + np.array([_ns(e["dur"]) for e in ops])
    thread = np.array([hash((e["pid"], e["tid"])) for e in ops])
    top = []
    for i, e in enumerate(ops):
        inside = (thread == thread[i]) & (start <= start[i]) & (start[i] < end)
        inside &= (start < start[i]) | (end > end[i]) | (np.arange(len(ops)) < i)  # earlier twin holds it
        inside[i] = False
        if not inside.any():
            top.append(e)
    return top


@pytest.mark.parametrize("rel", CPU_TRACES)
def test_cpu_only_trace_gives_top_level_cpu_ops(rel: str) -> None:
    """Top-level CPU operators, and the gloo collectives as gloo's worker threads (threads
    without operators) ran them (user_annotation gloo:all_reduce)."""
    op_threads = {e["tid"] for e in _events(rel, "cpu_op")}
    top = _top_level_brute_force(_events(rel, "cpu_op")) + [
        e for e in _events(rel, "user_annotation") if re.fullmatch(r"(gloo|mpi|ucc):\w+", e["name"])
        and e["tid"] not in op_threads]
    df = _profile(rel).events
    assert set(df["kind"]) == {"cpu_op"} and set(df["device"]) == {-1}
    assert len(df) == len(top) and 0 < len(top) <= len(_events(rel, "cpu_op")) + len(_events(rel, "user_annotation"))
    assert int(df["dur_ns"].sum()) == sum(_ns(e["dur"]) for e in top)
    assert Counter(df["name"]) == Counter(e["name"] for e in top)


@pytest.mark.shared
def test_rank_comes_from_the_file_or_from_elsewhere(tmp_path: Path) -> None:
    assert _profile(NCCL).meta.rank == 0 and _profile(NCCL).meta.world_size == 2
    path = _path("rank_unavailable/rank_not_found.json.gz")
    alone = chrome.read(path)
    assert alone.meta.rank is None and set(alone.events["rank"]) == {-1}
    given = tracelab.load(path, rank=5)
    assert given.meta.rank == 5 and set(given.events["rank"]) == {5}
    a, b = tmp_path / "first.json.gz", tmp_path / "second.json.gz"
    shutil.copyfile(path, a), shutil.copyfile(path, b)
    with pytest.raises(RankError, match="first.json.gz|second.json.gz"):
        tracelab.load_many([a, b], workers=1)
    both = tracelab.load_many([a, b], ranks={str(a): 0, str(b): 1}, workers=1)
    assert [p.meta.rank for p in both] == [0, 1]


@pytest.mark.shared
def test_plain_json_reads_like_gzip(tmp_path: Path) -> None:
    (plain := tmp_path / "rank0.pt.trace.json").write_bytes(gzip.decompress(_path(NCCL).read_bytes()))
    assert tracelab.detect(plain) == "chrome"
    df, expected = chrome.read(plain).events, _profile(NCCL).events
    assert df.equals(expected)


def _trace_json(events: list[dict], **top) -> bytes:
    return json.dumps({"schemaVersion": 1, **top, "traceEvents": events}).encode()


KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2.0}


def test_pytorch_1_8_category_names(tmp_path: Path) -> None:
    events = [{**KERNEL, "cat": "Kernel", "ts": 10.0, "dur": 2.5}, {**KERNEL, "cat": "Memcpy", "ts": 20.001},
              {**KERNEL, "cat": "Runtime", "ts": 9.0}]
    (path := tmp_path / "old.json").write_bytes(_trace_json(events))
    df = chrome.read(path).events
    assert df["kind"].astype(str).tolist() == ["kernel", "memcpy"]
    assert df["start_ns"].tolist() == [0, 10_001] and df["dur_ns"].tolist() == [2500, 2000]


# ---- broken inputs ----------------------------------------------------------

GOOD = "trace_filter/sampled_rank-0.json.gz"
BROKEN = {
    "empty.json": (lambda: b"", "empty file"),
    "blank.json": (lambda: b" \n\t\n", "empty file"),
    "truncated.json": (lambda: gzip.decompress(_path(GOOD).read_bytes())[:300_000], "not valid JSON"),
    "truncated.json.gz": (lambda: _path(GOOD).read_bytes()[:40_000], "truncated gzip"),
    "random.json": (lambda: random.Random(7).randbytes(4096), "not valid JSON"),
    "config.json": (lambda: b'{"model": "llama", "layers": 32}', "not a Kineto trace"),
    "execution_trace.json": (lambda: b'{\n  "schema": "1.0.1", "pid": 563677, "time": "2023-07-14 11:53:07",\n  "nodes": [\n'
                                     b'    {"name": "[pytorch|profiler|execution_trace|thread]", "id": 2}\n  ]\n}',
                             "a PyTorch execution trace .* read the Kineto trace"),
    "schema_then_events.json": (lambda: b'{"schema": "x", "notnodes": [], "traceEvents": {"ph": "X"}}',
                                "not a Kineto trace"),  # no `nodes` list: not taken for an execution trace
    "rocprofv3.json": (lambda: b'{"rocprofiler-sdk-tool": [{"metadata": {"pid": 908}, "agents": [], '
                               b'"buffer_records": {"kernel_dispatch": []}}]}',
                       "a rocprofiler-sdk JSON .* which tracelab does not read"),
    "rocprof_key_not_first.json": (lambda: b'{"traceEvents": 7, "rocprofiler-sdk-tool": []}',
                                   "not a Kineto trace"),  # not rocprofv3's head: refused as any other JSON
    "events_not_a_list.json": (lambda: b'{"traceEvents": {"ph": "X"}}', "not a Kineto trace"),
    "a_list.json": (lambda: b"[1, 2, 3]", "not a Kineto trace"),
    "string_dur.json": (lambda: _trace_json([{**KERNEL, "dur": "2.0"}]), "unexpected event"),
    "no_ts.json": (lambda: _trace_json([{**KERNEL, "ts": None}]), "unexpected event"),
    "negative_dur.json": (lambda: _trace_json([{**KERNEL, "dur": -1.0}]), "negative dur"),
    "annotations_only.json": (lambda: _trace_json([{**KERNEL, "cat": "user_annotation"}]),
                              "no GPU activity .* and no CPU operators"),
    "launch_without_ts.json": (lambda: _trace_json([KERNEL, {**KERNEL, "cat": "cuda_runtime", "ts": None}]),
                               "unexpected event"),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_input_raises_naming_the_file_and_is_left_unchanged(tmp_path: Path, name: str) -> None:
    make, reason = BROKEN[name]
    (path := tmp_path / name).write_bytes(make())
    before = hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns
    with pytest.raises(TraceFormatError, match=reason) as info:
        chrome.read(path)
    assert info.value.where == str(path) and str(path) in str(info.value)
    assert (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns) == before


def test_good_input_is_left_unchanged() -> None:
    before = hashlib.sha256(_path(GOOD).read_bytes()).hexdigest(), _path(GOOD).stat().st_mtime_ns
    assert len(chrome.read(_path(GOOD)).events) == 1204
    assert (hashlib.sha256(_path(GOOD).read_bytes()).hexdigest(), _path(GOOD).stat().st_mtime_ns) == before
