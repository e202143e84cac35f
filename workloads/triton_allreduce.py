"""Our own one-shot all-reduce in Triton over PyTorch symmetric memory (the approach of
symm-mem-recipes, github.com/yifuwang/symm-mem-recipes): every rank maps every peer's buffer, so one kernel on
each rank reads the same slice of all W buffers over NVLink, sums it in float32 and
writes its own copy of the result. One read of (W-1) peers' messages per rank, no
intermediate steps: the lowest latency for small messages.

Two barriers make it safe to call back to back on the same buffers. Before reading, the
program with block id b on each rank waits until block b of every peer has arrived,
which orders the peers' earlier writes of their input before our reads (release/acquire
at system scope). After reading, block b waits again, so no rank returns (and lets the
next input overwrite its buffer) while a peer may still be reading it. Each barrier
sets a flag [b][rank] on every peer's signal pad from 0 to 1 and takes the flags
[b][peer] on its own pad from 1 back to 0, so the pads are zero again afterwards.

Needs a CUDA GPU, Triton, and a world size that is a power of 2 (tl.arange over ranks).
The kernel's name differs from torch's CUDA one_shot_all_reduce_kernel so that the two
stay apart in a breakdown (the captures in tests/data/allreduce-2gpu-* predate the rename).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
import triton
import triton.language as tl

BLOCK_SIZE = 4096  # elements per program per iteration: 16 warps x 32 threads x 8
NUM_WARPS = 16


@triton.jit
def _thread_id():
    # programs are 1-D: %tid.x is the thread's index in its block
    return tl.inline_asm_elementwise("mov.u32 $0, %tid.x;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _signal(addrs):
    # set each flag from 0 to 1 (waiting while a previous signal is still unread), with
    # release semantics: what this block did before is visible to whoever takes the flag
    tl.inline_asm_elementwise(
        """{
        .reg .u32 %seen;
        .reg .pred %set;
        retry:
            atom.global.release.sys.cas.b32 %seen, [$1], 0, 1;
            setp.eq.u32 %set, %seen, 0;
            @!%set bra retry;
        }""",
        "=r, l", [addrs], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _take(addrs):
    # wait for each flag to be 1 and set it back to 0, with acquire semantics
    tl.inline_asm_elementwise(
        """{
        .reg .u32 %seen;
        .reg .pred %taken;
        retry:
            atom.global.acquire.sys.cas.b32 %seen, [$1], 1, 0;
            setp.eq.u32 %taken, %seen, 1;
            @!%taken bra retry;
        }""",
        "=r, l", [addrs], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _barrier(signal_pads, block, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr):
    """Block `block` of every rank meets here (see the module docstring)."""
    peers = tl.arange(0, WORLD_SIZE)
    pads = signal_pads.to(tl.pointer_type(tl.uint64))  # [W] addresses of every rank's pad
    peer_pads = tl.load(pads + peers).to(tl.pointer_type(tl.uint32))
    own_pad = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
    tl.debug_barrier()  # every thread's earlier accesses are done before thread t signals
    # thread t < W holds element t of the [W] vectors: one thread per peer
    if _thread_id() < WORLD_SIZE:
        _signal(peer_pads + block * WORLD_SIZE + RANK)
        _take(own_pad + block * WORLD_SIZE + peers)
    tl.debug_barrier()  # no thread goes on before every peer has arrived


@triton.jit
def triton_one_shot_all_reduce_kernel(buffers, signal_pads, out_ptr, numel, RANK: tl.constexpr,
                               WORLD_SIZE: tl.constexpr, BLOCK: tl.constexpr):
    # buffers: W tensors [numel], rank r's symmetric buffer as mapped here; out_ptr: [numel]
    block = tl.program_id(0)
    _barrier(signal_pads, block, RANK, WORLD_SIZE)
    for start in range(block * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for peer in tl.static_range(WORLD_SIZE):
            acc += tl.load(buffers[peer] + offs, mask=mask).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)
    _barrier(signal_pads, block, RANK, WORLD_SIZE)


SIGNAL_PAD_BYTES_OLD = 2048  # torch releases without get_signal_pad_size() had this fixed size


class TritonOneShot:
    """A symmetric buffer of `numel` elements on every rank; call() sums the buffers of all
    ranks into `out`. Write this rank's input into `buf` first."""

    def __init__(self, numel: int, dtype: torch.dtype, device: torch.device, group: dist.ProcessGroup):
        self.buf = symm_mem.empty(numel, dtype=dtype, device=device)  # [numel]
        self.handle = symm_mem.rendezvous(self.buf, group.group_name)
        self.peers = self._peer_buffers(numel, dtype)
        self.out = torch.empty_like(self.buf)
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        pad_bytes = getattr(symm_mem, "get_signal_pad_size", lambda: SIGNAL_PAD_BYTES_OLD)()
        flags_per_rank = pad_bytes // 4 // self.handle.world_size  # uint32 flags: [block][rank]
        self.grid = (min(triton.cdiv(numel, BLOCK_SIZE), sms, flags_per_rank),)

    def _peer_buffers(self, numel: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """Every rank's copy of `buf` as mapped here. The allocator may place `buf` inside a
        larger symmetric segment; the offset is the same on every rank (same allocations)."""
        elem = self.buf.element_size()
        offset_bytes = self.buf.data_ptr() - self.handle.buffer_ptrs[self.handle.rank]
        if offset_bytes < 0 or offset_bytes % elem:
            raise ValueError(f"buffer lies at byte {offset_bytes} of its symmetric segment")
        return tuple(self.handle.get_buffer(r, (numel,), dtype, offset_bytes // elem)
                     for r in range(self.handle.world_size))

    def __call__(self) -> torch.Tensor:
        triton_one_shot_all_reduce_kernel[self.grid](
            self.peers, self.handle.signal_pad_ptrs_dev, self.out, self.buf.numel(),
            RANK=self.handle.rank, WORLD_SIZE=self.handle.world_size, BLOCK=BLOCK_SIZE, num_warps=NUM_WARPS)
        return self.out
