"""A dependency names its cause: GPU idle with the next op queued on a stream that the host made
wait (cudaStreamWaitEvent) is dependency idle, and idle's table, JSON and finding name the waiting
stream, the stream and kernel that ended just before the gap, and the wait call; without such a call
in the trace the same gap is no dependency (other: unexplained). The truths are recomputed from the
Kineto JSON itself."""
from __future__ import annotations

import json
from pathlib import Path

from helpers import run_cli_output, strict_json

COMPUTE, SIDE = 7, 8


def _trace(path: Path, wait: bool) -> Path:
    """A gemm on stream 7, an event recorded after it, stream 8 made to wait on the event, then an
    elementwise kernel on stream 8, queued long before it starts (us)."""
    def kernel(name, stream, ts, dur, corr):
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                "args": {"device": 0, "stream": stream, "correlation": corr}}

    def call(name, ts, corr, dur=5):
        return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 10, "tid": 11, "ts": ts, "dur": dur,
                "args": {"correlation": corr}}

    events = [call("cudaLaunchKernel", 50, 1), kernel("ampere_sgemm_128x64_tn", COMPUTE, 100, 100, 1),
              call("cudaEventRecord", 60, 2), call("cudaLaunchKernel", 80, 4),
              kernel("vectorized_elementwise_kernel", SIDE, 500, 50, 4),
              call("cudaLaunchKernel", 700, 5), kernel("ampere_sgemm_128x64_tn", COMPUTE, 720, 30, 5)]
    if wait:
        events.append(call("cudaStreamWaitEvent", 70, 3))
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def _truth(path: Path) -> dict:
    """Straight from the JSON: the gaps whose next kernel's launch returned before the gap began and
    whose own stream ran nothing before it, each with the stream of the kernel that ended last
    before it, and whether a cudaStreamWaitEvent started before that kernel's launch."""
    events = json.loads(path.read_text())["traceEvents"]
    launch = {e["args"]["correlation"]: e for e in events if e["cat"] == "cuda_runtime"}
    kernels = sorted((e for e in events if e["cat"] == "kernel"), key=lambda e: e["ts"])
    waits = [e["ts"] for e in events if e["name"] == "cudaStreamWaitEvent"]
    out = []
    for i, k in enumerate(kernels[1:], 1):
        last = max(kernels[:i], key=lambda e: e["ts"] + e["dur"])
        g0, call = last["ts"] + last["dur"], launch[k["args"]["correlation"]]
        own_before = [e for e in kernels[:i] if e["args"]["stream"] == k["args"]["stream"]]
        if k["ts"] > g0 and call["ts"] + call["dur"] <= g0 and not own_before:
            out.append({"stream": k["args"]["stream"], "waited_on_stream": last["args"]["stream"],
                        "dependency_ns": round((k["ts"] - g0) * 1000),
                        "waited": any(w <= call["ts"] for w in waits)})
    return out


def test_a_dependency_names_the_stream_it_waited_on(tmp_path, capsys):
    path = _trace(tmp_path / "rank0.pt.trace.json", wait=True)
    truth = _truth(path)
    assert len(truth) == 1 and truth[0]["waited"]
    status, out, _ = run_cli_output(capsys, "idle", str(path), "--format", "json")
    assert status == 0
    doc = strict_json(out)
    (wait,) = doc["waits"]
    assert (wait["stream"], wait["waited_on_stream"], wait["dependency_ns"], wait["gaps"]) == (
        truth[0]["stream"], truth[0]["waited_on_stream"], truth[0]["dependency_ns"], 1)
    assert wait["wait_call"] == "cudaStreamWaitEvent" and wait["waited_on_kernel"] == "ampere_sgemm_128x64_tn"
    assert doc["steps"][0]["idle_dependency_ns"] == truth[0]["dependency_ns"]


def test_the_table_and_the_finding_say_it(tmp_path, capsys):
    path = _trace(tmp_path / "rank0.pt.trace.json", wait=True)
    truth = _truth(path)[0]
    status, out, _ = run_cli_output(capsys, "idle", str(path))
    assert status == 0 and "what the dependency idle waited on" in out and "cudaStreamWaitEvent" in out
    finding = " ".join(out.split("findings:", 1)[1].split())  # the finding's lines, wrapping undone
    assert (f"stream {truth['stream']} waiting, by cudaStreamWaitEvent, on stream {truth['waited_on_stream']} "
            f"after its ampere_sgemm_128x64_tn: {truth['dependency_ns'] / 1e6:,.3f} ms in 1 gap") in finding


def test_without_a_wait_call_the_gap_is_no_dependency(tmp_path, capsys):
    path = _trace(tmp_path / "rank0.pt.trace.json", wait=False)
    truth = _truth(path)
    assert len(truth) == 1 and not truth[0]["waited"]
    status, out, _ = run_cli_output(capsys, "idle", str(path), "--format", "json")
    doc = strict_json(out)
    assert doc["waits"] == [] and doc["steps"][0]["idle_dependency_ns"] == 0
    assert doc["steps"][0]["idle_other_ns"] >= truth[0]["dependency_ns"]
