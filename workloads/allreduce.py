"""All-reduce, several ways, over a sweep of message sizes (the comparison of
symm-mem-recipes, github.com/yifuwang/symm-mem-recipes, and a gloo/NCCL benchmark as in
Stanford CS336's assignment 2): every result checked against the expected sum,
median latency (CUDA events per call over many calls; perf_counter on the CPU; the
slowest rank's median) and bus bandwidth 2*(n-1)/n * bytes / time.

  nccl             torch.distributed.all_reduce on CUDA tensors (NCCL), in place
  gloo             torch.distributed.all_reduce on CPU tensors (gloo), in place
  symm-one-shot    torch.ops.symm_mem.one_shot_all_reduce: each rank reads every peer's buffer
  symm-two-shot    torch.ops.symm_mem.two_shot_all_reduce_: reduce-scatter then all-gather, in place
  triton-one-shot  our Triton kernel over symmetric memory (triton_allreduce.py)
  multimem         torch.ops.symm_mem.multimem_all_reduce_: needs NVLink multicast (NVLS)

Times cover the collective alone: the input already sits in the (symmetric) buffer.
Buffers are set up, run once and checked before the profiled window; the window holds
the timed calls, one region allreduce_{impl}_{bytes} per size.

    tracelab run allreduce --ranks 2 -- --impl nccl,symm-one-shot,triton-one-shot --sizes 4K-1G
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from tracelab.run import backends

from tracelab.ingest import results
from tracelab.core.errors import RunError

from . import harness
from .common import Dist, device_name
from .options import allreduce as options
from .options.shared import human_bytes

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}  # options.DTYPES, as torch's types


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The options (options/allreduce.py), checked for this machine as torch sees it."""
    return options.parse(argv, torch.cuda.is_available())


@dataclass
class Case:
    """One implementation at one size, set up: `buf` takes this rank's input, run() returns the sum."""

    impl: str
    msg_bytes: int
    buf: torch.Tensor
    run: Callable[[], torch.Tensor]


def _symm_buffer(numel: int, dtype: torch.dtype, d: Dist):
    import torch.distributed._symmetric_memory as symm_mem
    buf = symm_mem.empty(numel, dtype=dtype, device=d.device)  # [numel]
    return buf, symm_mem.rendezvous(buf, d.group.group_name)


def make_case(impl: str, msg_bytes: int, dtype: torch.dtype, d: Dist) -> Case:
    numel = msg_bytes // torch.tensor([], dtype=dtype).element_size()
    name = d.group.group_name if d.group is not None else ""
    if impl in ("nccl", "gloo"):
        buf = torch.empty(numel, dtype=dtype, device=d.device if impl == "nccl" else "cpu")
        return Case(impl, msg_bytes, buf, lambda: (dist.all_reduce(buf), buf)[1])
    if impl == "triton-one-shot":
        from .triton_allreduce import TritonOneShot
        kernel = TritonOneShot(numel, dtype, d.device, d.group)
        return Case(impl, msg_bytes, kernel.buf, kernel)
    buf, handle = _symm_buffer(numel, dtype, d)
    ops = torch.ops.symm_mem
    if impl == "symm-one-shot":
        return Case(impl, msg_bytes, buf, lambda: ops.one_shot_all_reduce(buf, "sum", name))
    if impl == "symm-two-shot":
        return Case(impl, msg_bytes, buf, lambda: ops.two_shot_all_reduce_(buf, "sum", name))
    if not handle.multicast_ptr:  # multimem, asked for where multicast is allowed
        raise RunError("--impl multimem", "this machine's GPUs give no multicast address (no NVLS)")
    return Case(impl, msg_bytes, buf, lambda: ops.multimem_all_reduce_(buf, "sum", name))


def rank_input(numel: int, rank: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    # [numel]: (rank + 1) * (1..7 repeating): small integers, exact in bf16 up to 8 ranks
    return ((torch.arange(numel, dtype=torch.int32, device=device) % 7 + 1) * (rank + 1)).to(dtype)


def check_sum(case: Case, d: Dist, dtype: torch.dtype) -> float:
    """Run once on fresh input; max |got - expected| / max |expected| (RunError when past
    the dtype's tolerance, or NaN). Computed on the device: a 1 GB message stays there."""
    numel = case.buf.numel()
    case.buf.copy_(rank_input(numel, d.rank, dtype, case.buf.device))
    harness.synchronize(d.device)
    if d.group is not None:
        dist.barrier()  # every rank's input is in place before anyone reads it
    got = case.run().float()
    want = rank_input(numel, 0, torch.float32, got.device) * (d.world_size * (d.world_size + 1) // 2)
    err = float((got - want).abs().max() / want.abs().max())
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-6
    if not err <= tol:
        raise RunError(f"{case.impl} at {human_bytes(case.msg_bytes)}",
                       f"wrong sum: max relative error {err:.3g} > {tol:g}")
    return err


def pick_iters(case: Case, args, d: Dist) -> int:
    if args.iters:
        return args.iters
    est_us = harness.median(harness.time_each_us(case.run, 3, d.device))
    n = int(harness.max_over_ranks(min(500, max(5, 50_000 / max(est_us, 1e-3))), d))
    return n  # the same on every rank: collectives must pair up


def measure(case: Case, iters: int, d: Dist) -> list[float]:
    """Per-call times (us) of `iters` calls, after a short warm-up, ranks lined up first."""
    harness.time_each_us(case.run, 3, d.device)
    if d.group is not None:
        dist.barrier()
    with backends.region(f"allreduce_{case.impl}_{case.msg_bytes}"):
        return harness.time_each_us(case.run, iters, d.device)


def result_row(case: Case, times_us: list[float], rel_err: float, d: Dist) -> dict:
    rank_median_us = harness.median(times_us)
    latency_us = harness.max_over_ranks(rank_median_us, d)  # the slowest rank's
    algbw = case.msg_bytes / (latency_us * 1e-6) / 1e9
    n = d.world_size
    return {"impl": case.impl, "msg_bytes": case.msg_bytes, "iters": len(times_us), "latency_us": latency_us,
            "rank_latency_us": rank_median_us, "algbw_gb_s": algbw, "busbw_gb_s": algbw * 2 * (n - 1) / n,
            "checked": True, "rel_err": rel_err}


def run(args: argparse.Namespace, d: Dist) -> None:
    dtype = DTYPES[args.dtype]
    if options.GPU_IMPLS - {"nccl"} & set(args.impls):
        harness.enable_symm_mem(d)
    cases = [make_case(impl, n, dtype, d) for impl in args.impls for n in args.msg_bytes]
    errors = [check_sum(c, d, dtype) for c in cases]
    profiled = args.backend != "none"
    with backends.session(args.backend, args.out, d.rank) as prof:
        iters = [pick_iters(c, args, d) for c in cases]
        # the same calls timed the same way with the profiler off: its cost (with none, the window is that)
        bare = [measure(c, n, d) for c, n in zip(cases, iters)] if profiled and args.unprofiled else None
        with prof.window():
            times = [measure(c, n, d) for c, n in zip(cases, iters)]
    rows = [result_row(c, t, e, d) for c, t, e in zip(cases, times, errors)]
    for i, row in enumerate(rows):
        row.update(harness.window_step_times(bare[i] if bare else None, times[i], profiled, unit_ns=1e3))
    if d.rank == 0:
        print("\n".join(_line(r) for r in rows), flush=True)
    results.write(args.out, d.rank, {
        "workload": "allreduce", "rank": d.rank, "world_size": d.world_size, "dtype": args.dtype,
        "device": device_name(d.device), "torch": torch.__version__, "rows": rows,
        "busbw_formula": "2*(n-1)/n * msg_bytes / latency; latency = slowest rank's median"})


def _line(r: dict) -> str:
    return (f"{r['impl']:>16} {human_bytes(r['msg_bytes']):>6}  {r['latency_us']:10.1f} us  "
            f"busbw {r['busbw_gb_s']:8.2f} GB/s  ({r['iters']} calls, checked)")


def main(argv: list[str] | None = None) -> int:
    return harness.main("allreduce", parse, run, argv, needs_group=True)


if __name__ == "__main__":
    from .common import exit_now

    exit_now(main())  # no interpreter finalization: see common.exit_now
