#!/usr/bin/env python3
"""One training step of the train workload (workloads/train.py: TrainLM, AdamW(capturable=True),
fp32, forward + backward + optimizer) timed WITHOUT a profiler three ways: eager, as one
whole-step CUDA graph (torch.cuda.graphs), and under torch.compile(mode="reduce-overhead") if
it compiles. What `tracelab whatif --scenario no-host-gaps` of an eager trace of the same step
(`tracelab run train -- --capturable ...`) is checked against (issue 27).

    python benchmarks/whatif_graph_step.py --size tiny --batch-size 1 --steps 30
    # one JSON line per mode: {"mode", "step_ms_median", "step_ms", ...}

Each step is timed as the train workload times it: the device synchronised before and after.
On a machine without a GPU only the eager step runs (the others say why, one line each).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from tracelab.workloads.lm import SIZES, TrainLM, loss_fn, model_args


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(step, n: int, device: torch.device) -> list[float]:
    out = []
    for _ in range(n):
        sync(device)
        t0 = time.perf_counter()
        step()
        sync(device)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def setup(args, device: torch.device):
    torch.manual_seed(0)
    with device:
        model = TrainLM(model_args(SIZES[args.size], args.vocab_size, args.context_length))
    tokens = torch.randint(args.vocab_size, (args.batch_size, args.context_length + 1), device=device)
    opt = torch.optim.AdamW(model.parameters(), capturable=device.type == "cuda")
    return model, opt, tokens[:, :-1], tokens[:, 1:]  # x, y: [B, S]


def eager(args, device):
    model, opt, x, y = setup(args, device)

    def step():
        loss_fn(model(x), y).backward()
        opt.step()
        model.zero_grad(set_to_none=True)
    return step


def graphed(args, device):
    """The whole step captured once (PyTorch's 'whole network capture'), replayed."""
    model, opt, x, y = setup(args, device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss_fn(model(x), y).backward()
        opt.step()
    return graph.replay


def compiled(args, device):
    model, opt, x, y = setup(args, device)
    fast = torch.compile(model, mode="reduce-overhead")
    opt_step = torch.compile(opt.step)

    def step():
        loss_fn(fast(x), y).backward()
        opt_step()
        model.zero_grad(set_to_none=True)
    return step


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="tiny", choices=list(SIZES))
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--context-length", type=int, default=256)
    p.add_argument("--vocab-size", type=int, default=10000)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--modes", default="eager,cuda_graph,compile_reduce_overhead")
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    makers = {"eager": eager, "cuda_graph": graphed, "compile_reduce_overhead": compiled}
    for mode in args.modes.split(","):
        if mode != "eager" and device.type != "cuda":
            print(json.dumps({"mode": mode, "skipped": "needs a GPU"}))
            continue
        try:
            step = makers[mode](args, device)
            timed(step, args.warmup, device)
            ms = timed(step, args.steps, device)
        except Exception as e:  # a mode that does not build (compile) is reported, not fatal
            print(json.dumps({"mode": mode, "failed": f"{type(e).__name__}: {e}"[:400]}))
            continue
        print(json.dumps({"mode": mode, "size": args.size, "batch_size": args.batch_size,
                          "context_length": args.context_length, "device": str(device),
                          "step_ms_median": statistics.median(ms), "step_ms_min": min(ms), "step_ms": ms}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
