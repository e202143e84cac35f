"""What every workload program does the same way: find its rank, join and leave the
process group (the one place that sets it up), pick its device, end the process.
Workloads run under torchrun (RANK, WORLD_SIZE, LOCAL_RANK in the environment) or
alone (one rank, no process group unless the workload needs one)."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from .options.shared import env_rank


@dataclass(frozen=True)
class Dist:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    group: dist.ProcessGroup | None  # None when running alone

    @property
    def gpu(self) -> bool:
        return self.device.type == "cuda"


def join(timeout_s: float, needs_group: bool = False) -> Dist:
    """This rank's device, and the process group when torchrun started the ranks (or a
    group of one when run alone and needs_group): gloo for CPU tensors and NCCL for CUDA
    tensors on a GPU machine, gloo alone on the CPU. Collectives that wait longer than
    timeout_s fail instead of hanging."""
    from tracelab.core.errors import UsageError

    rank, world_size, local_rank = env_rank()
    device = torch.device("cpu")
    if torch.cuda.is_available():
        if local_rank >= torch.cuda.device_count():
            raise UsageError("--ranks", f"rank {rank} needs GPU {local_rank} but "
                                        f"{torch.cuda.device_count()} are visible")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    gpu = device.type == "cuda"
    backend = "cpu:gloo,cuda:nccl" if gpu else "gloo"
    options = {"backend": backend, "timeout": timedelta(seconds=timeout_s), "device_id": device if gpu else None}
    group = None
    if "MASTER_ADDR" in os.environ:
        dist.init_process_group(**options)
        group = dist.group.WORLD
    elif needs_group:
        dist.init_process_group(**options, store=dist.HashStore(), rank=0, world_size=1)
        group = dist.group.WORLD
    return Dist(rank, world_size, local_rank, device, group)


def leave(d: Dist) -> None:
    """Wait for every rank, then leave the group. On GPUs the NCCL communicators are left to
    the process's end (exit_now follows): destroying them after a compiled decode, whose CUDA
    graphs hold NCCL calls, could wait forever."""
    if d.group is None or not dist.is_initialized():
        return
    if d.gpu:
        torch.cuda.synchronize(d.device)
    dist.barrier()
    if not d.gpu:
        dist.destroy_process_group()


def exit_now(status: int) -> None:
    """End the program without interpreter finalization, once everything is written and the
    process group is gone: under load, gloo's threads sometimes abort the process during
    finalization ("terminate called without an active exception", SIGABRT), which torchrun
    would report as a failed rank although all the work was done."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"
