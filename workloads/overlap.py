"""Communication and matrix products, overlapped or not (as TransformerEngine, Flux and
symm-mem-recipes do it): the two
collectives of tensor parallelism around a GEMM, fused against unfused.

  ag-matmul   all-gather A's row shards, then A @ B:   A_shard [M/W, K], B [K, N] -> C [M, N]
  matmul-rs   A @ B, then reduce-scatter over rows:    A [M, N], B [N, K] -> C [M/W, K]

  unfused     the collective through the process group (NCCL), then cuBLAS (torch.matmul)
  fused       torch.ops.symm_mem.fused_all_gather_matmul / fused_matmul_reduce_scatter:
              the collective over symmetric memory in chunks, each chunk's product
              overlapping the next chunk's transfer

Shapes are symm-mem-recipes' Llama 3 tables (github.com/yifuwang/symm-mem-recipes): M the gathered rows (tokens), K the model
width, N a rank's shard of the MLP (8B: N=1792 K=4096; 70B: 3584, 8192; 105B: 6656,
16384; M 4096, 8192, 16384), the same per-rank shapes whatever the world size. The
matmul-rs case is the matching row-parallel product (back from N to K). Time per
variant is the slowest rank's median over --iters calls (CUDA events); speedup =
unfused / fused; the fused result is checked against the unfused one.

    tracelab run overlap --ranks 2 -- --models 8B,70B,105B --rows 4096,8192,16384
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from tracelab.run import backends

from tracelab.ingest import results

from . import harness
from .common import Dist, device_name
from .options import overlap as options

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}  # options.DTYPES, as torch's types
REL_TOL = {"bf16": 2e-2, "fp32": 1e-4}
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The options (options/overlap.py), checked for this machine as torch sees it."""
    return options.parse(argv, torch.cuda.is_available())


@dataclass
class Shape:
    op: str
    model: str
    M: int
    N: int
    K: int

    @property
    def label(self) -> str:
        return f"M{self.M}_N{self.N}_K{self.K}"


@dataclass
class Case:
    """One shape, its inputs made: a callable per variant (and the product alone)."""

    shape: Shape
    calls: dict[str, Callable[[], torch.Tensor]]


def ag_matmul(shape: Shape, dtype: torch.dtype, d: Dist) -> Case:
    M, N, K, W = shape.M, shape.N, shape.K, d.world_size
    a_shard = torch.randn(M // W, K, dtype=dtype, device=d.device)  # [M/W, K]
    b = torch.randn(K, N, dtype=dtype, device=d.device) / K**0.5  # [K, N]
    a = torch.empty(M, K, dtype=dtype, device=d.device)  # [M, K] gathered

    def unfused() -> torch.Tensor:
        _all_gather(a, a_shard)
        return a @ b  # [M, N]

    def fused() -> torch.Tensor:
        return torch.ops.symm_mem.fused_all_gather_matmul(a_shard, [b], 0, d.group.group_name)[1][0]

    return Case(shape, {"matmul": lambda: a @ b, "unfused": unfused, "fused": fused})


def matmul_rs(shape: Shape, dtype: torch.dtype, d: Dist) -> Case:
    M, N, K, W = shape.M, shape.N, shape.K, d.world_size
    a = torch.randn(M, N, dtype=dtype, device=d.device)  # [M, N]: this rank's slice of the hidden layer
    b = torch.randn(N, K, dtype=dtype, device=d.device) / N**0.5  # [N, K]
    out = torch.empty(M // W, K, dtype=dtype, device=d.device)  # [M/W, K]

    def unfused() -> torch.Tensor:
        _reduce_scatter(out, a @ b)
        return out

    def fused() -> torch.Tensor:
        return torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b, "sum", 0, d.group.group_name)

    return Case(shape, {"matmul": lambda: a @ b, "unfused": unfused, "fused": fused})


def make_cases(args, d: Dist) -> list[Case]:
    make = {"ag-matmul": ag_matmul, "matmul-rs": matmul_rs}
    if "fused" in args.variants:
        harness.enable_symm_mem(d)
    torch.manual_seed(1000 + d.rank)  # each rank its own shard
    return [make[op](Shape(op, model, M, *options.MODELS[model]), DTYPES[args.dtype], d)
            for op in args.ops for model in args.model_names for M in args.ms]


def check_fused(case: Case, args, d: Dist) -> float | None:
    """Fused against unfused (relative error by norm); None when only one variant runs."""
    if set(args.variants) != set(options.VARIANTS):
        return None
    want = case.calls["unfused"]().clone()
    got = case.calls["fused"]()
    return harness.check_close(f"{case.shape.op} {case.shape.label}", got, want, REL_TOL[args.dtype])


def measure(case: Case, variant: str, args, d: Dist) -> list[float]:
    """Each timed call (us) of one variant, after its warm-up calls, ranks lined up first."""
    harness.time_each_us(case.calls[variant], args.warmup, d.device)
    dist.barrier()
    with backends.region(f"{case.shape.op}_{variant}_{case.shape.label}"):
        return harness.time_each_us(case.calls[variant], args.iters, d.device)


def measure_all(cases: list[Case], variants: list[str], args, d: Dist) -> list[dict[str, list[float]]]:
    return [{v: measure(c, v, args, d) for v in variants} for c in cases]


def run(args: argparse.Namespace, d: Dist) -> None:
    cases = make_cases(args, d)
    errors = [check_fused(c, args, d) for c in cases]
    variants = ["matmul", *args.variants]
    profiled = args.backend != "none"
    with backends.session(args.backend, args.out, d.rank) as prof:
        # the same calls timed the same way with the profiler off: its cost (with none, the window is that)
        bare = measure_all(cases, variants, args, d) if profiled and args.unprofiled else None
        with prof.window():
            times = measure_all(cases, variants, args, d)
    medians = [{v: harness.median(t) for v, t in per_variant.items()} for per_variant in times]
    rows = [result_row(c, m, e, d) for c, m, e in zip(cases, medians, errors)]
    for i, row in enumerate(rows):
        row["step_times"] = {v: harness.window_step_times(bare[i][v] if bare else None, t, profiled, unit_ns=1e3)
                             for v, t in times[i].items()}
    if d.rank == 0:
        print("\n".join(_line(r) for r in rows), flush=True)
    results.write(args.out, d.rank, {
        "workload": "overlap", "rank": d.rank, "world_size": d.world_size, "dtype": args.dtype,
        "device": device_name(d.device), "torch": torch.__version__, "rows": rows})


def result_row(case: Case, medians: dict[str, float], rel_err: float | None, d: Dist) -> dict:
    s = case.shape
    us = {f"{v}_us": harness.max_over_ranks(t, d) for v, t in medians.items()}
    speedup = us["unfused_us"] / us["fused_us"] if "fused_us" in us and "unfused_us" in us else None
    return {"op": s.op, "model": s.model, "M": s.M, "N": s.N, "K": s.K, **us,
            "speedup": speedup, "rel_err": rel_err, "checked": rel_err is not None}


def _line(r: dict) -> str:
    times = "  ".join(f"{k[:-3]} {v:9.1f} us" for k, v in r.items() if k.endswith("_us"))
    speedup = "" if r["speedup"] is None else f"  speedup {r['speedup']:.2f}x"
    return f"{r['op']:>9} {r['model']:>5} M={r['M']:<6} N={r['N']:<5} K={r['K']:<6} {times}{speedup}"


def main(argv: list[str] | None = None) -> int:
    return harness.main("overlap", parse, run, argv, needs_group=True)


if __name__ == "__main__":
    from .common import exit_now

    exit_now(main())  # no interpreter finalization: see common.exit_now
