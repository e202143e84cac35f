"""The launcher (`tracelab run` before torchrun starts) holds no torch: it checks every workload's
options through the workload's options module, counts the GPUs and records the versions without
importing torch (a CUDA build's import held ~0.47 GB in it for the whole run), and the options it
checks are the ones the ranks parse."""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracelab.run import machine
from tracelab.run.runner import WORKLOADS
from tracelab.run.workload_options import parse_workload_args

from helpers import needs

ROOT = Path(__file__).resolve().parents[1]

# every workload planned as `tracelab run NAME --ranks 2` plans it, and its run.json's record made;
# then which modules the process holds. Torch may come in only where the GPUs cannot be counted
# without it (machine.visible_gpus() is None: no nvidia-smi for a GPU, a ROCm build, MIG).
PLAN_ALL = """
import json, sys
from pathlib import Path
from tracelab.run import machine, runner
held = {}
for name in runner.WORKLOADS:
    p = runner.plan(runner.RunSpec(name, 2, "torch", Path(sys.argv[1])))
    runner.new_record(p, runner.torchrun_command(p, Path(sys.argv[1])))
    held[name] = "torch" in sys.modules
print(json.dumps({"held": held, "torch_free_rule": machine.visible_gpus() is not None}))
"""


@pytest.mark.slow
def test_planning_every_workload_imports_no_torch(tmp_path):
    done = subprocess.run([sys.executable, "-c", PLAN_ALL, str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert set(found["held"]) == set(WORKLOADS)
    if found["torch_free_rule"]:
        assert not any(found["held"].values()), found
    assert not (tmp_path / "runs").exists()


# options that only torch can check, per workload (needs_torch true), and options that it need not
NEEDS_TORCH = [("decode", ["--pdl"], True), ("decode", ["--inductor", "x=1"], True),
               ("decode", ["--tuned", "--compile"], True), ("decode", ["--checkpoint", "m.pth"], True),
               ("decode", ["--new-tokens", "8", "--model", "tiny"], False), ("train", ["--size", "tiny"], False),
               ("allreduce", ["--sizes", "4K"], False), ("overlap", ["--iters", "2"], False)]


@pytest.mark.parametrize("name, argv, needs", NEEDS_TORCH)
def test_needs_torch(name, argv, needs):
    options = importlib.import_module(WORKLOADS[name].options)
    args = options.build_parser().parse_args(argv) if name == "decode" else options.parse(argv, gpu=False)
    assert options.needs_torch(args) is needs


WORLD = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
SAME_CONFIG = [("decode", ["--new-tokens", "6", "--late", "rank1"]), ("decode", []),
               ("train", ["--phase", "forward", "--dtype", "bf16", "--extra-memory-mb", "1:8"]), ("train", []),
               ("allreduce", ["--sizes", "4K-64K"]), ("overlap", ["--rows", "64,128"])]


@needs("torch")
@pytest.mark.parametrize("name, argv", SAME_CONFIG)
def test_the_launcher_checks_the_config_the_ranks_parse(monkeypatch, name, argv):
    # the ranks' own parse (torch deciding gpu: none here) against the launcher's, on 2 ranks
    for key, value in WORLD.items():
        monkeypatch.setenv(key, value)
    argv = [*argv, "--backend", "torch"]
    ranks = vars(importlib.import_module(WORKLOADS[name].program).parse(argv))
    launcher = parse_workload_args(name, WORKLOADS[name], argv, 2, gpu=False)
    assert launcher == json.loads(json.dumps(ranks, default=str))


# ---- the GPUs counted without torch ---------------------------------------------------------

GPUS = [{"uuid": f"GPU-{c}{c}11-2222", "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 81559 * 2**20,
         "capability": "9.0"} for c in "abcd"]


@pytest.mark.parametrize("visible, picked", [
    (None, [0, 1, 2, 3]), ("", []), ("2", [2]), ("3,1", [3, 1]), ("0, 2", [0, 2]),
    ("1,7,2", [1]), ("0,-1,1", [0]), ("-1", []), ("x", []),  # CUDA reads up to the first entry naming no GPU
    ("GPU-cc", [2]), ("GPU-bb11,0", [1, 0]), ("GPU-zz", []), ("GPU-", []),  # a UUID prefix names one GPU
    ("MIG-abc", None), ("1,1", None),  # only CUDA itself resolves these
])
def test_cuda_visible_devices(visible, picked):
    got = machine._cuda_visible(GPUS, visible)
    assert got == (None if picked is None else [GPUS[i] for i in picked])


def _fake_smi(folder: Path, rows: list[str], status: int = 0) -> None:
    """An nvidia-smi on PATH that prints `rows` for any query."""
    smi = folder / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + "".join(f"echo '{row}'\n" for row in rows) + f"exit {status}\n")
    smi.chmod(0o755)


SMI_ROWS = ["GPU-aa11-2222, NVIDIA H100 80GB HBM3, 81559, 9.0", "GPU-bb11-2222, NVIDIA H100 80GB HBM3, 81559, 9.0"]


@pytest.mark.parametrize("rows, status, build, env, want", [
    (SMI_ROWS, 0, {"cuda": "13.0"}, {}, 2),
    (SMI_ROWS, 0, {"cuda": "13.0"}, {"CUDA_VISIBLE_DEVICES": "1"}, 1),
    (SMI_ROWS, 0, {"cuda": None}, {}, 0),                           # a CPU build of torch sees none
    (SMI_ROWS, 9, {"cuda": "13.0"}, {}, None),                      # nvidia-smi failed: torch decides
    (["GPU-aa11, NVIDIA H100, 81559"], 0, {"cuda": "13.0"}, {}, None),  # a driver without compute_cap
    (SMI_ROWS[:1] + ["GPU-cc11-2222, NVIDIA A100-SXM4-40GB, 40960, 8.0"], 0, {"cuda": "12.8"}, {}, None),
    (SMI_ROWS[:1] + ["GPU-cc11-2222, NVIDIA A100-SXM4-40GB, 40960, 8.0"], 0, {"cuda": "12.8"},
     {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, 2),
    (SMI_ROWS, 0, {"cuda": None, "hip": "6.4"}, {}, None),            # ROCm: torch decides
])
def test_visible_gpus_without_torch(tmp_path, monkeypatch, rows, status, build, env, want):
    _fake_smi(tmp_path, rows, status)
    monkeypatch.setenv("PATH", str(tmp_path))
    for key in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(machine, "no_gpu_for_sure", lambda: False)
    monkeypatch.setattr(machine, "torch_build", lambda: {"torch": "2.13.0", "hip": None, **build})
    found = machine.visible_gpus()
    assert (None if found is None else len(found)) == want
    if want:
        devices = machine.devices(want)
        assert [d["index"] for d in devices] == list(range(want))
        first = rows[int(env.get("CUDA_VISIBLE_DEVICES", 0))].split(", ")
        assert devices[0]["name"] == first[1] and devices[0]["memory_bytes"] == int(first[2]) * 2**20


def test_torch_build_read_from_its_version_file(tmp_path, monkeypatch):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('never imported')\n")
    (fake / "version.py").write_text("from typing import Optional\n__version__ = '9.1.0+cu999'\n"
                                     "cuda: Optional[str] = '99.9'\nhip: Optional[str] = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert machine.torch_build() == {"torch": "9.1.0+cu999", "cuda": "99.9", "hip": None}
    (fake / "version.py").unlink()
    with pytest.raises(machine.ToolMissingError, match="needs PyTorch.*no torch/version.py"):
        machine.torch_build()


@needs("torch")
def test_torch_build_agrees_with_torch():
    import torch

    build = machine.torch_build()
    assert (build["torch"], build["cuda"], build["hip"]) == (torch.__version__, torch.version.cuda, torch.version.hip)
    assert os.path.isfile(Path(torch.__file__).parent / "version.py")
