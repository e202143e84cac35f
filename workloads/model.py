"""A Llama-style decoder in the shape of gpt-fast's model.py: RMSNorm, rotary
embeddings, grouped-query attention over a static KV cache, SwiGLU feed-forward.

Parameter names match gpt-fast's model.pth (tok_embeddings, layers.N.attention.wqkv,
.wo, .feed_forward.w1/.w2/.w3, .attention_norm, .ffn_norm, norm, output), so a
checkpoint converted by gpt-fast loads as is. Tensor parallelism lives in tp.py:
it shards the weights and sets each block's `all_reduce`.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .configs import ModelArgs, find_multiple


def identity(x: Tensor) -> Tensor:
    return x


class Linear(nn.Linear):
    """nn.Linear (same parameters, same checkpoint keys) whose product can go to another
    kernel: `matvec(x2d, weight)`, set per module by use_matvec (decode --matvec)."""

    matvec: Callable[[Tensor, Tensor], Tensor] | None = None

    def forward(self, x: Tensor) -> Tensor:
        # x: [..., in] -> [..., out]
        if self.matvec is None:
            return F.linear(x, self.weight)
        return self.matvec(x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], -1)


def fuse_mlp(model: nn.Module) -> None:
    """Every feed-forward's w1 and w3 as one product, after the weights are loaded and sharded
    (checkpoints and tensor parallelism keep gpt-fast's separate w1 and w3)."""
    for module in model.modules():
        if isinstance(module, FeedForward) and module.w13 is None:
            module.fuse()


def use_matvec(model: nn.Module, matvec: Callable[[Tensor, Tensor], Tensor] | None) -> None:
    for module in model.modules():
        if isinstance(module, Linear):
            module.matvec = matvec


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        # x: [B, S, D]; normalised in float32, returned in x's dtype
        xf = x.float()
        normed = xf * torch.rsqrt(torch.mean(xf * xf, dim=-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def precompute_freqs_cis(seq_len: int, n_elem: int, base: float, dtype: torch.dtype) -> Tensor:
    # -> [seq_len, n_elem // 2, 2]: cos and sin per position and frequency
    freqs = 1.0 / (base ** (torch.arange(0, n_elem, 2)[: n_elem // 2].float() / n_elem))
    angles = torch.outer(torch.arange(seq_len, device=freqs.device).float(), freqs)
    return torch.stack([torch.cos(angles), torch.sin(angles)], dim=-1).to(dtype)


def apply_rotary_emb(x: Tensor, freqs_cis: Tensor) -> Tensor:
    # x: [B, S, H, Dh]; freqs_cis: [S, Dh // 2, 2]
    xs = x.float().reshape(*x.shape[:-1], -1, 2)
    fc = freqs_cis.view(1, xs.size(1), 1, xs.size(3), 2)
    out = torch.stack([xs[..., 0] * fc[..., 0] - xs[..., 1] * fc[..., 1],
                       xs[..., 1] * fc[..., 0] + xs[..., 0] * fc[..., 1]], dim=-1)
    return out.flatten(3).type_as(x)


class KVCache(nn.Module):
    def __init__(self, max_batch_size: int, max_seq_length: int, n_heads: int, head_dim: int,
                 dtype: torch.dtype):
        super().__init__()
        shape = (max_batch_size, n_heads, max_seq_length, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype), persistent=False)

    def update(self, input_pos: Tensor, k_val: Tensor, v_val: Tensor) -> tuple[Tensor, Tensor]:
        # input_pos: [S]; k_val, v_val: [B, Hkv, S, Dh] -> whole caches [B, Hkv, L, Dh]
        self.k_cache[:, :, input_pos] = k_val
        self.v_cache[:, :, input_pos] = v_val
        return self.k_cache, self.v_cache


class Attention(nn.Module):
    """This rank's heads: n_head / world_size query and kv_heads / world_size key/value heads.
    `core` is the attention product itself (train --attention sets its own: a region, a kernel)."""

    core: Callable[..., Tensor] = staticmethod(F.scaled_dot_product_attention)

    def __init__(self, args: ModelArgs, world_size: int = 1):
        super().__init__()
        self.n_head, self.kv_heads = args.n_head // world_size, args.kv_heads // world_size
        self.head_dim = args.head_dim
        self.wqkv = Linear(args.dim, (self.n_head + 2 * self.kv_heads) * self.head_dim, bias=False)
        self.wo = Linear(self.n_head * self.head_dim, args.dim, bias=False)
        self.kv_cache: KVCache | None = None
        self.all_reduce: Callable[[Tensor], Tensor] = identity  # set by tp.py
        self._register_load_state_dict_pre_hook(self._merge_qkv)

    def _merge_qkv(self, state_dict: dict, prefix: str, *args) -> None:
        # checkpoints with separate wq/wk/wv load into the fused wqkv
        if prefix + "wq.weight" in state_dict:
            parts = [state_dict.pop(prefix + f"w{n}.weight") for n in "qkv"]
            state_dict[prefix + "wqkv.weight"] = torch.cat(parts)

    def forward(self, x: Tensor, freqs_cis: Tensor, mask: Tensor, input_pos: Tensor) -> Tensor:
        # x: [B, S, D]; mask: [1, 1, S, L]; input_pos: [S]
        bsz, seqlen, _ = x.shape
        q_size, kv_size = self.n_head * self.head_dim, self.kv_heads * self.head_dim
        q, k, v = self.wqkv(x).split([q_size, kv_size, kv_size], dim=-1)
        q = apply_rotary_emb(q.view(bsz, seqlen, self.n_head, self.head_dim), freqs_cis)
        k = apply_rotary_emb(k.view(bsz, seqlen, self.kv_heads, self.head_dim), freqs_cis)
        v = v.view(bsz, seqlen, self.kv_heads, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, S, Dh]
        if self.kv_cache is not None:
            k, v = self.kv_cache.update(input_pos, k, v)  # [B, Hkv, L, Dh]
        if self.n_head != self.kv_heads:  # grouped-query: each key/value head serves several query heads
            k = k.repeat_interleave(self.n_head // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.n_head // self.kv_heads, dim=1)
        y = self.core(q, k, v, attn_mask=mask, dropout_p=0.0)  # [B, H, S, Dh]
        y = y.transpose(1, 2).contiguous().view(bsz, seqlen, q_size)
        return self.all_reduce(self.wo(y))


class FeedForward(nn.Module):
    """This rank's slice of the hidden layer: hidden_dim / world_size. After fuse_mlp the
    gate and up projections (w1, w3) are one product, w13."""

    def __init__(self, args: ModelArgs, world_size: int = 1):
        super().__init__()
        hidden = args.hidden_dim // world_size
        self.w1 = Linear(args.dim, hidden, bias=False)
        self.w3 = Linear(args.dim, hidden, bias=False)
        self.w2 = Linear(hidden, args.dim, bias=False)
        self.w13: Linear | None = None
        self.all_reduce: Callable[[Tensor], Tensor] = identity  # set by tp.py

    def forward(self, x: Tensor) -> Tensor:
        # x: [B, S, D] -> [B, S, D] through [B, S, hidden]
        if self.w13 is None:
            gate, up = self.w1(x), self.w3(x)
        else:
            gate, up = self.w13(x).chunk(2, dim=-1)
        return self.all_reduce(self.w2(F.silu(gate) * up))

    @torch.no_grad()
    def fuse(self) -> None:
        """Stack w1 over w3 into one [2 hidden, dim] product (one weight read, one kernel)."""
        w1, w3 = self.w1.weight, self.w3.weight
        self.w13 = Linear(w1.shape[1], 2 * w1.shape[0], bias=False, device="meta")
        self.w13.weight = nn.Parameter(torch.cat([w1, w3]), requires_grad=False)
        self.w13.matvec = self.w1.matvec
        del self.w1, self.w3


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs, world_size: int = 1):
        super().__init__()
        self.attention = Attention(args, world_size)
        self.feed_forward = FeedForward(args, world_size)
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)

    def forward(self, x: Tensor, input_pos: Tensor, freqs_cis: Tensor, mask: Tensor) -> Tensor:
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask, input_pos)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """One rank's part of the decoder; world_size > 1 gives the tensor-parallel shard shapes
    (tp.py fills them and sets the all-reduce)."""

    def __init__(self, args: ModelArgs, world_size: int = 1):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args, world_size) for _ in range(args.n_layer))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = Linear(args.dim, args.vocab_size, bias=False)
        self.max_seq_length = -1

    def setup_caches(self, max_batch_size: int, max_seq_length: int) -> None:
        """Static KV caches and the rotary and mask tables, on the weights' device and dtype."""
        self.max_seq_length = find_multiple(max_seq_length, 8)
        dtype, device = self.output.weight.dtype, self.output.weight.device
        with torch.device(device):
            for block in self.layers:
                attn = block.attention
                attn.kv_cache = KVCache(max_batch_size, self.max_seq_length, attn.kv_heads, attn.head_dim, dtype)
            self.freqs_cis = precompute_freqs_cis(self.args.block_size, self.args.head_dim,
                                                  self.args.rope_base, dtype)
            self.causal_mask = torch.tril(torch.ones(self.max_seq_length, self.max_seq_length, dtype=torch.bool))

    def forward(self, idx: Tensor, input_pos: Tensor) -> Tensor:
        # idx: [B, S] token ids; input_pos: [S] positions -> logits [B, S, vocab]
        mask = self.causal_mask[None, None, input_pos]  # [1, 1, S, L]
        freqs_cis = self.freqs_cis[input_pos]  # [S, Dh // 2, 2]
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x, input_pos, freqs_cis, mask)
        return self.output(self.norm(x))


def weight_bytes(model: nn.Module) -> int:
    """Bytes of weights one decode step reads: every parameter except the embedding table,
    of which a step reads one row per token (gpt-fast counts it the same way)."""
    return sum(p.numel() * p.element_size() for name, p in model.named_parameters()
               if not name.startswith("tok_embeddings."))
