"""What the machine has: GPUs, versions, and the default backend. Knows nothing of runs."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path

from tracelab.core.errors import ToolMissingError

# device nodes of a GPU driver (NVIDIA, AMD ROCm, WSL): with none of them torch sees no GPU
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


def _torch():
    """torch, or ToolMissingError: the one-line "needs PyTorch" (also when its import fails)."""
    try:
        import torch
    except ImportError as e:
        raise ToolMissingError("torch", f"tracelab run needs PyTorch (pip install 'tracelab[run]'): {e}") from None
    return torch


def require_torch() -> None:
    _torch()


def no_gpu_for_sure() -> bool:
    """True when no GPU can be visible, decided without importing torch: no driver device
    node, or CUDA_VISIBLE_DEVICES hides them all."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return True
    return not any(Path(node).exists() for node in GPU_DEVICE_NODES)


def gpu_count() -> int:
    """CUDA GPUs this process sees (CUDA_VISIBLE_DEVICES respected); 0 without CUDA."""
    torch = _torch()
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def default_backend(gpus: int) -> str:
    """proton where there is a GPU and triton, else torch.profiler."""
    return "proton" if gpus and importlib.util.find_spec("triton") is not None else "torch"


def devices(gpus: int) -> list[dict]:
    torch = _torch()
    if not gpus:
        return [{"index": -1, "name": platform.processor() or platform.machine(), "cores": os.cpu_count()}]
    out = []
    for i in range(gpus):
        prop = torch.cuda.get_device_properties(i)
        out.append({"index": i, "name": prop.name, "sm_count": prop.multi_processor_count,
                    "memory_bytes": prop.total_memory, "capability": f"{prop.major}.{prop.minor}"})
    return out


def _version(dist_name: str) -> str | None:
    try:
        return importlib.metadata.version(dist_name)
    except importlib.metadata.PackageNotFoundError:
        return None


def nsys_version(nsys: Path) -> str | None:
    done = subprocess.run([str(nsys), "--version"], capture_output=True, text=True)
    return done.stdout.strip() or None


def load_per_cpu() -> float | None:
    """The 1-minute load average over the CPUs this process may use: what else the machine was
    running (a shared CI runner, other jobs), which slows a step by itself; None where the
    platform has no load average."""
    try:
        load_1m = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return round(load_1m / max(cpus, 1), 3)


def versions(nsys: Path | None = None) -> dict:
    from tracelab import __version__

    torch = _torch()
    found = {"tracelab": __version__, "python": sys.version.split()[0], "torch": torch.__version__,
             "cuda": torch.version.cuda, "triton": _version("triton")}
    if torch.cuda.is_available() and torch.distributed.is_nccl_available():
        nccl = torch.cuda.nccl.version()
        found["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    if nsys is not None:
        found["nsys"] = nsys_version(nsys)
    return found

