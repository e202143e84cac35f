"""A matrix-vector product for decode, as one Triton kernel: y[M, N] = x[M, K] @ w[N, K]^T
for a few rows M. Decode reads every weight once per token, so its speed is the speed at
which this streams `w`: each program owns BLOCK_N rows of w and walks K in wide,
contiguous BLOCK_K slices, accumulating in float32.

Registered as the custom op tracelab::gemv (torch.library.triton_op), so torch.compile
keeps it inside the compiled graph and its CUDA graph. `decode --matvec triton` uses it.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor
from torch.library import triton_op, wrap_triton

MAX_ROWS = 4  # more rows than this (a prefill) go to the ordinary matmul

_CONFIGS = [triton.Config({"BLOCK_N": bn, "BLOCK_K": bk}, num_warps=warps, num_stages=stages)
            for bn, bk, warps, stages in [(4, 512, 4, 3), (8, 512, 4, 3), (8, 256, 4, 4), (16, 256, 8, 3),
                                          (16, 512, 8, 3), (4, 1024, 4, 2), (8, 1024, 8, 2), (32, 128, 4, 4)]]


@triton.autotune(configs=_CONFIGS, key=["N", "K", "BLOCK_M"])
@triton.jit
def _gemv_kernel(x_ptr, w_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN] rows of w = columns of y
    rm = tl.arange(0, BLOCK_M)  # [BM] rows of x
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in tl.range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)  # [BK]
        w = tl.load(w_ptr + rn[:, None] * stride_wn + rk[None, :],
                    mask=(rn[:, None] < N) & (rk[None, :] < K), other=0.0)  # [BN, BK]
        x = tl.load(x_ptr + rm[:, None] * stride_xm + rk[None, :],
                    mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)  # [BM, BK]
        acc += tl.sum(x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :], axis=2)  # [BM, BN]
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton_op("tracelab::gemv", mutates_args={})
def gemv(x: Tensor, w: Tensor) -> Tensor:
    # x: [M, K] (M <= MAX_ROWS), w: [N, K] -> [M, N]
    m, k = x.shape
    n = w.shape[0]
    x = x.contiguous()
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK_N"]),)

    wrap_triton(_gemv_kernel)[grid](x, w, y, m, n, k, x.stride(0), w.stride(0), y.stride(0),
                                    BLOCK_M=triton.next_power_of_2(m))
    return y


def matvec(x: Tensor, w: Tensor) -> Tensor:
    """What model.Linear calls: the Triton kernel for up to MAX_ROWS rows, else a matmul."""
    if x.shape[0] > MAX_ROWS:
        return torch.nn.functional.linear(x, w)
    return gemv(x, w)
