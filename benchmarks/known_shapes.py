"""GPU work of known shapes, each op in a region of its own, under one profiler: the ground truth
for `tracelab roofline` (issue 20). Writes the trace and `expected.results.json` (per region: the op, its
shapes and dtype, FLOPs and bytes per call by the textbook formulas, calls).

    python benchmarks/known_shapes.py --backend torch|proton|nsys|none --out DIR [--repeat 5]

Regions are record_function ranges (torch), NVTX ranges (nsys; aten ops also as NVTX ranges with
their shapes through emit_nvtx(record_shapes=True)) and proton scopes carrying `flops16`/`flops32`
and `bytes` metrics (proton-viewer derives tflop/s and tbytes/s from them).
Needs a CUDA GPU. Shapes in comments; sizes chosen so each op runs 10 us to a few ms on an H100.
"""
from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

import torch
import torch.nn.functional as F

BF16, FP32 = torch.bfloat16, torch.float32
SIZE = {BF16: 2, FP32: 4}
FLOPS_KEY = {BF16: "flops16", FP32: "flops32"}


def mm_case(name, m, n, k, dtype):
    a = torch.randn(m, k, device="cuda", dtype=dtype)  # [M, K]
    b = torch.randn(k, n, device="cuda", dtype=dtype)  # [K, N]
    return name, "aten::mm", lambda: torch.mm(a, b), dict(
        shapes=[[m, k], [k, n]], dtype=str(dtype), flops=2 * m * n * k,
        bytes=(m * k + k * n + m * n) * SIZE[dtype])


def linear_case(name, m, n, k, dtype):
    x = torch.randn(m, k, device="cuda", dtype=dtype)  # [M, K]
    w = torch.randn(n, k, device="cuda", dtype=dtype)  # [N, K]
    bias = torch.randn(n, device="cuda", dtype=dtype)  # [N]
    return name, "aten::addmm", lambda: F.linear(x, w, bias), dict(
        shapes=[[m, k], [n, k], [n]], dtype=str(dtype), flops=2 * m * n * k,
        bytes=(m * k + k * n + m * n + n) * SIZE[dtype])


def bmm_case(name, b, m, n, k, dtype):
    x = torch.randn(b, m, k, device="cuda", dtype=dtype)  # [B, M, K]
    y = torch.randn(b, k, n, device="cuda", dtype=dtype)  # [B, K, N]
    return name, "aten::bmm", lambda: torch.bmm(x, y), dict(
        shapes=[[b, m, k], [b, k, n]], dtype=str(dtype), flops=2 * b * m * n * k,
        bytes=b * (m * k + k * n + m * n) * SIZE[dtype])


def gemv_case(name, n, k, dtype):
    w = torch.randn(n, k, device="cuda", dtype=dtype)  # [N, K]
    v = torch.randn(k, device="cuda", dtype=dtype)  # [K]
    return name, "aten::mv", lambda: torch.mv(w, v), dict(
        shapes=[[n, k], [k]], dtype=str(dtype), flops=2 * n * k, bytes=(n * k + k + n) * SIZE[dtype])


def add_case(name, numel, dtype):
    x = torch.randn(numel, device="cuda", dtype=dtype)
    y = torch.randn(numel, device="cuda", dtype=dtype)
    return name, "aten::add", lambda: torch.add(x, y), dict(
        shapes=[[numel], [numel]], dtype=str(dtype), flops=numel, bytes=3 * numel * SIZE[dtype])


def gelu_case(name, numel, dtype):
    x = torch.randn(numel, device="cuda", dtype=dtype)
    return name, "aten::gelu", lambda: F.gelu(x), dict(
        shapes=[[numel]], dtype=str(dtype), flops=None, bytes=2 * numel * SIZE[dtype])


def sum_case(name, rows, cols, dtype):
    x = torch.randn(rows, cols, device="cuda", dtype=dtype)  # [R, C] -> [R]
    return name, "aten::sum", lambda: x.sum(dim=1), dict(
        shapes=[[rows, cols]], dtype=str(dtype), flops=rows * cols, bytes=(rows * cols + rows) * SIZE[dtype])


def sdpa_case(name, b, h, s, d, dtype):
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))  # [B, H, S, D]
    return name, "aten::scaled_dot_product_attention", lambda: F.scaled_dot_product_attention(q, k, v), dict(
        shapes=[[b, h, s, d]] * 3, dtype=str(dtype), flops=4 * b * h * s * s * d,
        bytes=4 * b * h * s * d * SIZE[dtype])


def copy_cases():
    n = 64 * 2**20  # 64 Mi floats: 256 MiB
    host = torch.empty(n, dtype=FP32).pin_memory()
    dev = torch.empty(n, device="cuda", dtype=FP32)
    dev2 = torch.empty(n, device="cuda", dtype=FP32)
    nbytes = n * 4
    return [
        ("copy_h2d", "aten::copy_", lambda: dev.copy_(host, non_blocking=True), dict(bytes=nbytes, flops=None)),
        ("copy_d2h", "aten::copy_", lambda: host.copy_(dev, non_blocking=True), dict(bytes=nbytes, flops=None)),
        ("copy_d2d", "aten::copy_", lambda: dev2.copy_(dev), dict(bytes=2 * nbytes, flops=None)),
        ("fill_zero", "aten::zero_", lambda: dev2.zero_(), dict(bytes=nbytes, flops=None))  # a fill kernel, not cudaMemset,
    ]


def cases():
    return [
        mm_case("gemm_square_bf16", 8192, 8192, 8192, BF16),
        mm_case("gemm_square_fp32", 4096, 4096, 4096, FP32),
        mm_case("gemm_skinny_bf16", 16, 14336, 4096, BF16),
        linear_case("linear_bf16", 2048, 11008, 4096, BF16),
        bmm_case("bmm_bf16", 32, 1024, 1024, 128, BF16),
        gemv_case("gemv_bf16", 14336, 4096, BF16),
        add_case("add_bf16", 128 * 2**20, BF16),
        gelu_case("gelu_bf16", 128 * 2**20, BF16),
        sum_case("sum_fp32", 8192, 8192, FP32),
        sdpa_case("sdpa_bf16", 4, 32, 2048, 128, BF16),
        *copy_cases(),
    ]


@contextlib.contextmanager
def region(backend, name, meta):
    """One named region, as each profiler sees it (proton: with the op's metrics)."""
    if backend == "proton":
        import triton.profiler as proton
        metrics = {}
        if meta.get("flops"):
            metrics[FLOPS_KEY[BF16 if "bfloat16" in meta.get("dtype", "") else FP32]] = meta["flops"]
        if meta.get("bytes"):
            metrics["bytes"] = meta["bytes"]
        with proton.scope(name, metrics):
            yield
    elif backend == "nsys":
        torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            torch.cuda.nvtx.range_pop()
    else:
        with torch.profiler.record_function(name):
            yield


def profiler(backend, out: Path):
    if backend == "torch":
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        return torch.profiler.profile(activities=acts, record_shapes=True)
    if backend == "proton":
        import triton.profiler as proton
        proton.start(str(out / "rank0"), hook="triton")
        proton.deactivate()
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=["torch", "proton", "nsys", "none"], required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = cases()
    for _, _, fn, _ in work:  # warm-up: cuBLAS handles, autotuning, allocator
        fn(); fn()
    torch.cuda.synchronize()
    prof = profiler(args.backend, args.out)
    if prof is not None:
        prof.start()
    if args.backend == "proton":
        import triton.profiler as proton
        proton.activate()
    if args.backend == "nsys":
        torch.cuda.profiler.start()
    nvtx = torch.autograd.profiler.emit_nvtx(record_shapes=True) if args.backend == "nsys" else contextlib.nullcontext()
    with nvtx:
        for name, op, fn, meta in work:
            for _ in range(args.repeat):  # a region per call: proton adds a scope's metrics per entry
                with region(args.backend, name, meta):
                    fn()
            torch.cuda.synchronize()
    if args.backend == "nsys":
        torch.cuda.profiler.stop()
    if prof is not None:
        prof.stop()
        prof.export_chrome_trace(str(args.out / "rank0.pt.trace.json.gz"))
    if args.backend == "proton":
        import triton.profiler as proton
        proton.finalize()
    expected = {name: {"op": op, "calls": args.repeat, **meta} for name, op, _, meta in work}
    device = {"name": torch.cuda.get_device_name(), "torch": torch.__version__}
    (args.out / "expected.results.json").write_text(json.dumps({"device": device, "regions": expected}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
