"""One decode step's weight products on a GPU, one shape at a time: cuBLAS (F.linear),
inductor's coordinate-descent-tuned reduction (what gpt-fast's compiled decode uses) and
tracelab's Triton kernel (workloads/gemv.py). Weight GB/s = weight bytes / median time;
several copies of each weight rotate so the 50 MB L2 cannot hold them.

    python benchmarks/gemv_bench.py --model llama-2-7b      # on a GPU; prints a table
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from tracelab.workloads.gemv import gemv
from tracelab.workloads.model import CONFIGS

ROTATE_BYTES = 256 * 2**20  # copies of a weight until they span this much


def shapes(model: str) -> dict[str, tuple[int, int, int]]:
    """name -> (N, K, times per token) for one rank of the model."""
    a = CONFIGS[model]
    qkv = (a.n_head + 2 * a.kv_heads) * a.head_dim
    return {"wqkv": (qkv, a.dim, a.n_layer), "wo": (a.dim, a.n_head * a.head_dim, a.n_layer),
            "w1": (a.hidden_dim, a.dim, a.n_layer), "w3": (a.hidden_dim, a.dim, a.n_layer),
            "w2": (a.dim, a.hidden_dim, a.n_layer), "output": (a.vocab_size, a.dim, 1)}


def inductor_linear():
    import torch._inductor.config as inductor
    inductor.coordinate_descent_tuning = True
    return torch.compile(lambda x, w: F.linear(x, w), dynamic=False)


def bench(fn, x: torch.Tensor, weights: list[torch.Tensor]) -> float:
    """Median milliseconds of fn(x, w), w rotating through the copies."""
    turn = [0]

    def step():
        turn[0] = (turn[0] + 1) % len(weights)
        fn(x, weights[turn[0]])

    return do_bench(step, warmup=50, rep=200, return_mode="median")


def check(y: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> float:
    ref = x.double() @ w.double().T
    return float((y.double() - ref).norm() / ref.norm())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="llama-2-7b", choices=list(CONFIGS))
    p.add_argument("--rows", type=int, default=1)
    args = p.parse_args()
    impls = {"cublas": F.linear, "inductor": inductor_linear(), "triton": gemv}
    total_ms = dict.fromkeys(impls, 0.0)
    print(f"{'weight':8} {'N x K':>13} " + " ".join(f"{k + ' us':>12} {'GB/s':>7}" for k in impls) + "  rel.err")
    for name, (n, k, per_token) in shapes(args.model).items():
        w0 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        copies = max(2, -(-ROTATE_BYTES // w0.nbytes))
        weights = [w0] + [torch.randn_like(w0) * 0.02 for _ in range(copies - 1)]
        x = torch.randn(args.rows, k, device="cuda", dtype=torch.bfloat16)
        y = torch.full((args.rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        y.copy_(gemv(x, w0))
        err = check(y, x, w0)
        cells = []
        for impl, fn in impls.items():
            ms = bench(fn, x, weights)
            total_ms[impl] += ms * per_token
            cells.append(f"{ms * 1e3:12.1f} {w0.nbytes / ms / 1e6:7.0f}")
        print(f"{name:8} {n:>6}x{k:<6} " + " ".join(cells) + f"  {err:.1e}")
    print("per token (all layers): " + ", ".join(f"{k} {v:.3f} ms" for k, v in total_ms.items()))


if __name__ == "__main__":
    main()
