"""The train workload's speed options: each makes one change a user makes to go faster, so the
step before and after can be measured and what a what-if replay predicted for it checked:

- `--cuda-graph`: the whole step (forward, backward, AdamW(capturable=True)) captured once in one
  CUDA graph after eager warm-up steps, then replayed: one launch per step (GPU only);
- `--compile`: torch.compile of the model, default mode (fused Triton kernels on a GPU, C++ on
  the CPU), compiled during the warm-up steps;
- `--tf32`: fp32 matrix products on TF32 tensor cores (NVIDIA GPU only);
- `--attention auto|math`: attention's product in an `sdpa` region (its kernels named by a scope,
  so a replay can scale them) on torch's choice of kernel (auto: a fused one where one fits) or on
  the unfused math (matmul, softmax, matmul): a kernel's configuration, changed.
"""
from __future__ import annotations

import argparse
import contextlib
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from tracelab.run import backends

from .model import Attention
from .options.train import SDPA_REGION

GRAPH_WARMUP = 3  # eager steps on a side stream before the capture (AdamW's state, cuBLAS's workspace)


def set_precision(args: argparse.Namespace) -> None:
    """Matrix products' precision for the whole run (before any model is built)."""
    torch.set_float32_matmul_precision("high" if args.tf32 else "highest")


def prepare(model: torch.nn.Module, args: argparse.Namespace) -> torch.nn.Module:
    """The model as the step calls it: attention's kernel chosen, compiled when asked."""
    if args.attention is not None:
        use_attention(model, args.attention)
    return torch.compile(model) if args.compile else model


def use_attention(model: torch.nn.Module, choice: str) -> None:
    """Every attention's product in an `sdpa` region, on `choice`'s kernels."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def core(q: Tensor, k: Tensor, v: Tensor, **kw) -> Tensor:
        # q, k, v: [B, H, S, Dh] -> [B, H, S, Dh]
        only = sdpa_kernel(SDPBackend.MATH) if choice == "math" else contextlib.nullcontext()
        with backends.region(SDPA_REGION), only:
            return F.scaled_dot_product_attention(q, k, v, **kw)

    for module in model.modules():
        if isinstance(module, Attention):
            module.core = core


def graphed(step: Callable[[], None], device: torch.device) -> Callable[[], None]:
    """`step` captured in one CUDA graph, as torch.cuda.graphs wants it: warm-up calls on a side
    stream first, then one call captured; the returned function replays it (the same inputs,
    parameters and optimizer state every call, updated in place)."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP):
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay
