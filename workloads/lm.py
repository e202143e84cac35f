"""The language model the train workload trains: model.py's decoder blocks (RMSNorm, rotary
embeddings, attention, SwiGLU feed-forward) over a whole sequence at once, no KV cache,
with the sizes of Stanford CS336's assignment 2 (d_model, d_ff, layers, heads; vocabulary 10000)."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .configs import ModelArgs, Size
from .model import RMSNorm, TransformerBlock, precompute_freqs_cis


def model_args(size: Size, vocab_size: int, context_length: int) -> ModelArgs:
    return ModelArgs(block_size=context_length, vocab_size=vocab_size, n_layer=size.layers,
                     n_head=size.heads, dim=size.d_model, intermediate_size=size.d_ff)


class TrainLM(nn.Module):
    """Token ids [B, S] -> logits [B, S, vocab]: embedding, decoder blocks, norm, output projection."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layer))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        S = args.block_size
        self.register_buffer("freqs_cis", precompute_freqs_cis(S, args.head_dim, args.rope_base, torch.float32),
                             persistent=False)  # [S, Dh // 2, 2]
        self.register_buffer("causal_mask", torch.tril(torch.ones(S, S, dtype=torch.bool))[None, None],
                             persistent=False)  # [1, 1, S, S]
        self.register_buffer("input_pos", torch.arange(S), persistent=False)  # [S]

    def forward(self, idx: Tensor) -> Tensor:
        # idx: [B, S] with S <= block_size -> logits [B, S, vocab]
        S = idx.shape[1]
        pos, mask, freqs = self.input_pos[:S], self.causal_mask[..., :S, :S], self.freqs_cis[:S]
        x = self.tok_embeddings(idx)  # [B, S, D]
        for layer in self.layers:
            x = layer(x, pos, freqs, mask)
        return self.output(self.norm(x))


def loss_fn(logits: Tensor, targets: Tensor) -> Tensor:
    # logits: [B, S, V]; targets: [B, S] -> mean cross-entropy over every token
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def matmul_params(model: TrainLM) -> int:
    """Parameters that take part in a matrix product per token: all but the embedding
    table (a lookup) and the norm weights. N of the model-FLOPs formula."""
    return sum(p.numel() for name, p in model.named_parameters()
               if p.dim() == 2 and not name.startswith("tok_embeddings."))


def model_flops(model: TrainLM, tokens: int, context_length: int, backward: bool) -> float:
    """Model FLOPs of a step (PaLM, Chowdhery et al. 2022, appendix B): per token 6*N for the
    weights plus 12*L*d*S for attention's two matrix products, forward and backward; a
    forward alone is a third of that. Causal masking is not subtracted; recomputation
    and the optimizer count nothing."""
    a = model.args
    per_token = 6 * matmul_params(model) + 12 * a.n_layer * a.dim * context_length
    return per_token * tokens * (1.0 if backward else 1.0 / 3.0)
