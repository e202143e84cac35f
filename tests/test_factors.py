"""`tracelab factors` (tracelab/run/factors.py, reports/whatif/factor_products.py,
tracelab/ingest/kineto_leaves.py): the products of real traces and their leaves' shapes against
the raw JSON's Input Dims, each product's change, broken inputs refused in one line beside good
ones, and the command end to end on a tiny CPU trace, its file read back by whatif."""
from __future__ import annotations

import collections
import functools
import gzip
import json
from pathlib import Path

import pytest

import tracelab
from tracelab.ingest.kineto_leaves import LEAVES, leaves_of_rows
from tracelab.reports.whatif import factor_products as fp
from tracelab.reports.whatif.bf16_factors import FORMAT

from helpers import DATA, run_cli_output, strict_json, slow_after

TINY = DATA / "train-tiny-cpu-torch"  # 66 products of 15 small shapes: the whole command runs in a second
CPU_TRACES = [TINY / "rank0.pt.trace.json.gz", DATA / "train-2cpu-memory-torch" / "rank1.pt.trace.json.gz"]
GPU_TRACE = DATA / "roofline-1gpu-torch" / "rank0.pt.trace.json.gz"


def _raw(path: Path) -> list[dict]:
    return json.load(gzip.open(path))["traceEvents"]


@functools.lru_cache(maxsize=None)
def _found(path: Path) -> list[dict]:
    """The trace's products with their leaves, once per test process (the tests only read them)."""
    profile = tracelab.load(str(path))
    rows = fp.product_rows(profile.events)
    return fp.products(rows, leaves_of_rows(path, list(rows["raw_name"]), rows["start_ns"].to_numpy(),
                                            fp.cpu_only(profile.events)))


def _raw_dims(e: dict) -> str:
    """A raw leaf event's operands' Input Dims: (bias,) A, B."""
    return json.dumps(e["args"]["Input Dims"][:3 if e["name"] in ("aten::addmm", "aten::baddbmm") else 2])


def _dims(dims) -> str:
    return json.dumps([list(d) for d in dims])


@slow_after(1)
@pytest.mark.parametrize("trace", CPU_TRACES, ids=lambda p: p.parent.name)
def test_every_leaf_product_of_a_cpu_trace_is_under_one_product(trace) -> None:
    found = _found(trace)
    want = collections.Counter((e["name"].removeprefix("aten::"), _raw_dims(e))
                               for e in _raw(trace) if e.get("ph") == "X" and LEAVES.fullmatch(e.get("name", "")))
    got = collections.Counter((op, _dims(dims)) for p in found for (op, dims, _), _ in p["leaves"] or [])
    assert found and want and got == want
    assert all(d > 0 for p in found for _, d in p["leaves"])


def test_a_gpu_traces_kernels_take_the_shapes_of_the_operator_that_launched_them() -> None:
    found = _found(GPU_TRACE)
    events = _raw(GPU_TRACE)
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"
           and LEAVES.fullmatch(e.get("name", "")) and "External id" in (e.get("args") or {})}
    gemms = [e for e in events if e.get("cat") == "kernel" and (e.get("args") or {}).get("External id") in ops]
    want = collections.Counter(_raw_dims(ops[e["args"]["External id"]]) for e in gemms)
    with_leaves = [p for p in found if p["leaves"] and p["name"] != "Memset"]  # a memset in a product's scope too
    assert gemms and len(with_leaves) == len(gemms) and len(found) > len(with_leaves)  # and GEMMs of aten::mv
    assert collections.Counter(_dims(p["leaves"][0][0][1]) for p in with_leaves) == want
    assert all(d is None for p in with_leaves for _, d in p["leaves"])  # a kernel's own time is the leaf's


def test_a_cpu_operators_change_adds_its_leaves_bf16_time_less_fp32() -> None:
    p = next(p for p in _found(TINY / "rank0.pt.trace.json.gz") if len(p["leaves"]) == 2)
    times = {lv: {"fp32_us": 10.0 * k, "bf16_us": 25.0 * k, "factor": 2.5} for k, (lv, _) in enumerate(p["leaves"], 1)}
    assert fp.product_change(p, times) == (1.0, pytest.approx(1e3 * (15.0 * 1 + 15.0 * 2)))
    assert fp.product_change(p, {}) is None  # a shape not timed: the file's default
    kernel = {"leaves": [(("mm", ((4, 8), (8, 2)), (None, None)), None)], "dur_ns": 100}
    leaf = kernel["leaves"][0][0]
    assert fp.product_change(kernel, {leaf: {"fp32_us": 4.0, "bf16_us": 1.0, "factor": 0.25}}) == (0.25, 0.0)


def test_the_default_weighs_each_product_by_its_time_and_never_falls_below_zero() -> None:
    leaf_a, leaf_b = ("mm", ((2, 2), (2, 2)), (None, None)), ("mm", ((3, 3), (3, 3)), (None, None))
    found = [{"rank": 0, "name": "aten::linear", "step": s, "index": 0, "dur_ns": 1000, "leaves": [(leaf_a, 900)]}
             for s in range(3)] + [{"rank": 0, "name": "aten::matmul", "step": 0, "index": 0, "dur_ns": 3000,
                                    "leaves": [(leaf_b, 2000)]}]
    times = {leaf_a: fp.shape_entry(leaf_a, 3, 1.0, 3.0), leaf_b: fp.shape_entry(leaf_b, 1, 5.0, 1.0)}
    doc = fp.factors_doc(found, times, {"device": "cpu"})
    # linear: 1000 + 2000 ns each of 3; matmul: 3000 - 4000 -> 0 (never below nothing)
    assert doc["default"] == pytest.approx((3 * 3000 + 0) / (3 * 1000 + 3000))
    assert doc["format"] == FORMAT and doc["products_in_trace"] == doc["products_timed"] == 4
    assert [(p["name"], p["added_ns"]) for p in doc["products"]] == [("aten::linear", 2000.0), ("aten::matmul", -4000.0)]


def test_the_shapes_timed_are_the_most_work_first_and_at_most_asked() -> None:
    found = _found(TINY / "rank0.pt.trace.json.gz")
    every = fp.shapes_to_time(found, None)
    distinct = {lv for p in found for lv, _ in p["leaves"]}
    assert {lv for lv, _ in every} == distinct and sum(c for _, c in every) == sum(len(p["leaves"]) for p in found)
    work = [c * (lv[1][0][0] * lv[1][0][1] * lv[1][1][1]) for lv, c in every]  # [M,K] x [K,N]: M*K*N a call
    assert work == sorted(work, reverse=True)
    assert fp.shapes_to_time(found, 3) == every[:3]


@pytest.mark.parametrize("inputs, options, words", [
    (["roofline-1gpu-proton/rank0.hatchet"], [], "a proton trace keeps no operator shapes"),
    (["roofline-1gpu-nsys/rank0.sqlite"], [], "an nsys trace's operator sizes (emit_nvtx) are not read by factors"),
    (["gloo-2cpu-equal"], [], "recorded without shapes (torch.profiler record_shapes=False)"),
    (["roofline-1gpu-torch"], ["--device", "cpu"], "the trace is of a GPU and the device cpu"),
    (["train-tiny-cpu-torch"], ["--device", "cuda"], "the trace is CPU-only and the device cuda"),
    (["train-tiny-cpu-torch"], ["--device", "tpu"], "'tpu' is not one of cpu, cuda"),
    (["train-tiny-cpu-torch"], ["--max-shapes", "-1"], "--max-shapes: must be 0 (all) or more"),
    (["train-tiny-cpu-torch", "gloo-2cpu-equal"], [], "one run at a time"),
])
def test_inputs_it_cannot_measure_are_refused_in_one_line(capsys, tmp_path, inputs, options, words) -> None:
    out = tmp_path / "f.json"
    rc, stdout, err = run_cli_output(capsys, "factors", *(str(DATA / i) for i in inputs), *options, "--out", str(out))
    assert rc == 2 and words in err and err.count("\n") == 1 and err.startswith("tracelab: error: ")
    assert not out.exists() and not stdout


def test_whatif_finds_every_product_of_a_gpu_traces_file(capsys, tmp_path) -> None:
    found = _found(GPU_TRACE)
    listed = [{"rank": p["rank"], "name": p["name"], "index": p["index"], "factor": 0.5} for p in found]
    path = tmp_path / "factors.json"
    path.write_text(json.dumps({"format": FORMAT, "device": "cuda", "machine": "an H100", "default": 1000.0,
                                "products": listed}))
    rc, out, _ = run_cli_output(capsys, "whatif", str(GPU_TRACE), "--scenario", f"autocast:bf16=@{path}", "--format", "json")
    note = next(n for n in strict_json(out)["notes"] if n["code"] == "autocast_factors")
    assert rc == 0 and note["values"]["listed"] == note["values"]["products"] == len(found) > 0


def test_a_trace_without_products_is_refused_before_anything_is_timed() -> None:
    from tracelab.core.errors import UsageError
    from tracelab.run.factors import Trace, measure

    trace = TINY / "rank0.pt.trace.json.gz"
    events = tracelab.load(str(trace)).events
    names = events["name"].astype(str)
    rest = events[~names.isin(set(fp.product_rows(events)["raw_name"]))]
    assert len(rest) and fp.product_rows(rest).empty
    with pytest.raises(UsageError, match="no matrix product with its shapes among 0 products"):
        measure([Trace(str(trace), rest)], device=None)


def test_an_existing_file_is_kept_without_force(capsys, tmp_path) -> None:
    out = tmp_path / "f.json"
    out.write_text("mine")
    rc, _, err = run_cli_output(capsys, "factors", str(TINY), "--out", str(out))
    assert rc == 2 and "exists; pass --force" in err and out.read_text() == "mine"


@pytest.mark.slow  # torch imported and every shape timed: ~4 s on the loaded 2-core machine
def test_the_command_end_to_end_on_a_tiny_cpu_run_and_whatif_reads_its_file(capsys, tmp_path) -> None:
    out = tmp_path / "f.json"
    rc, stdout, _ = run_cli_output(capsys, "factors", str(TINY), "--out", str(out), "--max-shapes", "0",
                                   "--no-dispatch", "--format", "json")
    assert rc == 0
    summary, doc = strict_json(stdout), strict_json(out.read_text())
    raw = [e for e in _raw(TINY / "rank0.pt.trace.json.gz") if e.get("ph") == "X" and LEAVES.fullmatch(e.get("name", ""))]
    want = {(e["name"].removeprefix("aten::"), _raw_dims(e), json.dumps(e["args"]["Input Strides"][:2])) for e in raw}
    assert {(s["op"], json.dumps(s["dims"]), json.dumps(s["strides"])) for s in doc["shapes"]} == want
    assert sum(s["calls"] for s in doc["shapes"]) == len(raw)
    assert all(s["fp32_us"] > 0 and s["bf16_us"] > 0 for s in doc["shapes"])
    assert summary["shapes_timed"] == len(want) and summary["dispatch_ns_per_op"] is None and doc["device"] == "cpu"
    assert doc["products_timed"] == doc["products_in_trace"] == summary["products_timed"]
    rc, stdout, _ = run_cli_output(capsys, "whatif", str(TINY), "--scenario", f"autocast:bf16=@{out}", "--format", "json")
    note = next(n for n in strict_json(stdout)["notes"] if n["code"] == "autocast_factors")
    unique = {(p["rank"], p["name"], p["index"]) for p in doc["products"]}
    assert rc == 0 and note["values"]["listed"] == note["values"]["products"] == doc["products_in_trace"] > len(unique)


def test_whatif_without_a_file_names_the_command_that_makes_one(capsys) -> None:
    rc, stdout, _ = run_cli_output(capsys, "whatif", str(TINY), "--scenario", "autocast:bf16=0.5", "--format", "json")
    note = next(n for n in strict_json(stdout)["notes"] if n["code"] == "autocast_model")
    assert rc == 0 and "`tracelab factors RUN --out f.json`, then `--scenario autocast:bf16=@f.json`" in note["text"]
