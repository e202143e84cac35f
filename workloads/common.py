"""What every workload program does the same way: find its rank, join the process
group, pick its device. Workloads run under torchrun (RANK, WORLD_SIZE, LOCAL_RANK in
the environment) or alone (one rank, no process group)."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist


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


def env_rank() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) as torchrun set them; (0, 1, 0) when run alone."""
    get = os.environ.get
    return int(get("RANK", 0)), int(get("WORLD_SIZE", 1)), int(get("LOCAL_RANK", 0))


def init_distributed() -> Dist:
    """Join the job torchrun started: NCCL and this rank's GPU when there are GPUs, else gloo on the CPU."""
    rank, world_size, local_rank = env_rank()
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    group = None
    if "MASTER_ADDR" in os.environ:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, device_id=device if device.type == "cuda" else None)
        group = dist.group.WORLD
    return Dist(rank, world_size, local_rank, device, group)


def close_distributed(d: Dist) -> None:
    """Wait for every rank, then leave. On GPUs the NCCL communicators are left to the process's
    end (exit_now follows): a compiled 2-GPU decode (CUDA graphs holding NCCL calls) never ended
    after both ranks had written their figures (H200 x2, torch 2.11, 2026-11-22). Either
    destroy_process_group or the runner's wait on a pipe that inductor's compile workers held
    open was stuck; both were changed, and the next 2-GPU rows ended normally."""
    if d.group is None:
        return
    if d.device.type == "cuda":
        torch.cuda.synchronize(d.device)
    dist.barrier()
    if d.device.type != "cuda":
        dist.destroy_process_group()


def exit_now(status: int) -> None:
    """End the program without interpreter finalization, once everything is written and the
    process group is gone: under load, gloo's threads sometimes abort the process during
    finalization ("terminate called without an active exception", SIGABRT), which torchrun
    reports as a failed rank although all the work was done (seen 1 run in 8 on a busy 2-core CPU)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"
