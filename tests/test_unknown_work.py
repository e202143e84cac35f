"""Unknown work stays unknown (issue 28): an operator whose shapes the trace lacks has NaN
bytes and FLOPs, never the empty sum's 0 (aten::copy_ and aten::cat without Input Dims
gave "0 GB/s ... lost 15 ms"), and no view or finding rests on such a row."""
from __future__ import annotations

import gzip
import json
import math

import pytest

import tracelab
from tracelab.parsers._shapes import op_work

from helpers import DATA

F32 = '"float"'


@pytest.mark.parametrize("name, dims, types, concrete", [
    ("aten::copy_", None, None, None),  # record_shapes=False: nothing recorded
    ("aten::copy_", "[]", "[]", "[]"),
    ("aten::cat", None, None, None),
    ("aten::cat", "[[[1, 8], [1, 8]], []]", '["TensorList", "Scalar"]', '["", "-1"]'),  # a list has no dtype
    ("aten::add", "[[4, 8], [4, 8]]", f'[{F32}, "c10::Float8_e8m0fnu"]', '["", ""]'),  # one input unsized
    ("aten::copy_", "[[4, 8], [4, 8]]", f'[{F32}, "TensorList"]', '["", ""]'),
    ("aten::mean", "[[4, 8], []]", f'[{F32}, "ScalarList"]', None),  # the dims argument's value not recorded
    ("aten::mul", None, None, None),
    ("aten::sum", None, None, None),
    ("aten::native_layer_norm", None, None, None),
    ("aten::fill_", None, None, None),
    ("aten::softmax", None, None, None),
])
def test_an_operator_without_shapes_has_unknown_bytes(name, dims, types, concrete):
    flops, moved, _ = op_work(name, dims, types, concrete)
    assert math.isnan(moved) and math.isnan(flops)


@pytest.mark.parametrize("name, dims, types, concrete, want_bytes", [
    ("aten::copy_", "[[4, 8], [4, 8]]", f'[{F32}, {F32}, "Scalar"]', '["", "", "False"]', 2 * 4 * 8 * 4),
    ("aten::copy_", "[[1, 8], [1, 8], []]", '["long", "int", "Scalar"]', '["", "", "False"]', 8 * 8 + 8 * 4),
    ("aten::add", "[[4, 8], [8], []]", f'[{F32}, {F32}, "Scalar"]', '["", "", "1"]', (32 + 8 + 32) * 4),
    ("aten::mean", "[[4, 8], [], [], []]", f'[{F32}, "ScalarList", "Scalar", ""]', '["", "[-1]", "True", ""]',
     (32 + 4) * 4),
])
def test_an_operator_with_shapes_has_its_bytes(name, dims, types, concrete, want_bytes):
    assert op_work(name, dims, types, concrete)[1] == want_bytes


def test_a_capture_without_input_dims_has_no_kernel_work():
    path = DATA / "decode-1gpu-torch" / "rank0.pt.trace.json.gz"
    ops = [e for e in json.loads(gzip.open(path).read())["traceEvents"] if e.get("cat") == "cpu_op"]
    assert ops and not any((e.get("args") or {}).get("Input Dims") for e in ops)  # record_shapes=False
    assert not any((e.get("args") or {}).get("flops") for e in ops)  # nor with_flops
    events = tracelab.load(path).events
    kernels = events[events["kind"] == "kernel"]
    assert len(kernels) and kernels["bytes"].isna().all() and kernels["flops"].isna().all()


@pytest.mark.slow
def test_the_roofline_says_how_to_record_the_missing_work_and_names_dtypes(capsys):
    from helpers import run_cli_output
    status, out, _ = run_cli_output(capsys, "roofline", str(DATA / "ddp-2gpu-late-torch"))
    flat = " ".join(out.split())
    assert status == 0 and "torch.profiler(record_shapes=True) would give" in flat
    assert "bf16/fp16 989.4" in flat or "bf16/fp16 " in flat  # not "16 989.4"
    assert not any(f" {c} " in flat.split("HBM")[0].split("peak TFLOP/s")[1] for c in ("16", "8"))
