"""Device facts: advice only for features the trace's device has. A real H100 capture whose fp32
GEMMs run on CUDA cores on the trace's critical path (roofline-1gpu-torch: where they are off it,
no fix is offered at all), with its deviceProperties rewritten to other GPUs: the fix named must be
one that GPU can run, and the kernel time stays the file's own."""
from __future__ import annotations

import gzip
import json
import re
import sys

import pytest

from tracelab import cli

from tracelab.core import devices
from tracelab.reports import fmt

from helpers import DATA, slow_after

TRACE = DATA / "roofline-1gpu-torch" / "rank0.pt.trace.json.gz"
SIMT = re.compile(r"sgemm|simt|_ffma_", re.IGNORECASE)


def _as_device(tmp_path, props: dict | None):
    """The capture with its one GPU described by `props` (None: no deviceProperties at all)."""
    with gzip.open(TRACE) as f:
        trace = json.load(f)
    if props is None:
        trace.pop("deviceProperties", None)
    else:
        trace["deviceProperties"] = [{**trace["deviceProperties"][0], **props}]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(trace))
    return path


def _simt_ns() -> int:
    with gzip.open(TRACE) as f:
        events = json.load(f)["traceEvents"]
    return sum(round(e["dur"] * 1000) for e in events
               if e.get("cat") == "kernel" and SIMT.search(e["name"]) and "gemv" not in e["name"].lower())


def _finding(capsys, monkeypatch, path) -> str | None:
    """The CUDA-core GEMM finding `tracelab breakdown` ends on, or None."""
    monkeypatch.setattr(sys, "argv", ["tracelab", "breakdown", str(path)])
    with pytest.raises(SystemExit) as done:
        cli.main()
    out = capsys.readouterr().out
    assert done.value.code in (0, None), out
    return next((line for line in out.splitlines() if "CUDA cores" in line), None)


# Each case is a whole `tracelab breakdown` of a rewritten copy (~1 s): the fast run keeps a device
# known by its arch alone and one by name; the rest run under -m slow (the V100 also fast below,
# under the older key).
@slow_after(1)
@pytest.mark.parametrize("name, major, minor, says, never", [
    ("NVIDIA GeForce RTX 2070 SUPER", 7, 5, "fp16 autocast", ("TF32 (", "bf16 autocast")),  # in no table: Turing by arch
    pytest.param("NVIDIA GeForce RTX 2080 Ti", 7, 5, "fp16 autocast", ("TF32 (", "bf16 autocast"), marks=pytest.mark.slow),
    pytest.param("Tesla V100-SXM2-32GB", 7, 0, "fp16 autocast", ("TF32 (", "bf16 autocast"), marks=pytest.mark.slow),
    pytest.param("NVIDIA GeForce RTX 3060", 8, 6, "allow TF32", (), marks=pytest.mark.slow),  # in no table: Ampere by arch
    ("NVIDIA H800", 9, 0, "allow TF32", ()),
])
def test_fix_fits_the_device(tmp_path, capsys, monkeypatch, name, major, minor, says, never):
    line = _finding(capsys, monkeypatch, _as_device(tmp_path, {"name": name, "computeMajor": major,
                                                                "computeMinor": minor}))
    assert line is not None and says in line and fmt.duration(_simt_ns()) in line
    assert not any(word in line for word in never)


def test_the_older_compute_properties_key_names_the_device(tmp_path, capsys, monkeypatch):
    """PyTorch's profiler wrote the device table as computeProperties before deviceProperties: a
    V100 named there gets the V100's fix (fp16), as it does under the newer key."""
    path = _as_device(tmp_path, {"name": "Tesla V100-SXM2-32GB", "computeMajor": 7, "computeMinor": 0})
    trace = json.loads(path.read_text())
    trace["computeProperties"] = trace.pop("deviceProperties")
    path.write_text(json.dumps(trace))
    line = _finding(capsys, monkeypatch, path)
    assert line is not None and "fp16 autocast" in line and "does not say which GPU" not in line
    assert "TF32 (" not in line and "bf16 autocast" not in line


def test_no_tensor_cores_no_finding(tmp_path, capsys, monkeypatch):
    """A Pascal GPU (sm_61) runs every GEMM on CUDA cores: there is nothing to move them to."""
    path = _as_device(tmp_path, {"name": "NVIDIA GeForce GTX 1080 Ti", "computeMajor": 6, "computeMinor": 1})
    assert _finding(capsys, monkeypatch, path) is None


@pytest.mark.slow
def test_unknown_device_gets_the_rule_not_a_feature(tmp_path, capsys, monkeypatch):
    line = _finding(capsys, monkeypatch, _as_device(tmp_path, None))
    assert line is not None and "compute capability 8.0" in line and "does not say which GPU" in line


def test_h800_and_h20_are_known_to_the_roofline():
    assert devices.detect({"name": "NVIDIA H800"}).name == "H800"
    assert devices.detect({"name": "NVIDIA H20"}).name == "H20"
    assert devices.detect({"name": "NVIDIA H200"}).name == "H200"  # H20 is no prefix match of H200
    assert devices.detect({"name": "NVIDIA H800"}).peak_tflop_s("bf16") == devices.by_option("H100").peak_tflop_s("bf16")


@pytest.mark.parametrize("arch, has", [("70", {"fp16"}), ("75", {"fp16", "int8"}), ("80", {"tf32", "bf16"}),
                                       ("89", {"fp8", "bf16"}), ("90", {"fp8", "tf32"}), ("gfx90a", {"bf16"}),
                                       ("gfx942", {"tf32", "fp8"})])
def test_arch_tensor_dtypes(arch, has):
    assert has <= devices.arch_tensor_dtypes(arch)


def test_arch_without_tensor_cores_and_unknown():
    assert devices.arch_tensor_dtypes("61") == frozenset()
    assert devices.arch_tensor_dtypes("gfx1100") is None and devices.arch_tensor_dtypes(None) is None
    assert "tf32" not in devices.arch_tensor_dtypes("gfx90a")  # MI200 has no TF32
