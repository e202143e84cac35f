"""The Kineto collectors (parsers/_kineto_columns) against a plain json walk of the same file:
ids, durations and names per event, CPU operators' shapes kept as raw JSON, launch
calls without their args; chunking (pid/tid kept per chunk as int64 or as labels) changes no
frame; `ts` of texts that only look aligned. Truths come from json.loads and Decimal."""
from __future__ import annotations

import gzip
import json
from decimal import Decimal
from functools import lru_cache

import numpy as np
import pytest

from tracelab.parsers._kineto_json import Calls, Ops, array_layout, decode, pick, read_bytes, read_events, ts_ns
from tracelab.parsers import chrome
from tracelab.parsers._kineto import to_ints

from helpers import DATA

SHAPED = DATA / "train-small-1gpu-torch" / "rank0.pt.trace.json.gz"  # record_shapes=True
LAUNCHED = DATA / "train-1gpu-steps-torch" / "rank0.pt.trace.json.gz"  # 1,308 launch calls, a sixth the bytes


def _picked(path, groups, by_runs: bool = True):
    """The collectors as chrome.read fills them (by runs cut from the bytes), or by pick() over msgspec's split."""
    data = read_bytes(path)
    if by_runs:
        assert array_layout(data) is not None  # the runs way is the one tested
        return read_events(path, data, groups)[1]
    return pick(path, data, decode(path, data).traceEvents, groups)


@lru_cache(maxsize=None)
def _events(path) -> tuple[dict, ...]:
    """The file's events by json.loads, once per test process (the walks only read them)."""
    return tuple(json.loads(gzip.decompress(path.read_bytes()))["traceEvents"])


def _walk(path, cats):
    return [e for e in _events(path) if e.get("cat") in cats]


def _int_or_minus_one(value):
    return value if type(value) is int else -1


@pytest.mark.slow
@pytest.mark.parametrize("by_runs", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["runs", "split"])
def test_operators_shapes_ids_and_durations_equal_a_json_walk(by_runs, monkeypatch):
    monkeypatch.setattr("tracelab.parsers._kineto_json.RUN_BYTES", 50_000)
    ops = _picked(SHAPED, [(chrome.CPU_OPS, Ops)], by_runs)[0]
    want = _walk(SHAPED, chrome.CPU_OPS)
    assert ops.size == len(want) > 1000
    assert ops.name == [e["name"] for e in want]
    assert ops.ids("tid").tolist() == [e["tid"] for e in want]
    assert ops.dur_ns.tolist() == [int(Decimal(str(e["dur"])).scaleb(3).to_integral_value()) for e in want]
    assert ops.external_id.tolist() == [_int_or_minus_one(e["args"].get("External id")) for e in want]
    keys = {"dims": "Input Dims", "types": "Input type", "concrete": "Concrete Inputs"}
    shaped = 0
    for i, e in enumerate(want):
        shapes = ops.inputs(i)
        for attr, key in keys.items():
            assert json.loads(bytes(getattr(shapes, attr))) == e["args"].get(key), (i, key)
        assert (shapes.flops, shapes.kernel_flop) == (e["args"].get("flops"), e["args"].get("kernel_flop"))
        shaped += "Input Dims" in e["args"]
    assert shaped > 1000


def test_launch_calls_keep_no_args_but_their_correlation_and_external_id():
    calls = _picked(LAUNCHED, [(chrome.LAUNCHES, Calls)])[0]
    want = _walk(LAUNCHED, chrome.LAUNCHES)
    assert calls.size == len(want) > 1000 and calls.args == []
    assert calls.correlation.tolist() == [_int_or_minus_one(e["args"].get("correlation")) for e in want]
    assert calls.external_id.tolist() == [_int_or_minus_one(e["args"].get("External id")) for e in want]
    assert calls.ids("pid").tolist() == [e["pid"] for e in want]


def _event(i: int, pid, tid, cat: str = "kernel") -> dict:
    return {"ph": "X", "cat": cat, "name": f"k{i % 5}", "pid": pid, "tid": tid, "ts": 1000 + 3 * i, "dur": 1.5 + i,
            "args": {"device": 2, "stream": 9, "correlation": i}}


@pytest.mark.parametrize("chunk", [3, 16, 100_000])
def test_labels_that_are_not_integers_in_some_chunks_give_the_frame_of_one_chunk(tmp_path, monkeypatch, chunk):
    """Kernels whose pid or tid is a string in one stretch of the trace only: per chunk the ids
    are int64 or labels; the device and stream are what _kineto.to_ints gives the whole column
    (a label without an integer: the args' device and stream)."""
    events = [_event(i, "GPU x" if 20 <= i < 30 else 0, "stream y" if 25 <= i < 40 else 7) for i in range(90)]
    events += [{**_event(i, 11, "worker" if i % 4 == 0 else 3, "cuda_runtime"), "name": "cudaDeviceSynchronize"}
               for i in range(90)]  # synchronising calls: in the host frame, with their threads
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events}))
    monkeypatch.setattr("tracelab.parsers._kineto_json.CHUNK_EVENTS", chunk)
    chunked = chrome.read(path)
    events_frame = chunked.events.sort_values("start_ns", kind="stable")
    kernels = [e for e in events if e["cat"] == "kernel"]
    want_device = to_ints([e["pid"] for e in kernels], [e["args"]["device"] for e in kernels])
    want_stream = to_ints([e["tid"] for e in kernels], [e["args"]["stream"] for e in kernels])
    assert events_frame["device"].tolist() == want_device.tolist() and set(want_device.tolist()) == {0, 2}
    assert events_frame["stream"].tolist() == want_stream.tolist() and set(want_stream.tolist()) == {7, 9}
    monkeypatch.setattr("tracelab.parsers._kineto_json.CHUNK_EVENTS", 100_000)
    whole = chrome.read(path)
    assert whole.events.sort_values("start_ns", kind="stable").reset_index(drop=True).equals(
        events_frame.reset_index(drop=True))
    assert whole.host.equals(chunked.host) and (whole.host["tid"] < 0).any()  # "worker": an unnumbered label


def test_ts_of_texts_whose_lengths_add_up_to_a_matrix_are_read_one_by_one():
    texts = [b"123", b"45", b"6789"] * 40  # 9 bytes per 3: a 3 x 3 matrix if the lengths were not checked
    want = [int(Decimal(t.decode()).scaleb(3)) for t in texts]
    assert ts_ns(texts) == want
    assert np.array_equal(ts_ns([b"12.345", b"1.2345"]), [12345, 1234])  # 1.2345 us: 1234.5 ns, half to even
