from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracelab.core import classify, schema


def _frame(**overrides):
    cols = {"rank": [0, 0], "source": "torch", "kind": ["kernel", "memcpy"], "name": ["a", "b"],
            "kernel": ["a", "b"], "op_class": ["other", "memory"], "device": 0, "dur_ns": [5, 7]}
    cols.update(overrides)
    return schema.coerce(cols)


def test_coerce_builds_a_valid_frame_with_defaults():
    df = schema.validate(_frame())
    assert list(df.columns) == list(schema.COLUMNS)
    assert df["scope"].tolist() == ["", ""]
    assert df["count"].tolist() == [1, 1]
    assert df["start_ns"].isna().all() and np.isnan(df["flops"]).all()


@pytest.mark.parametrize("mutate, message", [
    (lambda df: df.drop(columns=["scope"]), "missing columns"),
    (lambda df: df.assign(extra=1), "unexpected columns"),
    (lambda df: df.assign(dur_ns=df["dur_ns"].astype("float64")), "mistyped"),
    (lambda df: df.assign(rank=df["rank"].astype("int64")), "mistyped"),
    (lambda df: df.assign(name=df["name"].astype("category")), "mistyped"),
    (lambda df: df.assign(dur_ns=np.array([-1, 3], dtype="int64")), "negative dur_ns"),
    (lambda df: df.assign(kind=pd.Categorical(["kernel", "bogus"])), "outside"),
])
def test_validate_rejects(mutate, message):
    with pytest.raises(schema.SchemaError, match=message):
        schema.validate(mutate(_frame()))


def test_empty_is_valid():
    assert len(schema.validate(schema.empty())) == 0


@pytest.mark.parametrize("name, kernel, op_class", [
    ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIiEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_",
     "vectorized_elementwise_kernel", "elementwise"),
    ("_ZN4c10d15intra_node_comm22oneShotAllReduceKernelILj4ELb1EEEvPN3c108BFloat16EmmPPNS0_8P2pStateEPS4_mb",
     "oneShotAllReduceKernel", "communication"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication"),
    ("void c10d::symmetric_memory::two_shot_all_reduce_kernel<c10::BFloat16, 16, 4>(c10::BFloat16**, unsigned long)",
     "two_shot_all_reduce_kernel", "communication"),
    ("_triton_one_shot_all_reduce", "_triton_one_shot_all_reduce", "communication"),
    ("void at::native::(anonymous namespace)::multimem_all_reduce_kernel<16>(float*)",
     "multimem_all_reduce_kernel", "communication"),
    ("triton_red_fused_mm_10", "triton_red_fused_mm_10", "gemm"),
    # Inductor names list the fused graph's ops, the functional collective beside them included
    ("triton_per_fused__unsafe_view_all_reduce_mm_mul_silu_t_view_11",
     "triton_per_fused__unsafe_view_all_reduce_mm_mul_silu_t_view_11", "gemm"),
    ("triton_poi_fused_add_all_reduce_3", "triton_poi_fused_add_all_reduce_3", "elementwise"),
    ("triton_poi_fused_add_mul_3", "triton_poi_fused_add_mul_3", "elementwise"),
    ("triton_per_fused__to_copy_mean_pow_rsqrt_1", "triton_per_fused__to_copy_mean_pow_rsqrt_1", "reduction"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x1_tn_align8>(Params)",
     "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x1_tn_align8", "gemm"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>, false>(Flash_fwd_params)",
     "flash_fwd_kernel", "attention"),
    ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD", "memory"),
    ("Memset (Device)", "Memset", "memory"),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false>(float*, int)",
     "softmax_warp_forward", "reduction"),
    ("aten::addmm", "addmm", "gemm"),
    ("aten::linear", "linear", "gemm"),  # a CPU-only trace's operators stand in for kernels
    ("aten::baddbmm", "baddbmm", "gemm"),
    ("aten::linalg_vector_norm", "linalg_vector_norm", "reduction"),
    ("some_unknown_thing", "some_unknown_thing", "other"),
    # proton's mangled cutlass::Kernel2<...>: the template argument is the join key, as in torch's name
    ("_ZN7cutlass7Kernel2I41cutlass_80_simt_sgemm_64x64_8x5_nn_align1EEvNT_6ParamsE",
     "cutlass_80_simt_sgemm_64x64_8x5_nn_align1", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nn_align1>(cutlass_80_simt_sgemm_64x64_8x5_nn_align1::Params)",
     "cutlass_80_simt_sgemm_64x64_8x5_nn_align1", "gemm"),
    ("_ZN7cutlass7Kernel2IN4cute10GemmKernelEEEvNT_6ParamsE", "GemmKernel", "gemm"),
])
def test_canonical_and_op_class(name, kernel, op_class):
    assert classify.canonical(name) == kernel
    assert classify.classify_one(kernel) == op_class


def test_memcpy_kind_is_memory_whatever_the_name():
    cats = classify.op_classes(pd.Series(["gemm_kernel", "weird"]), pd.Series(["kernel", "memcpy"]))
    assert list(cats) == ["gemm", "memory"]


def test_user_pattern_takes_precedence():
    assert classify.classify_one("my_fancy_exchange") == "other"
    classify.add_pattern(r"fancy_exchange", "communication")
    try:
        assert classify.classify_one("my_fancy_exchange") == "communication"
    finally:
        classify.reset_patterns()
    with pytest.raises(ValueError, match="op class"):
        classify.add_pattern("x", "not_a_class")
