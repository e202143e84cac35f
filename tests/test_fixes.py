"""Findings that name the cause and the fix (reports/fixes/): each on a real capture where it
fires, its numbers recomputed from the trace file itself, and on one where it must not."""
from __future__ import annotations

import gzip
import json
import re

import pytest

from tracelab.inputs import findings_of, load_groups

from conftest import DATA, shared_trace

SIMT = re.compile(r"sgemm|simt|_ffma_", re.IGNORECASE)
GEMV = re.compile(r"gemv", re.IGNORECASE)
TENSOR_CORE_ALIGN1 = re.compile(r"tensorop.*align[12](?![0-9])", re.IGNORECASE)


def _found(*paths) -> list:
    paths = [str(p) for p in paths]
    return findings_of(paths, load_groups(paths))


def _by_fix(found: list, word: str) -> list:
    return [f for f in found if word in f.text]


def _kernel_ns(path, pattern: re.Pattern) -> int:
    """The GPU time of the kernels whose name matches, straight from the Kineto JSON (the
    parser's rounding: each dur in us to whole ns)."""
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    return sum(round(e["dur"] * 1000) for e in events if e.get("cat") == "kernel" and pattern.search(e["name"])
               and not GEMV.search(e["name"]))


def test_fp32_simt_gemms_name_tf32_with_their_time():
    folder = DATA / "train-1gpu-steps-torch"
    found = _by_fix(_found(folder), "allow TF32")
    assert len(found) == 1
    simt_ns = _kernel_ns(folder / "rank0.pt.trace.json.gz", SIMT)
    assert found[0].evidence["simt_ns"] == simt_ns and found[0].at_stake_ns == simt_ns
    assert f"take {simt_ns / 1e6:,.2f} ms" in found[0].text
    assert "torch.set_float32_matmul_precision(\"high\")" in found[0].text and "bf16 autocast" in found[0].text


def test_tf32_roof_from_the_trace_s_flops():
    """roofline-1gpu-torch's fp32 GEMM region: 5 calls of a 4096^3 mm (expected.results.json),
    at the H100's TF32 roof 494.7 TFLOP/s."""
    folder = DATA / "roofline-1gpu-torch"
    expected = json.loads((folder / "expected.results.json").read_text())["regions"]["gemm_square_fp32"]
    flops = expected["flops"] * expected["calls"]
    found = _by_fix(_found(folder), "allow TF32")
    assert len(found) == 1
    assert found[0].evidence["flops"] == pytest.approx(flops, rel=1e-9)
    assert found[0].evidence["tc_min_ns"] == pytest.approx(flops / 494.7e3, rel=1e-9)
    assert f"would take {flops / 494.7e3 / 1e6:,.2f} ms" in found[0].text


@pytest.mark.parametrize("folder", ["train-small-1gpu-torch", "decode-1b-1gpu-torch", "idle-1gpu-large-torch"])
def test_no_tf32_finding_without_fp32_simt_gemms(folder):
    """bf16 GEMMs on tensor cores, or fp32 ones under 5% of the GPU time."""
    assert not _by_fix(_found(DATA / folder), "CUDA cores")


def test_no_tf32_finding_on_cpu_operators():
    assert not _by_fix(_found(DATA / "train-cpu-torch"), "CUDA cores")


def test_volta_gets_fp16_not_tf32():
    path = shared_trace("hta/trace_diff/test/test.json.gz")
    found = _by_fix(_found(path), "CUDA cores")
    assert len(found) == 1 and "no TF32" in found[0].text and "float16" in found[0].text
    assert found[0].evidence["simt_ns"] == _kernel_ns(path, SIMT)


def test_unaligned_tensor_core_gemms_name_padding():
    path = shared_trace("hta/trace_diff/control/control.json.gz")
    found = _by_fix(_found(path), "unaligned")
    assert len(found) == 1 and "pad it" in found[0].text
    assert found[0].evidence["unaligned_ns"] == _kernel_ns(path, TENSOR_CORE_ALIGN1)


@pytest.mark.parametrize("folder", ["train-1gpu-steps-torch", "idle-1gpu-small-torch", "roofline-1gpu-torch"])
def test_simt_align1_kernels_are_no_alignment_finding(folder):
    """cutlass_80_simt_sgemm_*_align1: SIMT kernels are align1 whatever the shapes."""
    assert not _by_fix(_found(DATA / folder), "unaligned")
