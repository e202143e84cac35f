"""Kernels tracelab does not class that run on a stream of communication kernels only are said to
be possibly communication (a note naming them, their stream and time), never reclassed silently;
a stream that also runs named compute, or no unknown kernel beside collectives, gets no note."""
from __future__ import annotations

import json
from collections import defaultdict

import tracelab
from tracelab.core.classify import canonical, classify_one

from helpers import run_cli_output, strict_json

ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
COMM_STREAM, COMPUTE_STREAM = 21, 7


def _kernel(name: str, stream: int, ts_us: float, dur_us: float) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts_us, "dur": dur_us,
            "args": {"device": 0, "stream": stream, "correlation": 0}}


def _trace(path, strangers: bool):
    """Collectives on stream 21 (with two unknown kernels beside them when `strangers`); a gemm and an
    unknown kernel on stream 7 with one collective: a compute stream, whose unknown kernel is no
    communication's."""
    events = [_kernel(ALLREDUCE, COMM_STREAM, 100.0, 40.5), _kernel(ALLREDUCE, COMM_STREAM, 300.0, 41.25),
              _kernel("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", COMPUTE_STREAM, 90.0, 120.0),
              _kernel("custom_helper_kernel", COMPUTE_STREAM, 220.0, 3.5),
              _kernel(ALLREDUCE, COMPUTE_STREAM, 500.0, 8.0)]
    if strangers:
        events += [_kernel("custom_a2a_kernel", COMM_STREAM, 150.0, 12.125),
                   _kernel("custom_a2a_kernel", COMM_STREAM, 350.0, 11.75),
                   _kernel("my_exchange_kernel", COMM_STREAM, 400.0, 2.5)]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def _unclassed_on_comm_streams(path) -> dict[int, dict[str, int]]:
    """Straight from the JSON: per stream whose classed kernels are all communication, the ns of each
    kernel no pattern classes."""
    by_stream = defaultdict(list)
    for e in json.loads(path.read_text())["traceEvents"]:
        by_stream[e["args"]["stream"]].append((classify_one(canonical(e["name"])), canonical(e["name"]),
                                               round(e["dur"] * 1000)))
    out = {}
    for stream, rows in by_stream.items():
        classes = {c for c, _, _ in rows}
        if "communication" in classes and "other" in classes and classes <= {"communication", "other"}:
            ns = defaultdict(int)
            for c, name, dur_ns in rows:
                if c == "other":
                    ns[name] += dur_ns
            out[stream] = dict(ns)
    return out


def test_unknown_kernels_on_a_communication_stream_are_named(tmp_path):
    path = _trace(tmp_path / "rank0.pt.trace.json", strangers=True)
    truth = _unclassed_on_comm_streams(path)
    assert set(truth) == {COMM_STREAM}
    notes = [n for n in tracelab.load(path).meta.notes if n.code == "comm_stream_strangers"]
    assert len(notes) == 1
    v = notes[0].values
    assert (v["stream"], v["device"], v["kernels"], v["rows"]) == (COMM_STREAM, 0, 2, 3)
    assert v["dur_ns"] == sum(truth[COMM_STREAM].values())
    assert v["names"] == sorted(truth[COMM_STREAM], key=lambda k: -truth[COMM_STREAM][k])
    assert "custom_a2a_kernel, my_exchange_kernel" in notes[0].text and "stream 21" in notes[0].text
    assert f"{v['dur_ns'] / 1e6:,.3f} ms" in notes[0].text


def test_the_note_reaches_the_cli_and_the_classes_stay(tmp_path, capsys):
    path = _trace(tmp_path / "rank0.pt.trace.json", strangers=True)
    status, out, err = run_cli_output(capsys, "breakdown", str(path), "--by", "op_class", "--format", "json")
    assert status == 0
    assert any("run on device 0 stream 21 with only communication kernels" in line for line in err.splitlines())
    by_class = {r["op_class"]: r["total_ns"] for r in strict_json(out)["breakdown"]}
    assert by_class["communication"] == round(40.5 * 1000) + round(41.25 * 1000) + 8000  # not reclassed


def test_no_note_without_unknown_kernels_beside_collectives(tmp_path):
    path = _trace(tmp_path / "rank0.pt.trace.json", strangers=False)
    assert _unclassed_on_comm_streams(path) == {}
    assert not [n for n in tracelab.load(path).meta.notes if n.code == "comm_stream_strangers"]
