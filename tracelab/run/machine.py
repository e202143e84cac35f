"""What the machine has: GPUs, versions, and the default backend. Knows nothing of runs."""
from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from tracelab.core.errors import ToolMissingError

# device nodes of a GPU driver (NVIDIA, AMD ROCm, WSL): with none of them torch sees no GPU
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")
SMI_FIELDS = "uuid,name,memory.total,compute_cap"  # memory.total in MiB
SMI_TIMEOUT_S = 20
NEEDS_TORCH = "tracelab run needs PyTorch (pip install 'tracelab[run]')"


def _torch():
    """torch, or ToolMissingError: the one-line "needs PyTorch" (also when its import fails)."""
    try:
        import torch
    except ImportError as e:
        raise ToolMissingError("torch", f"{NEEDS_TORCH}: {e}") from None
    return torch


def torch_build() -> dict[str, str | None]:
    """torch's version and the GPU platform it was built for, {"torch": "2.13.0+cu130", "cuda":
    "13.0", "hip": None}, read from torch/version.py (which every build of torch writes) without
    importing torch: the launcher never needs torch itself where the GPUs can be counted without
    it (gpu_count), and a CUDA build's import held ~0.47 GB in it for the whole run.
    ToolMissingError, the one-line "needs PyTorch", where there is no torch with that file."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    folders = [Path(d) for d in (spec.submodule_search_locations or [])] if spec else []
    found = next((d / "version.py" for d in folders if (d / "version.py").is_file()), None)
    if found is None:
        why = f"no torch/version.py in {', '.join(map(str, folders))}" if folders else "No module named 'torch'"
        raise ToolMissingError("torch", f"{NEEDS_TORCH}: {why}")
    values = {}
    for node in ast.parse(found.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and isinstance(node.value, ast.Constant):
            values[target.id] = node.value.value
    return {"torch": values.get("__version__"), "cuda": values.get("cuda"), "hip": values.get("hip")}


def require_torch() -> None:
    torch_build()


def no_gpu_for_sure() -> bool:
    """True when no GPU can be visible, decided without importing torch: no driver device
    node, or CUDA_VISIBLE_DEVICES hides them all."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return True
    return not any(Path(node).exists() for node in GPU_DEVICE_NODES)


def gpu_count() -> int:
    """CUDA GPUs the ranks will see (CUDA_VISIBLE_DEVICES respected); 0 without CUDA. Without
    importing torch where that is sure (visible_gpus); else torch's count, as the ranks count."""
    gpus = visible_gpus()
    if gpus is not None:
        return len(gpus)
    torch = _torch()
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def visible_gpus() -> list[dict] | None:
    """The GPUs the ranks will see, decided without torch, or None where only torch can say.
    None of them where no GPU can be seen (no_gpu_for_sure) or torch is built for none
    (torch/version.py). A CUDA build:
    nvidia-smi's GPUs, picked and ordered by CUDA_VISIBLE_DEVICES as CUDA does (indices or GPU
    UUID prefixes, up to the first entry that names no GPU). torch decides where nvidia-smi is missing
    or fails, for a ROCm build, MIG instances, a repeated device, and GPUs of several kinds
    without CUDA_DEVICE_ORDER=PCI_BUS_ID (CUDA then orders them fastest first, nvidia-smi by bus)."""
    build = torch_build()
    if no_gpu_for_sure() or not (build["cuda"] or build["hip"]):
        return []
    gpus = _smi_gpus() if build["cuda"] else None
    if gpus is None or (len({g["name"] for g in gpus}) > 1 and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID"):
        return None
    return _cuda_visible(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))


def _smi_gpus() -> list[dict] | None:
    """Every GPU nvidia-smi lists, in its (bus) order: uuid, name, memory_bytes, capability; None
    where nvidia-smi is missing, fails, or knows none of SMI_FIELDS (a driver older than 510)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi, f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    rows = [[field.strip() for field in line.split(",")] for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or any(len(row) != 4 or not row[2].isdigit() for row in rows):
        return None
    return [{"uuid": uuid, "name": name, "memory_bytes": int(mib) * 2**20, "capability": cap}
            for uuid, name, mib, cap in rows]


def _cuda_visible(gpus: list[dict], visible: str | None) -> list[dict] | None:
    """`gpus` as CUDA_VISIBLE_DEVICES picks them; None for what only CUDA itself can resolve."""
    if visible is None:
        return gpus
    picked: list[dict] = []
    for item in (part.strip() for part in visible.split(",")):
        if item.isdigit():
            matches = gpus[int(item):int(item) + 1]
        elif item.startswith("GPU-"):
            matches = [g for g in gpus if g["uuid"].startswith(item)]
        elif item.startswith("MIG-"):
            return None
        else:
            matches = []
        if len(matches) != 1:
            break  # CUDA reads the list up to the first entry that names no GPU
        if matches[0] in picked:
            return None
        picked.append(matches[0])
    return picked


def default_backend(gpus: int) -> str:
    """proton where there is a GPU and triton, else torch.profiler."""
    return "proton" if gpus and importlib.util.find_spec("triton") is not None else "torch"


def devices(gpus: int) -> list[dict]:
    """The visible GPUs (index, name, memory_bytes, capability; sm_count where torch was asked),
    or the CPU (index -1)."""
    if not gpus:
        return [{"index": -1, "name": platform.processor() or platform.machine(), "cores": os.cpu_count()}]
    seen = visible_gpus()
    if seen is not None:
        return [{"index": i, "name": g["name"], "memory_bytes": g["memory_bytes"], "capability": g["capability"]}
                for i, g in enumerate(seen[:gpus])]
    torch = _torch()
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
    """tracelab's, python's, torch's (the build's CUDA), triton's and, from its package, NCCL's
    (PyPI's CUDA builds of torch load the nvidia-nccl-cuXX wheel's library): none imports torch."""
    from tracelab import __version__

    build = torch_build()
    found = {"tracelab": __version__, "python": sys.version.split()[0], "torch": build["torch"],
             "cuda": build["cuda"], "triton": _version("triton")}
    if build["cuda"] and (nccl := _version(f"nvidia-nccl-cu{build['cuda'].split('.')[0]}")):
        found["nccl"] = nccl
    if nsys is not None:
        found["nsys"] = nsys_version(nsys)
    return found


def device_words(device) -> str:
    """A torch device in words, for a measurement's record: the GPU's name and the host, or the CPU's
    processor, the host and the threads torch uses (torch imported here: only a measurement asks)."""
    import torch

    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} on {platform.node()}"
    return f"CPU {platform.processor() or platform.machine()} on {platform.node()}, {torch.get_num_threads()} thread(s)"
