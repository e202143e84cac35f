"""A single-stream CUDA graph captured inside named regions, replayed in steps, plus eager passes:
the ground truth for attributing CUDA-graph replays to their capture-time scopes (issue 24).

    python benchmarks/graph_scopes.py --backend torch|nsys --out DIR [--capture inside|outside]

Four layers (Linear -> GELU -> LayerNorm; 3 kernels or more each) are captured into one graph,
each inside a region `layer0`..`layer3` (record_function for torch, NVTX for nsys), within a
region `capture`. Then `--steps` steps (`step N` regions) each replay the graph `--replays` times
and run one eager pass of the same layers in regions `eager/layerI`. With `--capture outside`
the capture happens before the profiler starts: the trace holds the replays only.
Writes the trace and expected.results.json (layers, steps, replays, capture placement).
"""
from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

import torch


@contextlib.contextmanager
def region(backend, name):
    if backend == "nsys":
        torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            torch.cuda.nvtx.range_pop()
    else:
        with torch.profiler.record_function(name):
            yield


def layers(n, width):
    return [torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.LayerNorm(width))
            .cuda() for _ in range(n)]


def forward(backend, stack, x, prefix=""):
    for i, layer in enumerate(stack):
        with region(backend, f"{prefix}layer{i}"):
            x = layer(x)
    return x


def capture(backend, stack, x):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on a side stream, as torch.cuda.graphs asks
        for _ in range(3):
            forward("none", stack, x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with region(backend, "capture"), torch.cuda.graph(g):
        y = forward(backend, stack, x)
    return g, y


def start(backend, out):
    if backend == "nsys":
        torch.cuda.profiler.start()
        return None
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    prof = torch.profiler.profile(activities=acts, record_shapes=True)
    prof.start()
    return prof


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=["torch", "nsys"], required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--capture", choices=["inside", "outside"], default="inside")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--replays", type=int, default=1)
    p.add_argument("--width", type=int, default=1024)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    stack = layers(args.layers, args.width)
    x = torch.randn(64, args.width, device="cuda")  # [tokens, width], static input of the graph
    g = None
    if args.capture == "outside":
        g, _ = capture(args.backend, stack, x)
    torch.cuda.synchronize()
    prof = start(args.backend, args.out)
    if g is None:
        g, _ = capture(args.backend, stack, x)
    for step in range(args.steps):
        with region(args.backend, f"step {step}"):
            for _ in range(args.replays):
                g.replay()
            with region(args.backend, "eager"):
                forward(args.backend, stack, x)
        torch.cuda.synchronize()
    finish(prof, args, ("capture", "layers", "steps", "replays", "width"))


def finish(prof, args, keys) -> None:
    """Stop the profiler (writing torch's trace), then expected.results.json: the options
    named by `keys`, the device and torch's version."""
    if prof is None:
        torch.cuda.profiler.stop()
    else:
        prof.stop()
        prof.export_chrome_trace(str(args.out / "rank0.pt.trace.json.gz"))
    expected = {k: getattr(args, k) for k in keys}
    expected.update(device=torch.cuda.get_device_name(), torch=torch.__version__)
    (args.out / "expected.results.json").write_text(json.dumps(expected, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
