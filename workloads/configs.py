"""The decoder's shapes by name (the names users pass as --model) and the train workload's
(--size), apart from the models so that reading them (an argument parser, a test's parameters)
imports no torch."""
from __future__ import annotations

from dataclasses import dataclass


def find_multiple(n: int, k: int) -> int:
    return n if n % k == 0 else n + k - (n % k)


@dataclass(frozen=True)
class ModelArgs:
    block_size: int = 2048
    vocab_size: int = 32000
    n_layer: int = 32
    n_head: int = 32
    dim: int = 4096
    intermediate_size: int | None = None
    n_local_heads: int = -1  # key/value heads (grouped-query attention); -1: as many as n_head
    rope_base: float = 10000
    norm_eps: float = 1e-5

    @property
    def kv_heads(self) -> int:
        return self.n_head if self.n_local_heads == -1 else self.n_local_heads

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    @property
    def hidden_dim(self) -> int:
        if self.intermediate_size is not None:
            return self.intermediate_size
        return find_multiple(int(2 * 4 * self.dim / 3), 256)


# name -> shapes; the names users pass as --model
CONFIGS: dict[str, ModelArgs] = {
    "tiny": ModelArgs(block_size=256, vocab_size=512, n_layer=2, n_head=16, n_local_heads=8, dim=128,
                      intermediate_size=256),
    "llama-2-7b": ModelArgs(n_layer=32, n_head=32, dim=4096),
    "llama-2-13b": ModelArgs(n_layer=40, n_head=40, dim=5120),
    "llama-3-8b": ModelArgs(block_size=8192, n_layer=32, n_head=32, n_local_heads=8, dim=4096,
                            intermediate_size=14336, vocab_size=128256, rope_base=500000),
    "llama-3.2-1b": ModelArgs(block_size=8192, n_layer=16, n_head=32, n_local_heads=8, dim=2048,
                              intermediate_size=8192, vocab_size=128256, rope_base=500000),
}


@dataclass(frozen=True)
class Size:
    d_model: int
    d_ff: int
    layers: int
    heads: int


# the train workload's shapes by name; the names users pass as --size
SIZES: dict[str, Size] = {
    "tiny": Size(64, 256, 2, 4),  # for the CPU and the tests
    "small": Size(768, 3072, 12, 12),
    "medium": Size(1024, 4096, 24, 16),
    "large": Size(1280, 5120, 36, 20),
    "xl": Size(1600, 6400, 48, 25),
    "2.7B": Size(2560, 10240, 32, 32),
}
