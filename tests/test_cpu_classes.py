"""CPU operators are classed like the GPU kernels they stand for: on a CPU-only trace the
train step's matrix products are gemm and its loss a reduction, not "other"."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

import tracelab
from tracelab.core import classify

RUN = Path(__file__).resolve().parent / "data" / "train-cpu-torch"


@pytest.mark.parametrize("name, op_class", [
    ("autograd::engine::evaluate_function: MmBackward0", "gemm"),
    ("aten::mm", "gemm"), ("aten::addmm", "gemm"), ("aten::bmm", "gemm"), ("aten::linear", "gemm"),
    ("aten::matmul", "gemm"), ("evaluate_function: AddmmBackward0", "gemm"), ("aten::conv2d", "gemm"),
    ("aten::cross_entropy_loss", "reduction"), ("evaluate_function: NllLossBackward0", "reduction"),
    ("evaluate_function: LogSoftmaxBackward0", "reduction"), ("aten::mse_loss", "reduction"),
    ("aten::mean", "reduction"), ("aten::sum", "reduction"), ("aten::max", "reduction"),
    ("evaluate_function: ScaledDotProductFlashAttentionForCpuBackward0", "attention"),
    ("aten::mul_", "elementwise"), ("aten::div_", "elementwise"), ("aten::lerp_", "elementwise"),
    ("aten::sqrt", "elementwise"), ("evaluate_function: RsqrtBackward0", "elementwise"),
    ("evaluate_function: SiluBackward0", "elementwise"),
    ("aten::view", "memory"), ("evaluate_function: TBackward0", "memory"), ("aten::copy_", "memory"),
    ("aten::cat", "memory"), ("evaluate_function: SelectBackward0", "memory"),
    ("c10d::allreduce_", "communication"), ("gloo:all_reduce", "communication"),
    ("ProfilerStep#3", "other"),
])
def test_cpu_operator_classes(name, op_class):
    assert classify.classify_cpu_op(classify.canonical(name)) == op_class


def test_gpu_kernels_keep_their_classes():
    """The CPU rules apply to cpu_op rows only: a kernel named like an aten operator is
    classed by the kernel patterns."""
    kernels = ["mm", "view", "sqrt", "evaluate_function: MmBackward0"]
    got = classify.op_classes(pd.Series(kernels), pd.Series(["kernel"] * 4))
    assert list(got) == [classify.classify_one(k) for k in kernels]


def test_a_user_pattern_wins_on_the_name_shown():
    try:
        classify.add_pattern(r"MmBackward", "other")
        assert classify.classify_cpu_op("evaluate_function: MmBackward0") == "other"
    finally:
        classify.reset_patterns()
    assert classify.classify_cpu_op("evaluate_function: MmBackward0") == "gemm"


MATMUL = re.compile(r"(?:^|: |::)(?:linear|mm|addmm|bmm|matmul|MmBackward0|AddmmBackward0|BmmBackward0)$")
LOSS = re.compile(r"(?:cross_entropy_loss|nll_loss\w*|NllLossBackward0|LogSoftmaxBackward0|log_softmax)$")


@pytest.mark.parametrize("rank", [0, 1])
def test_cpu_train_trace_is_not_other(rank):
    df = tracelab.load(RUN / f"rank{rank}.pt.trace.json.gz").events
    assert (df["kind"] == "cpu_op").all()
    names = df["name"].astype(str)
    matmul, loss = names.str.contains(MATMUL), names.str.contains(LOSS)
    assert matmul.any() and loss.any()
    gemm_ns = int(df.loc[df["op_class"] == "gemm", "dur_ns"].sum())
    assert gemm_ns == int(df.loc[matmul, "dur_ns"].sum())
    assert (df.loc[loss, "op_class"] == "reduction").all()
    other_share = df.loc[df["op_class"] == "other", "dur_ns"].sum() / df["dur_ns"].sum()
    assert other_share < 0.01
