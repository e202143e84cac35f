"""benchmarks/shape_factors.py on a real CPU trace (tests/data/train-cpu-pair-torch): every leaf product
of the raw JSON found under one product of the graph, the products found again by the scenario (by
rank, name and place in the step), a CPU operator's change its leaves' bf16 - fp32 time added."""
from __future__ import annotations

import collections
import gzip
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tracelab.reports.whatif.bf16_factors import FORMAT

from helpers import run_cli_output

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # a real trace loaded twice: ~30 s on the loaded 2-core machine
TRACE = ROOT / "tests/data/train-cpu-pair-torch/rank0.pt.trace.json.gz"


@pytest.fixture(scope="module")
def shape_factors():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("shape_factors", ROOT / "benchmarks" / "shape_factors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def products(shape_factors):
    return shape_factors.trace_products(TRACE)


def _raw_leaves() -> collections.Counter:
    events = json.load(gzip.open(TRACE))["traceEvents"]
    return collections.Counter((e["name"].removeprefix("aten::"), json.dumps(e["args"]["Input Dims"][:2]))
                               for e in events if e.get("name") == "aten::mm" and e.get("ph") == "X")


def test_every_leaf_product_of_the_trace_is_under_one_product(products) -> None:
    cpu_only, found = products
    assert cpu_only and found
    got = collections.Counter((op, json.dumps([list(d) for d in dims])) for p in found for (op, dims, _), _ in p["leaves"])
    assert got == _raw_leaves()
    assert all(d > 0 for p in found for _, d in p["leaves"])


def test_a_cpu_operators_change_adds_its_leaves_bf16_time_less_fp32(shape_factors, products) -> None:
    p = next(p for p in products[1] if len(p["leaves"]) == 2)
    times = {lv: {"fp32_us": 10.0 * k, "bf16_us": 25.0 * k, "factor": 2.5} for k, (lv, _) in enumerate(p["leaves"], 1)}
    assert shape_factors.product_change(p, times) == (1.0, pytest.approx(1e3 * (15.0 * 1 + 15.0 * 2)))
    assert shape_factors.product_change(p, {}) is None  # a shape not timed: the file's default


def test_the_scenario_finds_every_product_of_the_file(tmp_path, capsys, products) -> None:
    listed = [{"rank": p["rank"], "name": p["name"], "index": p["index"], "factor": 1.0, "added_ns": 0.0}
              for p in products[1]]
    path = tmp_path / "factors.json"
    path.write_text(json.dumps({"format": FORMAT, "device": "cpu", "machine": "here", "measured_at": "now",
                                "default": 1000.0, "products": listed, "dispatch_ns_per_op": None}))
    rc, out, _ = run_cli_output(capsys, "whatif", str(TRACE), "--scenario", f"autocast:bf16=@{path}", "--format", "json")
    assert rc == 0
    doc = json.loads(out)
    note = next(n for n in doc["notes"] if n["code"] == "autocast_factors")
    unique = {(p["rank"], p["name"], p["index"]) for p in products[1]}
    assert note["values"]["listed"] == note["values"]["products"] == len(products[1]) and len(unique) < len(products[1])


def test_a_gpu_traces_kernels_take_the_shapes_of_the_operator_that_launched_them(shape_factors, tmp_path, capsys) -> None:
    trace = ROOT / "tests/data/train-small-1gpu-torch/rank0.pt.trace.json.gz"
    cpu_only, found = shape_factors.trace_products(trace)
    events = json.load(gzip.open(trace))["traceEvents"]
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op" and e.get("name") in
           ("aten::mm", "aten::addmm", "aten::bmm") and "External id" in (e.get("args") or {})}
    gemms = [e for e in events if e.get("cat") == "kernel" and (e.get("args") or {}).get("External id") in ops]
    assert not cpu_only and len(found) == len(gemms)
    want = collections.Counter(json.dumps(ops[e["args"]["External id"]]["args"]["Input Dims"][:2]) for e in gemms)
    assert collections.Counter(json.dumps([list(d) for d in p["leaves"][0][0][1]]) for p in found) == want
    assert all(d is None for p in found for _, d in p["leaves"])  # a kernel's own time is the leaf's
    listed = [{"rank": p["rank"], "name": p["name"], "index": p["index"], "factor": 0.5} for p in found]
    path = tmp_path / "factors.json"
    path.write_text(json.dumps({"format": FORMAT, "device": "cuda", "machine": "an H100", "default": 1000.0,
                                "products": listed}))
    rc, out, _ = run_cli_output(capsys, "whatif", str(trace), "--scenario", f"autocast:bf16=@{path}", "--format", "json")
    note = next(n for n in json.loads(out)["notes"] if n["code"] == "autocast_factors")
    assert rc == 0 and note["values"]["listed"] == note["values"]["products"] == len(found)
