"""gpt-fast model.pth checkpoints: check them against a config, and load one rank's shard."""
from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import Tensor

from tracelab.core.errors import UsageError

from .configs import ModelArgs
from .model import Transformer
from .tp import shard_state


def expected_shapes(args: ModelArgs) -> dict[str, tuple[int, ...]]:
    """Parameter name -> shape of the full (unsharded) model, as gpt-fast saves it."""
    with torch.device("meta"):
        model = Transformer(args)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def read_state(path: str | os.PathLike) -> dict[str, Tensor]:
    """The checkpoint's tensors, memory-mapped (nothing is read until used)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(path, "no such checkpoint file")
    try:
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except Exception as e:  # torch raises many kinds (pickle, zip, runtime) for a damaged file
        raise UsageError(path, f"not a readable torch checkpoint ({type(e).__name__}: {e})") from None
    if isinstance(state, dict) and "model" in state and isinstance(state["model"], dict):
        state = state["model"]
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise UsageError(path, "not a state dict of tensors (expected a gpt-fast model.pth)")
    return _merge_qkv(state)


def _merge_qkv(state: dict[str, Tensor]) -> dict[str, Tensor]:
    # separate wq/wk/wv (older conversions) -> fused wqkv, as the model's load hook does
    out = dict(state)
    for name in [n for n in state if n.endswith("attention.wq.weight")]:
        parts = [out.pop(name.replace(".wq.", f".w{c}.")) for c in "qkv"]
        out[name.replace(".wq.", ".wqkv.")] = torch.cat(parts)
    return out


def check(path: str | os.PathLike, args: ModelArgs, model_name: str) -> dict[str, Tensor]:
    """Read the checkpoint and raise UsageError naming the first key or shape that does not fit."""
    state = read_state(path)
    if any(name.endswith(".scales") for name in state):
        raise UsageError(path, "is a quantized (int8/int4) checkpoint; only bf16/fp16/fp32 weights are supported")
    want = expected_shapes(args)
    missing = sorted(set(want) - set(state))
    extra = sorted(set(state) - set(want))
    if missing or extra:
        what = f"lacks {missing[0]}" if missing else f"has {extra[0]}, which {model_name} has not"
        raise UsageError(path, f"does not fit --model {model_name}: it {what} "
                               f"({len(missing)} missing, {len(extra)} unexpected keys)")
    for name, shape in want.items():
        if tuple(state[name].shape) != shape:
            raise UsageError(path, f"does not fit --model {model_name}: {name} is "
                                   f"{list(state[name].shape)}, the config needs {list(shape)}")
    return state


def load_shard(model: Transformer, path: str | os.PathLike, model_name: str, rank: int, world_size: int,
               dtype: torch.dtype, device: torch.device) -> None:
    """Fill a meta-device model with this rank's slice of the checkpoint, on `device` in `dtype`."""
    state = shard_state(check(path, model.args, model_name), model.args, rank, world_size)
    state = {name: t.to(device=device, dtype=dtype) for name, t in state.items()}
    model.load_state_dict(state, assign=True)
