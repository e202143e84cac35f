"""Data parallelism by hand, the four ways of Stanford CS336's assignment 2: each rank runs
forward and backward on its share of the batch, then the gradients are averaged over ranks.

  naive     after backward, one all-reduce per parameter, one after the other
  flat      after backward, every gradient flattened into one buffer, one all-reduce
  overlap   during backward, an async all-reduce per parameter as soon as its gradient is ready
  bucketed  during backward, an async all-reduce per bucket (about bucket_mb of gradients,
            filled in the order backward produces them) once the bucket is complete

Use: sync = make_sync(name, model, bucket_mb); sync.before_backward(); loss.backward();
sync.finish()  # waits for outstanding all-reduces and leaves averaged .grad on every rank.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


def broadcast_parameters(model: nn.Module) -> None:
    """Every rank starts from rank 0's weights."""
    for p in model.parameters():
        dist.broadcast(p.data, src=0)


def _params(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


class Naive:
    def __init__(self, model: nn.Module, bucket_mb: float = 0.0):
        self.params = _params(model)
        self.world_size = dist.get_world_size()

    def before_backward(self) -> None:
        pass

    def finish(self) -> None:
        for p in self.params:
            dist.all_reduce(p.grad)
            p.grad.div_(self.world_size)


class Flat(Naive):
    def finish(self) -> None:
        grads = [p.grad for p in self.params]
        flat = _flatten_dense_tensors(grads)  # [sum of numels]
        dist.all_reduce(flat)
        flat.div_(self.world_size)
        for g, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
            g.copy_(synced)


class Overlap(Naive):
    """An async all-reduce launched from each parameter's post-accumulate-grad hook."""

    def __init__(self, model: nn.Module, bucket_mb: float = 0.0):
        super().__init__(model)
        self.pending: list[tuple[nn.Parameter, dist.Work]] = []
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._ready)

    def _ready(self, p: nn.Parameter) -> None:
        self.pending.append((p, dist.all_reduce(p.grad, async_op=True)))

    def before_backward(self) -> None:
        self.pending.clear()

    def finish(self) -> None:
        for p, work in self.pending:
            work.wait()
            p.grad.div_(self.world_size)
        self.pending.clear()


class Bucketed(Naive):
    """Parameters in reverse order (about the order backward finishes them) cut into
    buckets of about bucket_mb; a bucket is flattened and all-reduced once all its
    gradients are in."""

    def __init__(self, model: nn.Module, bucket_mb: float):
        super().__init__(model)
        self.buckets = self._cut(list(reversed(self.params)), int(bucket_mb * 2**20))
        self.bucket_of = {id(p): i for i, bucket in enumerate(self.buckets) for p in bucket}
        self.waiting: list[int] = []
        self.pending: list[tuple[int, torch.Tensor, dist.Work]] = []
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._ready)

    @staticmethod
    def _cut(params: list[nn.Parameter], bucket_bytes: int) -> list[list[nn.Parameter]]:
        buckets: list[list[nn.Parameter]] = [[]]
        filled = 0
        for p in params:
            size = p.numel() * p.element_size()
            if buckets[-1] and filled + size > bucket_bytes:
                buckets.append([])
                filled = 0
            buckets[-1].append(p)
            filled += size
        return buckets

    def before_backward(self) -> None:
        self.waiting = [len(b) for b in self.buckets]
        self.pending.clear()

    def _ready(self, p: nn.Parameter) -> None:
        i = self.bucket_of[id(p)]
        self.waiting[i] -= 1
        if self.waiting[i] == 0:
            flat = _flatten_dense_tensors([q.grad for q in self.buckets[i]])
            self.pending.append((i, flat, dist.all_reduce(flat, async_op=True)))

    def finish(self) -> None:
        for i, flat, work in self.pending:
            work.wait()
            flat.div_(self.world_size)
            grads = [q.grad for q in self.buckets[i]]
            for g, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
                g.copy_(synced)
        self.pending.clear()


_CLASSES = {"naive": Naive, "flat": Flat, "overlap": Overlap, "bucketed": Bucketed}


def make_sync(name: str, model: nn.Module, bucket_mb: float) -> Naive:
    """The gradient synchronisation called `name` (one of options/train.py's DDP_VARIANTS) for this model."""
    return _CLASSES[name](model, bucket_mb)
