"""Training steps of a transformer LM, benchmarked as Stanford CS336's assignment 2 does:
its sizes small..2.7B, forward / forward+backward / full step with AdamW, warm-up steps
(0 shows the cold start), fp32 or bf16 autocast, and data parallel over ranks
(naive, flat, overlap, bucketed: see ddp.py). Per step: mean and std of the time
(synchronised around each step on a GPU), peak memory, model FLOPs utilisation.

    python -m tracelab.workloads.train --size small --phase forward-backward --dtype bf16
    tracelab run train --ranks 2 -- --size small --ddp naive,flat,overlap,bucketed

--size, --phase, --dtype and --ddp take comma lists (a sweep, one model at a time);
a profiled run (--backend other than none) takes one of each.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import time

import torch

from tracelab.run import backends

from tracelab.ingest import results

from . import harness, late, train_memory, train_speed
from .common import Dist, device_name
from .options import train as options
from .ddp import broadcast_parameters, make_sync
from .configs import SIZES
from .lm import TrainLM, loss_fn, model_args, model_flops

# Dense peak TFLOP/s of an H100/H200 SXM by its datasheet: an assumption, not a measurement.
HOPPER_PEAK_TFLOPS = {"bf16": 989.4, "tf32": 494.7, "fp32": 66.9}
MFU_FORMULA = ("PaLM model FLOPs: (6*N + 12*L*d*S) per token for forward+backward, a third of that "
               "for forward; N = matrix-product parameters (output projection in, embedding out)")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The options (options/train.py), checked for this machine as torch sees it."""
    return options.parse(argv, torch.cuda.is_available())


def peak_tflops(args: argparse.Namespace, dtype: str, d: Dist) -> tuple[float | None, str]:
    if args.peak_tflops is not None:
        return args.peak_tflops, "given (--peak-tflops)"
    name = device_name(d.device)
    if not any(chip in name for chip in ("H100", "H200")):
        return None, f"unknown for {name}: give --peak-tflops"
    tf32 = dtype == "fp32" and torch.get_float32_matmul_precision() != "highest"
    key = "tf32" if tf32 else dtype
    return HOPPER_PEAK_TFLOPS[key], f"assumed: H100/H200 SXM datasheet dense {key} peak"


def make_step(model, batch, phase: str, dtype: str, sync, optimizer, device: torch.device, extra=None, hold=None,
              before_sync=None):
    """One training step of `phase`, its phases marked as regions; `extra(i)` (late_work)
    runs before the backward of the i-th call, `before_sync(i)` (late.stall_before_sync) after it,
    before its gradient sync; `hold()` (train_memory.held) is open through it."""
    x, y = batch  # [B, S] token ids and next-token targets
    cast = torch.autocast(device.type, dtype=torch.bfloat16) if dtype == "bf16" else contextlib.nullcontext()
    calls = [0]
    # proton's FLOPs of one forward (the PaLM count, lm.model_flops); not the backward: proton
    # files autograd's kernels under the autograd thread's scopes, not under "backward"
    work = {"flops16" if dtype == "bf16" else "flops32":
            model_flops(getattr(model, "_orig_mod", model), x.numel(), x.shape[1], backward=False)}

    def held_step() -> None:
        with hold() if hold is not None else contextlib.nullcontext():
            step()

    def step() -> None:
        with backends.region("forward", work), cast:
            loss = loss_fn(model(x), y)
        if phase == "forward":
            return
        if extra is not None:
            extra(calls[0])
        calls[0] += 1
        if sync is not None:
            sync.before_backward()
        with backends.region("backward"):
            loss.backward()
        if before_sync is not None:
            before_sync(calls[0] - 1)
        if sync is not None:
            with backends.region("grad_sync"):
                sync.finish()
        if optimizer is not None:
            with backends.region("optimizer"):
                optimizer.step()
        model.zero_grad(set_to_none=True)

    return held_step


def timed_steps(step, n: int, device: torch.device, memory=None, first: int = 0) -> list[float]:
    """Milliseconds of each of n steps (named `step {first}` on), the device synchronised before
    and after each; `memory` (train_memory.StepMemory) reads the allocator's counters around each."""
    out = []
    for i in range(first, first + n):
        harness.synchronize(device)
        if memory is not None:
            memory.before()
        t0 = time.perf_counter()
        with backends.region(f"step {i}"):  # the step tracelab reads (parsers/_steps.py)
            step()
        harness.synchronize(device)
        out.append((time.perf_counter() - t0) * 1e3)
        if memory is not None:
            memory.after()
    return out


def build(args, size: str, phase: str, ddp: str, d: Dist):
    torch.manual_seed(args.seed)
    with d.device:  # weights made where they live: an xl model inits in seconds on a GPU, not minutes
        model = TrainLM(model_args(SIZES[size], args.vocab_size, args.context_length))
    sync = None
    if ddp != "none":
        broadcast_parameters(model)
        sync = make_sync(ddp, model, args.bucket_mb)
    optimizer = torch.optim.AdamW(model.parameters(), capturable=args.capturable) if phase == "step" else None
    g = torch.Generator().manual_seed(args.seed + 1 + d.rank)  # each rank its own share of the batch
    local = args.batch_size // d.world_size
    tokens = torch.randint(args.vocab_size, (local, args.context_length + 1), generator=g).to(d.device)
    return model, (tokens[:, :-1], tokens[:, 1:]), sync, optimizer


def run_config(args, cfg: dict, d: Dist, prof) -> dict:
    model, batch, sync, optimizer = build(args, cfg["size"], cfg["phase"], cfg["ddp"], d)
    if args.module_scopes:
        train_memory.module_scopes(model)
    extra = late.extra(args, d.rank, d.device)
    step = make_step(train_speed.prepare(model, args), batch, cfg["phase"], cfg["dtype"], sync, optimizer,
                     d.device, extra, train_memory.held(args.extra_memory.get(d.rank), d.device),
                     late.stall_before_sync(args, d.rank, d.device))
    if args.cuda_graph:
        step = train_speed.graphed(step, d.device)
    if d.gpu:
        torch.cuda.reset_peak_memory_stats(d.device)
    timed_steps(step, args.warmup, d.device)
    # the same steps timed the same way with the profiler off: its cost (with none, the window is that)
    # and each phase (region) of them, on the host's clock alone: each phase's own slowdown under the profiler
    unprofiled_ms, bare = None, None
    if prof is not None and args.unprofiled:
        with backends.clocked() as bare:
            unprofiled_ms = timed_steps(step, args.steps, d.device)
    warm_peak = torch.cuda.max_memory_allocated(d.device) if d.gpu else None
    memory = train_memory.StepMemory(d.device)
    with prof.window() if prof is not None else contextlib.nullcontext(), backends.clocked() as window:
        step_ms = timed_steps(step, args.steps - 1, d.device, memory)
        with train_memory.snapshot(args.memory_snapshot, args.out, d.rank) as snap:  # the last step
            step_ms += timed_steps(step, 1, d.device, memory, first=args.steps - 1)
    row = result_row(args, cfg, model, step_ms, d)
    row.update(memory.figures, memory_snapshot=None if snap is None else snap.name)
    row.update(harness.window_step_times(unprofiled_ms, step_ms, prof is not None, unit_ns=1e6))
    row.update(harness.window_region_times(bare, window, prof is not None))
    if d.gpu:
        row["peak_mem_bytes"] = max([warm_peak, *memory.figures["step_peak_allocated_bytes"]])
    del model, batch, sync, optimizer, step
    gc.collect()
    if d.gpu:
        torch.cuda.empty_cache()
    return row


def result_row(args, cfg: dict, model: TrainLM, step_ms: list[float], d: Dist) -> dict:
    mean_ms = statistics.mean(step_ms)
    tokens = args.batch_size // d.world_size * args.context_length
    flops = model_flops(model, tokens, args.context_length, backward=cfg["phase"] != "forward")
    peak, peak_source = peak_tflops(args, cfg["dtype"], d)
    achieved_tflops = flops / (mean_ms * 1e-3) / 1e12
    return {**cfg, "params": sum(p.numel() for p in model.parameters()),
            "batch_size": args.batch_size, "context_length": args.context_length,
            "warmup": args.warmup, "steps": args.steps, "step_ms": step_ms,
            "step_ms_mean": mean_ms, "step_ms_std": statistics.stdev(step_ms) if len(step_ms) > 1 else 0.0,
            "first_step_ms": step_ms[0], "tokens_per_s": tokens / (mean_ms * 1e-3),
            "model_tflop_per_step": flops / 1e12, "achieved_tflops": achieved_tflops,
            "peak_tflops": peak, "peak_source": peak_source,
            "mfu": None if peak is None else achieved_tflops / peak,
            "peak_mem_bytes": torch.cuda.max_memory_allocated(d.device) if d.gpu else None}


def configs(args) -> list[dict]:
    return [{"size": s, "phase": ph, "dtype": dt, "ddp": dp}
            for s in args.sizes for dt in args.dtypes for ph in args.phases for dp in args.ddps]


def run(args: argparse.Namespace, d: Dist) -> None:
    rows = []
    train_speed.set_precision(args)
    with backends.session(args.backend, args.out, d.rank) as prof:
        for cfg in configs(args):
            rows.append(run_config(args, cfg, d, prof if args.backend != "none" else None))
            if d.rank == 0:
                print(_line(rows[-1]), flush=True)
    results.write(args.out, d.rank, {
        "workload": "train", "rank": d.rank, "world_size": d.world_size, "device": device_name(d.device),
        "torch": torch.__version__, "mfu_formula": MFU_FORMULA, "bucket_mb": args.bucket_mb,
        "late": args.late, "late_work": args.late_work, "host_stall_ms": args.host_stall_ms,
        "host_stall_unmarked": args.host_stall_unmarked, "host_stall_before_sync": args.host_stall_before_sync,
        "late_every": args.late_every,
        "capturable": args.capturable, "cuda_graph": args.cuda_graph, "compile": args.compile, "tf32": args.tf32,
        "attention": args.attention, "rows": rows,
        "extra_memory_mb": {str(r): mib for r, mib in args.extra_memory.items()}})


def _line(r: dict) -> str:
    mfu = "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
    mem = "-" if r["peak_mem_bytes"] is None else f"{r['peak_mem_bytes'] / 2**30:.1f} GiB"
    return (f"{r['size']:>6} {r['dtype']:>4} {r['phase']:>16} ddp={r['ddp']:<8} "
            f"{r['step_ms_mean']:9.2f} ms +- {r['step_ms_std']:6.2f} (first {r['first_step_ms']:.1f})  "
            f"MFU {mfu}  peak mem {mem}")


def main(argv: list[str] | None = None) -> int:
    return harness.main("train", parse, run, argv)


if __name__ == "__main__":
    from .common import exit_now

    exit_now(main())  # no interpreter finalization: see common.exit_now
