"""Communication recognised by its launch, not only by its name: a kernel whose own args name a
collective, one launched under a communication library's operator or range (record_param_comms,
c10d::*, nccl:*, deep_ep::*, NCCL's NVTX ranges) that no pattern names or that was launched
cooperatively, and a cooperatively launched unknown kernel on a stream of collectives only, are
communication, said in one load note; a copy PyTorch launches inside a collective's operator keeps
its class; a trace where nothing moves gets no note. The truths are recomputed from the JSON and
the SQLite file themselves."""
from __future__ import annotations

import json
import re
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

import tracelab
from tracelab.core.classify import canonical, classify_one

from helpers import run_cli_output, strict_json

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
COMM_STREAM, COMPUTE_STREAM = 21, 7
DATA = Path(__file__).resolve().parent / "data"


def _kernel(name, stream, ts_us, dur_us, corr, ext, **args):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts_us, "dur": dur_us,
            "args": {"device": 0, "stream": stream, "correlation": corr, "External id": ext, **args}}


def _launch(api, ts_us, corr, ext):
    return {"ph": "X", "cat": "cuda_runtime", "name": api, "pid": 10, "tid": 11, "ts": ts_us, "dur": 2.0,
            "args": {"correlation": corr, "External id": ext}}


def _op(name, ts_us, dur_us, ext, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 10, "tid": 11, "ts": ts_us, "dur": dur_us,
            "args": {"External id": ext}}


# (kernel, its stream, the operator around its launch (ext id), its launch API, its own collective arg)
KERNELS = [
    ("custom_a2a_kernel", COMM_STREAM, "record_param_comms", "cudaLaunchKernel", None),  # unknown under a c10d op
    ("CatArrayBatchedCopy", COMPUTE_STREAM, "c10d::allgather_", "cudaLaunchKernel", None),  # a copy: stays memory
    ("exchange_tokens", COMM_STREAM, "aten::mm", "cudaLaunchKernel", "all_to_all"),  # its args name a collective
    ("dispatch", COMM_STREAM, "deep_ep::Buffer::intranode_dispatch", "cudaLaunchKernelExC", None),
    ("reduce_blocks", COMM_STREAM, "c10d::allreduce_", "cudaLaunchKernelExC", None),  # named reduction, cooperative
    ("mystery_kernel", COMM_STREAM, "aten::empty", "cudaLaunchKernelExC", None),  # lone: on a stream of collectives
    ("mystery_kernel2", COMPUTE_STREAM, "aten::empty", "cudaLaunchKernelExC", None),  # lone on a compute stream
    ("ampere_sgemm_128x64_tn", COMPUTE_STREAM, "aten::mm", "cudaLaunchKernel", None),
    (ALLREDUCE, COMM_STREAM, "record_param_comms", "cudaLaunchKernelExC", "allreduce"),
]


def _trace(path: Path, kernels=KERNELS) -> Path:
    events = []
    for i, (name, stream, op, api, collective) in enumerate(kernels):
        ts = 100.0 * (i + 1)
        events += [_op(op, ts, 20.0, i + 1), _launch(api, ts + 5, 1000 + i, i + 1),
                   _kernel(name, stream, ts + 30, 10.0 + i, 1000 + i, i + 1,
                           **({"Collective name": collective} if collective else {}))]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def _by_launch_truth(path: Path) -> dict[str, int]:
    """Straight from the JSON, by the rule written out again: kernel name -> ns of those that move
    to communication."""
    events = json.loads(path.read_text())["traceEvents"]
    op = {e["args"]["External id"]: e["name"] for e in events if e["cat"] == "cpu_op"}
    api = {e["args"]["correlation"]: e["name"] for e in events if e["cat"] == "cuda_runtime"}
    kernels = [e for e in events if e["cat"] == "kernel"]
    named = {e["name"]: classify_one(canonical(e["name"])) for e in kernels}
    under = {e["name"]: re.search(r"^(record_param_comms$|c10d::|nccl:)|deep_ep", op[e["args"]["External id"]])
             is not None or "Collective name" in e["args"] for e in kernels}
    coop = {e["name"]: api[e["args"]["correlation"]] == "cudaLaunchKernelExC" for e in kernels}
    # a kernel whose launch says something, its name not communication already
    candidate = {n: named[n] != "communication" and (under[n] or (coop[n] and named[n] == "other")) for n in named}
    out = {}
    for e in kernels:
        n = e["name"]
        beside = {named[k["name"]] for k in kernels if k["args"]["stream"] == e["args"]["stream"]
                  and not candidate[k["name"]]}
        lone = not under[n] and coop[n] and named[n] == "other" and beside == {"communication"}
        if named[n] != "communication" and ("Collective name" in e["args"] or (under[n] and (named[n] == "other" or coop[n]))
                                            or lone):
            out[n] = round(e["dur"] * 1000)
    return out


def test_kernels_launched_by_a_communication_library_are_communication(tmp_path):
    path = _trace(tmp_path / "rank0.pt.trace.json")
    truth = _by_launch_truth(path)
    assert set(truth) == {"custom_a2a_kernel", "exchange_tokens", "dispatch", "reduce_blocks", "mystery_kernel"}
    p = tracelab.load(path)
    classes = dict(zip(p.events["name"], p.events["op_class"].astype(str)))
    assert {n for n, c in classes.items() if c == "communication"} == set(truth) | {ALLREDUCE}
    assert classes["CatArrayBatchedCopy"] == "memory" and classes["mystery_kernel2"] == "other"
    notes = [n for n in p.meta.notes if n.code == "comm_by_launch"]
    assert len(notes) == 1
    v = notes[0].values
    assert (v["kernels"], v["rows"], v["dur_ns"]) == (len(truth), len(truth), sum(truth.values()))
    assert v["names"] == sorted(truth, key=lambda k: -truth[k])[:3]
    assert f"{sum(truth.values()) / 1e6:,.3f} ms" in notes[0].text
    assert not [n for n in p.meta.notes if n.code == "comm_stream_strangers"]  # the lone one moved, none left


def test_the_caller_s_own_pattern_outranks_the_launch(tmp_path, monkeypatch):
    from tracelab.core import classify

    path = _trace(tmp_path / "rank0.pt.trace.json")
    monkeypatch.setenv("TRACELAB_CACHE", "0")
    classify.add_pattern("^(custom_a2a|exchange)", "elementwise")
    try:
        p = tracelab.load(path)
    finally:
        classify.reset_patterns()
    classes = dict(zip(p.events["name"], p.events["op_class"].astype(str)))
    assert classes["custom_a2a_kernel"] == classes["exchange_tokens"] == "elementwise"  # kept, though launched by c10d
    moved = set(_by_launch_truth(path)) - {"custom_a2a_kernel", "exchange_tokens"}
    assert {n for n, c in classes.items() if c == "communication"} == moved | {ALLREDUCE}
    note = [n for n in p.meta.notes if n.code == "comm_by_launch"][0]
    assert note.values["kernels"] == len(moved)


def test_the_moved_time_reaches_breakdown(tmp_path, capsys):
    path = _trace(tmp_path / "rank0.pt.trace.json")
    truth = _by_launch_truth(path)
    status, out, err = run_cli_output(capsys, "breakdown", str(path), "--by", "op_class", "--format", "json")
    assert status == 0 and "counted as communication by their launch" in err
    by_class = {r["op_class"]: r["total_ns"] for r in strict_json(out)["breakdown"]}
    allreduce_ns = round((10.0 + len(KERNELS) - 1) * 1000)
    assert by_class["communication"] == sum(truth.values()) + allreduce_ns


def test_plain_launches_outside_communication_move_nothing(tmp_path):
    plain = [(n, s, "aten::mm" if op != "record_param_comms" else op, "cudaLaunchKernel", c)
             for n, s, op, _, c in KERNELS if n not in ("exchange_tokens", "custom_a2a_kernel")]
    path = _trace(tmp_path / "rank0.pt.trace.json", plain)
    assert _by_launch_truth(path) == {}
    assert not [n for n in tracelab.load(path).meta.notes if n.code == "comm_by_launch"]


@pytest.mark.parametrize("trace", ["ddp-2gpu-late-torch/rank0.pt.trace.json.gz",
                                   "overlap-2gpu-torch/rank0.pt.trace.json.gz", "ddp-2gpu-late-nsys/rank0.sqlite"])
def test_our_own_traces_get_no_such_note(trace):
    assert not [n for n in tracelab.load(DATA / trace).meta.notes if n.code == "comm_by_launch"]


NSYS = DATA / "ddp-2gpu-late-nsys" / "rank0.sqlite"


def _nsys_built(path: Path) -> Path:
    """The ddp capture (whose NCCL opened its own NVTX range, ncclAllReduce, around each launch) with two
    of its all-reduce kernels renamed to names no pattern knows: the first launched by cuLaunchKernelEx
    on the collectives' stream, its range taken away; the second launched by a plain cudaLaunchKernel,
    its range kept."""
    path.write_bytes(NSYS.read_bytes())
    with closing(sqlite3.connect(path)) as con, con:
        rows = con.execute("SELECT k.rowid, k.correlationId, k.globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                           "JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE 'ncclDevKernel%' "
                           "ORDER BY k.start LIMIT 2").fetchall()
        top = con.execute("SELECT max(id) FROM StringIds").fetchone()[0]
        con.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)",
                        [(top + 1, "peer_exchange_kernel"), (top + 2, "ring_step_kernel"), (top + 3, "cudaLaunchKernel")])
        for (rowid, _, _), name in zip(rows, (top + 1, top + 2)):
            con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = ?, shortName = ? WHERE rowid = ?",
                        (name, name, rowid))
        call = "FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId = ? AND (globalTid >> 24) = (? >> 24)"
        tid, start = con.execute(f"SELECT globalTid, start {call}", rows[0][1:]).fetchone()
        con.execute("DELETE FROM NVTX_EVENTS WHERE globalTid = ? AND start <= ? AND end > ?", (tid, start, start))
        con.execute(f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = ? WHERE rowid IN (SELECT rowid {call})",
                    (top + 3, *rows[1][1:]))
    return path


def _nsys_truth(path: Path) -> dict[str, tuple[int, str, bool]]:
    """Straight from the SQLite, per renamed kernel: its ns, its launch call's name, and whether an
    NVTX range named nccl* was open on the launching thread at the call."""
    with closing(sqlite3.connect(path)) as con:
        return {name: (ns, api, bool(ranges)) for name, ns, api, ranges in con.execute(
            "SELECT s.value, k.end - k.start, c.value, (SELECT count(*) FROM NVTX_EVENTS n LEFT JOIN StringIds t "
            "ON t.id = n.textId WHERE n.globalTid = r.globalTid AND n.start <= r.start AND n.end > r.start "
            "AND COALESCE(n.text, t.value) LIKE 'nccl%') FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
            "ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24) "
            "JOIN StringIds c ON c.id = r.nameId WHERE s.value IN ('peer_exchange_kernel', 'ring_step_kernel')")}


def test_nsys_kernels_launched_by_nccl_are_communication(tmp_path):
    path = _nsys_built(tmp_path / "rank0.sqlite")
    truth = _nsys_truth(path)
    assert truth["peer_exchange_kernel"][1:] == ("cuLaunchKernelEx", False)  # cooperative, on NCCL's stream alone
    assert truth["ring_step_kernel"][1:] == ("cudaLaunchKernel", True)  # inside NCCL's own range
    assert all(classify_one(canonical(k)) == "other" for k in truth)
    p = tracelab.load(path)
    moved = p.events[p.events["name"].isin(list(truth))]
    assert (moved["op_class"] == "communication").all() and len(moved) == 2
    (note,) = [n for n in p.meta.notes if n.code == "comm_by_launch"]
    assert (note.values["kernels"], note.values["dur_ns"]) == (2, sum(ns for ns, _, _ in truth.values()))
    assert set(note.values["contexts"]) == {"ncclAllReduce", "a cooperative launch on a stream of communication only"}
