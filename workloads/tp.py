"""Tensor parallelism for the decoder of model.py, as gpt-fast's tp.py does it:
wqkv, w1 and w3 split by output rows (each rank keeps its heads and its slice of
the hidden layer), wo and w2 by input columns, and a sum over ranks after the
attention and the feed-forward.

The sum is one of ALLREDUCE (options/decode.py): "nccl" or "gloo" (a functional all-reduce through the
process group, named by its backend: NCCL on GPUs, gloo on the CPU), or a symmetric-memory kernel
(torch.ops.symm_mem one-shot or two-shot) over a buffer every rank maps.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
from torch import Tensor

from .configs import ModelArgs
from .model import Transformer
from .options.decode import GROUP_ALLREDUCE


# symm_mem.two_shot_all_reduce_ has no fake (Meta) kernel, so torch.compile cannot trace it
# ("Operator does not support running with fake tensors", 2 x H200, torch 2.11); this op
# wraps it with one. Like symm_mem.one_shot_all_reduce_copy, it writes a scratch buffer
# its schema does not declare: declared, functionalisation would hand the op a copy of the
# buffer, which is not symmetric memory. It takes the whole buffer and slices inside, so
# inductor passes the registered buffer itself.
@torch.library.custom_op("tracelab::symm_two_shot_all_reduce", mutates_args=())
def symm_two_shot_all_reduce(symm_buffer: Tensor, x: Tensor, group_name: str) -> Tensor:
    # symm_buffer: [max_tokens * D], x: [B, S, D] -> [B, S, D] summed over ranks
    flat = symm_buffer[: x.numel()]  # the kernel takes the buffer at the message's size
    flat.copy_(x.reshape(-1))
    torch.ops.symm_mem.two_shot_all_reduce_(flat, "sum", group_name)
    return flat.view_as(x).clone()


@symm_two_shot_all_reduce.register_fake
def _(symm_buffer: Tensor, x: Tensor, group_name: str) -> Tensor:
    return torch.empty_like(x)


def shard_rows(w: Tensor, rank: int, world_size: int) -> Tensor:
    # w: [out, in] -> [out / ws, in]
    return w.chunk(world_size, dim=0)[rank]


def shard_cols(w: Tensor, rank: int, world_size: int) -> Tensor:
    # w: [out, in] -> [out, in / ws]
    return w.chunk(world_size, dim=1)[rank]


def shard_wqkv(w: Tensor, args: ModelArgs, rank: int, world_size: int) -> Tensor:
    # w: [(H + 2 Hkv) Dh, D] -> [(H + 2 Hkv) Dh / ws, D]: q, k and v each split by heads
    q_size, kv_size = args.n_head * args.head_dim, args.kv_heads * args.head_dim
    q, k, v = w.split([q_size, kv_size, kv_size], dim=0)
    return torch.cat([shard_rows(t, rank, world_size) for t in (q, k, v)])


def shard_state(state: dict[str, Tensor], args: ModelArgs, rank: int, world_size: int) -> dict[str, Tensor]:
    """This rank's slice of a full (unsharded) state dict."""
    out = {}
    for name, w in state.items():
        if name.endswith("attention.wqkv.weight"):
            w = shard_wqkv(w, args, rank, world_size)
        elif name.endswith(("feed_forward.w1.weight", "feed_forward.w3.weight")):
            w = shard_rows(w, rank, world_size)
        elif name.endswith(("attention.wo.weight", "feed_forward.w2.weight")):
            w = shard_cols(w, rank, world_size)
        out[name] = w
    return out


class GroupAllReduce(nn.Module):
    """Sum over the group through the process group's backend (NCCL, or gloo on the CPU):
    a functional all-reduce inside torch.compile, a plain in-place one in eager mode (so
    a profile shows the wait inside all_reduce, not in whatever op first uses the result)."""

    def __init__(self, group: dist.ProcessGroup):
        super().__init__()
        self.group = group

    def forward(self, x: Tensor) -> Tensor:
        if torch.compiler.is_compiling():
            import torch.distributed._functional_collectives as funcol
            return funcol.all_reduce(x, "sum", self.group)
        dist.all_reduce(x, group=self.group)  # x is a fresh projection output: safe to overwrite
        return x


class SymmAllReduce(nn.Module):
    """Sum over the group with a symmetric-memory kernel; x is copied into a buffer
    that every rank maps (one-shot: each rank reads all peers; two-shot: reduce-scatter
    then all-gather, in place)."""

    def __init__(self, mode: str, group: dist.ProcessGroup, max_tokens: int, dim: int,
                 dtype: torch.dtype, device: torch.device):
        super().__init__()
        import torch.distributed._symmetric_memory as symm_mem
        self.mode, self.group_name = mode, group.group_name
        buf = symm_mem.empty(max_tokens * dim, dtype=dtype, device=device)  # [max_tokens * D]
        symm_mem.rendezvous(buf, self.group_name)
        self.register_buffer("buf", buf, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        # x: [B, S, D] -> [B, S, D], summed over ranks. The ops take the symmetric buffer at the
        # message's size: a view of its first x.numel() elements (prefill S tokens, decode 1)
        if self.mode == "symm-one-shot":
            flat = self.buf[: x.numel()]
            return torch.ops.symm_mem.one_shot_all_reduce_copy(flat, x.reshape(-1), "sum",
                                                               self.group_name).view_as(x)
        return symm_two_shot_all_reduce(self.buf, x, self.group_name)


def install_all_reduce(model: Transformer, mode: str, group: dist.ProcessGroup,
                       max_tokens: int, device: torch.device) -> None:
    """Make every block sum its attention and feed-forward outputs over the group."""
    if mode in GROUP_ALLREDUCE:
        reduce = GroupAllReduce(group)
    else:
        dtype = model.output.weight.dtype
        reduce = SymmAllReduce(mode, group, max_tokens, model.args.dim, dtype, device)
    for block in model.layers:
        block.attention.all_reduce = reduce
        block.feed_forward.all_reduce = reduce
