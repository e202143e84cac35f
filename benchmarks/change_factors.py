"""Microbenchmarks of one kind of kernel at two configurations, on the device a change was
measured on: the factor F of a change's `scale:REGEX=F` scenario (the kernels' time after over
before), measured on the kernels alone at the shapes of the train workload's config.

    factor("sdpa", args)  ->  {"factor": F, "before_us": ..., "after_us": ..., "shapes": ...}

sdpa: attention's product, the unfused math against torch's choice (train --attention math|auto).
gemm-bf16, gemm-tf32: the model's weight products (every linear layer's [tokens, in] @ [in, out]),
fp32 against the same fp32 operands under bf16 autocast (the casts of both operands included, as
autocast does them inside each product), or against TF32 tensor cores; summed over the layers, so
F weighs each product by its time as the step does. Backward products are assumed to change alike.
gemm-bf16-operands: the same products with bf16 operands (no cast): the F of `autocast:bf16=F`,
whose casts are the scenario's own.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
from typing import Callable

import torch
import torch.nn.functional as F

from tracelab.workloads.harness import time_each_us
from tracelab.workloads.configs import SIZES

WARMUP_CALLS, TIMED_CALLS = 5, 30


def _median_us(fn: Callable[[], object], device: torch.device) -> float:
    for _ in range(WARMUP_CALLS):
        fn()
    return statistics.median(time_each_us(fn, TIMED_CALLS, device))


def _tokens(args: argparse.Namespace, world_size: int) -> int:
    return args.batch_size // world_size * args.context_length


def linear_shapes(args: argparse.Namespace, world_size: int = 1) -> list[tuple[int, int, int]]:
    """(tokens, in, out) of every weight product of one forward (lm.TrainLM: per layer wqkv, wo,
    w1, w3, w2; then the output projection)."""
    s = SIZES[args.sizes[0]]
    t = _tokens(args, world_size)
    layer = [(t, s.d_model, 3 * s.d_model), (t, s.d_model, s.d_model), (t, s.d_model, s.d_ff),
             (t, s.d_model, s.d_ff), (t, s.d_ff, s.d_model)]
    return layer * s.layers + [(t, s.d_model, args.vocab_size)]


def _linears_us(shapes: list[tuple[int, int, int]], device: torch.device, bf16: bool = False,
                precision: str = "highest", dtype: torch.dtype = torch.float32) -> float:
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)

    def product(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            return F.linear(x, w)

    try:
        total = 0.0
        for t, k, n in sorted(set(shapes)):
            x, w = torch.randn(t, k, device=device, dtype=dtype), torch.randn(n, k, device=device, dtype=dtype)
            total += _median_us(lambda: product(x, w), device) * shapes.count((t, k, n))
        return total
    finally:
        torch.set_float32_matmul_precision(saved)


def _sdpa_us(args: argparse.Namespace, choice: str, device: torch.device) -> float:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    s = SIZES[args.sizes[0]]
    S, H = args.context_length, s.heads
    q, k, v = (torch.randn(args.batch_size, H, S, s.d_model // H, device=device) for _ in range(3))  # [B, H, S, Dh]
    mask = torch.tril(torch.ones(S, S, dtype=torch.bool, device=device))[None, None]  # [1, 1, S, S]
    only = sdpa_kernel(SDPBackend.MATH) if choice == "math" else contextlib.nullcontext()
    cast = torch.autocast(device.type, dtype=torch.bfloat16) if args.dtypes[0] == "bf16" else contextlib.nullcontext()
    with only, cast:
        return _median_us(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), device)


def factor(name: str, args: argparse.Namespace, device: torch.device) -> dict:
    """F = the kernels' time at the AFTER configuration over the BEFORE one (module docstring)."""
    if name == "sdpa":
        before, after = _sdpa_us(args, "math", device), _sdpa_us(args, "auto", device)
        shapes = {"batch": args.batch_size, "heads": SIZES[args.sizes[0]].heads, "seq": args.context_length}
    elif name in ("gemm-bf16", "gemm-bf16-operands", "gemm-tf32"):
        shapes = linear_shapes(args)
        before = _linears_us(shapes, device)
        after = {"gemm-bf16": lambda: _linears_us(shapes, device, bf16=True),
                 "gemm-bf16-operands": lambda: _linears_us(shapes, device, dtype=torch.bfloat16),
                 "gemm-tf32": lambda: _linears_us(shapes, device, precision="high")}[name]()
        shapes = sorted(set(shapes))
    else:
        raise ValueError(f"no microbenchmark named {name!r}")
    return {"name": name, "factor": after / before, "before_us": before, "after_us": after, "shapes": shapes,
            "device": str(device), "calls_timed": TIMED_CALLS}
