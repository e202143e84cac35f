"""What a run record says about the machine: GPUs, versions, and the default backend."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ToolMissingError

if TYPE_CHECKING:
    from .runner import Plan


def _torch():
    try:
        import torch
    except ImportError:
        raise ToolMissingError("torch", "tracelab run needs PyTorch (pip install 'tracelab[run]')") from None
    return torch


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


def nsys_version(nsys: Path, env: dict[str, str]) -> str | None:
    done = subprocess.run([str(nsys), "--version"], env=env, capture_output=True, text=True)
    return done.stdout.strip() or None


def versions(nsys: Path | None = None, env: dict[str, str] | None = None) -> dict:
    from . import __version__

    torch = _torch()
    found = {"tracelab": __version__, "python": sys.version.split()[0], "torch": torch.__version__,
             "cuda": torch.version.cuda, "triton": _version("triton")}
    if torch.cuda.is_available() and torch.distributed.is_nccl_available():
        nccl = torch.cuda.nccl.version()
        found["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    if nsys is not None:
        found["nsys"] = nsys_version(nsys, env or dict(os.environ))
    return found


def record(p: "Plan", command: list[str]) -> dict:
    """run.json's content at launch; the runner adds status, wall_s, figures and traces."""
    from .backends import nsys_env
    from .runner import SAFE_ENV

    spec = p.spec
    env = nsys_env(p.nsys, dict(os.environ)) if p.nsys else None
    return {"workload": spec.workload, "backend": p.backend, "ranks_per_node": spec.ranks,
            "nnodes": spec.nnodes or "1", "argv": spec.argv, "command": command, "config": p.config,
            "env": SAFE_ENV, "versions": versions(p.nsys, env), "devices": devices(p.gpus),
            "host": platform.node(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "status": "running"}
