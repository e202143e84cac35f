"""parsers/chrome.py on every Kineto trace in ../shared/traces/hta, checked against the
JSON read independently here (plain json, exact Decimal timestamps), plus broken inputs."""
from __future__ import annotations

import gzip
import hashlib
import json
import random
import shutil
from collections import Counter
from decimal import Decimal
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

import tracelab
from tracelab.errors import RankError, TraceFormatError
from tracelab.parsers import chrome

HTA = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "hta"
pytestmark = pytest.mark.skipif(not HTA.is_dir(), reason=f"{HTA} is not there")

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


@lru_cache(maxsize=None)
def _json(rel: str) -> dict:
    """The trace as plain json, floats as Decimal so that timestamps stay exact."""
    with gzip.open(HTA / rel, "rt") as f:
        return json.load(f, parse_float=Decimal)


@lru_cache(maxsize=None)
def _profile(rel: str) -> tracelab.Profile:
    return chrome.read(HTA / rel)


def _ns(us: Decimal | int) -> int:
    return int(round(Decimal(us) * 1000))


def _events(rel: str, cat: str) -> list[dict]:
    return [e for e in _json(rel)["traceEvents"] if e.get("cat") == cat]


@pytest.mark.parametrize("rel", GPU_TRACES + CPU_TRACES)
@pytest.mark.parametrize("cat", list(KIND_OF_CAT))
def test_count_and_total_ns_equal_json_sums(rel: str, cat: str) -> None:
    events = _events(rel, cat)
    rows = _profile(rel).events.query("kind == @KIND_OF_CAT[@cat]")
    assert len(rows) == len(events)
    assert int(rows["dur_ns"].sum()) == sum(round(float(e["dur"]) * 1000) for e in events)


@pytest.mark.parametrize("rel", GPU_TRACES)
def test_every_row_matches_one_event_to_the_ns(rel: str) -> None:
    """Rows and JSON events agree as multisets of (kind, device, stream, absolute start, dur, name);
    the ns-resolution trace has epoch-microsecond stamps that a float cannot hold."""
    trace, prof = _json(rel), _profile(rel)
    base_ns = trace.get("baseTimeNanoseconds", 0)
    expected = Counter((KIND_OF_CAT[e["cat"]], e["pid"], e["tid"], _ns(e["ts"]), _ns(e["dur"]), e["name"])
                       for e in trace["traceEvents"] if e.get("cat") in KIND_OF_CAT)
    df = prof.events
    origin = prof.meta["trace_start_epoch_ns"] - base_ns
    got = Counter(zip(df["kind"].astype(str), df["device"].tolist(), df["stream"].tolist(),
                      (df["start_ns"] + origin).tolist(), df["dur_ns"].tolist(), df["name"].tolist()))
    assert got == expected


@pytest.mark.parametrize("rel, epoch_from", [
    ("ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "absolute ts"),  # old format
    ("trace_diff/control/control.json.gz", "absolute ts"),
    (NCCL, "baseTimeNanoseconds"),  # new format
    ("amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "baseTimeNanoseconds"),
])
def test_start_times_old_and_new_format(rel: str, epoch_from: str) -> None:
    trace, prof = _json(rel), _profile(rel)
    assert ("baseTimeNanoseconds" in trace) == (epoch_from == "baseTimeNanoseconds")
    first_ns = min(_ns(e["ts"]) for e in trace["traceEvents"] if e.get("cat") in KIND_OF_CAT)
    assert prof.meta["trace_start_epoch_ns"] == trace.get("baseTimeNanoseconds", 0) + first_ns
    assert 1.6e18 < prof.meta["trace_start_epoch_ns"] < 1.8e18  # 2020-09 .. 2027-01
    df = prof.events
    assert df["start_ns"].min() == 0 and (df["dur_ns"] >= 0).all()
    assert df["start_ns"].max() + df["dur_ns"].max() < 60e9  # a profile of seconds, not days


def _brute_force_scope(kernel: dict, annotations: list[dict]) -> str:
    start = _ns(kernel["ts"])
    holding = [a for a in annotations if (a["pid"], a["tid"]) == (kernel["pid"], kernel["tid"])
               and _ns(a["ts"]) <= start < _ns(a["ts"]) + _ns(a["dur"])]
    holding.sort(key=lambda a: (_ns(a["ts"]), -_ns(a["dur"])))
    return "/".join(a["name"] for a in holding)


@pytest.mark.parametrize("rel", [NCCL, "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
                                 "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"])
def test_scope_is_the_enclosing_annotations_on_the_same_stream(rel: str) -> None:
    annotations = _events(rel, "gpu_user_annotation")
    assert annotations
    expected = Counter((_ns(e["ts"]), e["tid"], _brute_force_scope(e, annotations))
                       for e in _json(rel)["traceEvents"] if e.get("cat") in KIND_OF_CAT)
    prof = _profile(rel)
    origin = prof.meta["trace_start_epoch_ns"] - _json(rel).get("baseTimeNanoseconds", 0)
    df = prof.events
    assert Counter(zip((df["start_ns"] + origin).tolist(), df["stream"].tolist(), df["scope"])) == expected
    assert (df["scope"] != "").any() and (df["scope"] == "").any()


def test_nested_annotations_join_outermost_first() -> None:
    df = _profile("amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz").events
    # ProfilerStep#1 [0, 1031.368 us) holds the first kernels; the optimizer step comes later
    assert df.iloc[0]["scope"] == "ProfilerStep#1"
    ranges = {"device": np.array([0, 0, 0]), "stream": np.array([7, 7, 7]),
              "start_ns": np.array([0, 10, 50]), "end_ns": np.array([100, 40, 60]),
              "name": ["step", "fwd", "bwd"]}
    rows = np.array([5, 10, 39, 40, 55, 100])
    got = chrome.scopes(np.zeros(6, int), np.full(6, 7), rows, ranges)
    assert got.tolist() == ["step", "step/fwd", "step/fwd", "step", "step/bwd", ""]
    other_stream = chrome.scopes(np.zeros(1, int), np.full(1, 8), np.array([20]), ranges)
    assert other_stream.tolist() == [""]


def test_nccl_kernels_carry_msg_bytes() -> None:
    size = {"Float": 4, "Long": 8}
    expected = Counter((_ns(e["ts"]), max(e["args"]["In msg nelems"], e["args"]["Out msg nelems"])
                        * size[e["args"]["dtype"]])
                       for e in _events(NCCL, "kernel") if "Collective name" in e["args"])
    assert len(expected) == 21
    prof = _profile(NCCL)
    df = prof.events[prof.events["msg_bytes"].notna()]
    origin = prof.meta["trace_start_epoch_ns"] - _json(NCCL)["baseTimeNanoseconds"]
    assert Counter(zip((df["start_ns"] + origin).tolist(), df["msg_bytes"].astype(int).tolist())) == expected
    assert (df["op_class"] == "communication").all()


@pytest.mark.parametrize("labels, fallback, expected", [
    ([0, 7, 7], None, [0, 7, 7]),
    (["stream 7", "stream 12 ", 3], None, [7, 12, 3]),
    (["stream 7", "stream 8"], [3, None], [3, 8]),  # args' integer first, then the label's
    (["PyTorch Profiler", "Spans", "stream 2"], None, [-1, -2, 2]),  # stable: -1 - place in sorted labels
])
def test_integer_ids_from_labels(labels: list, fallback: list | None, expected: list) -> None:
    assert chrome.to_ints(labels, fallback).tolist() == expected


def test_amd_trace_with_string_streams(tmp_path: Path) -> None:
    rel = "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    trace = json.loads(gzip.decompress((HTA / rel).read_bytes()))
    for e in trace["traceEvents"]:
        if e.get("cat") in (*KIND_OF_CAT, "gpu_user_annotation"):
            e["tid"] = f"stream {e['tid']} "
            e.get("args", {}).pop("stream", None)
    (path := tmp_path / "amd_string_streams.json").write_text(json.dumps(trace))
    df = chrome.read(path).events
    assert str(df["stream"].dtype) == "Int64" and set(df["stream"]) == {0}
    assert set(df["device"]) == {2} and (df["scope"] != "").sum() == 9
    original = _profile(rel).events
    assert df["scope"].tolist() == original["scope"].tolist()


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
    top = _top_level_brute_force(_events(rel, "cpu_op"))
    df = _profile(rel).events
    assert set(df["kind"]) == {"cpu_op"} and set(df["device"]) == {-1}
    assert len(df) == len(top) and 0 < len(top) <= len(_events(rel, "cpu_op"))
    assert int(df["dur_ns"].sum()) == sum(_ns(e["dur"]) for e in top)
    assert Counter(df["name"]) == Counter(e["name"] for e in top)


def test_rank_comes_from_the_file_or_from_elsewhere(tmp_path: Path) -> None:
    assert _profile(NCCL).meta["rank"] == 0 and _profile(NCCL).meta["world_size"] == 2
    path = HTA / "rank_unavailable/rank_not_found.json.gz"
    alone = chrome.read(path)
    assert alone.meta["rank"] is None and set(alone.events["rank"]) == {-1}
    given = tracelab.load(path, rank=5)
    assert given.meta["rank"] == 5 and set(given.events["rank"]) == {5}
    a, b = tmp_path / "first.json.gz", tmp_path / "second.json.gz"
    shutil.copyfile(path, a), shutil.copyfile(path, b)
    with pytest.raises(RankError, match="first.json.gz|second.json.gz"):
        tracelab.load_many([a, b], workers=1)
    both = tracelab.load_many([a, b], ranks={str(a): 0, str(b): 1}, workers=1)
    assert [p.meta["rank"] for p in both] == [0, 1]


def test_plain_json_reads_like_gzip(tmp_path: Path) -> None:
    (plain := tmp_path / "rank0.pt.trace.json").write_bytes(gzip.decompress((HTA / NCCL).read_bytes()))
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

GOOD = HTA / "trace_filter/sampled_rank-0.json.gz"
BROKEN = {
    "empty.json": (lambda: b"", "empty file"),
    "blank.json": (lambda: b" \n\t\n", "empty file"),
    "truncated.json": (lambda: gzip.decompress(GOOD.read_bytes())[:300_000], "not valid JSON"),
    "truncated.json.gz": (lambda: GOOD.read_bytes()[:40_000], "truncated gzip"),
    "random.json": (lambda: random.Random(7).randbytes(4096), "not valid JSON"),
    "config.json": (lambda: b'{"model": "llama", "layers": 32}', "not a Kineto trace"),
    "events_not_a_list.json": (lambda: b'{"traceEvents": {"ph": "X"}}', "not a Kineto trace"),
    "a_list.json": (lambda: b"[1, 2, 3]", "not a Kineto trace"),
    "string_dur.json": (lambda: _trace_json([{**KERNEL, "dur": "2.0"}]), "unexpected event"),
    "no_ts.json": (lambda: _trace_json([{**KERNEL, "ts": None}]), "unexpected event"),
    "negative_dur.json": (lambda: _trace_json([{**KERNEL, "dur": -1.0}]), "negative dur"),
    "annotations_only.json": (lambda: _trace_json([{**KERNEL, "cat": "user_annotation"}]),
                              "no GPU activity .* and no CPU operators"),
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
    before = hashlib.sha256(GOOD.read_bytes()).hexdigest(), GOOD.stat().st_mtime_ns
    assert len(chrome.read(GOOD).events) == 1204
    assert (hashlib.sha256(GOOD.read_bytes()).hexdigest(), GOOD.stat().st_mtime_ns) == before
