"""Findings that name a cause and its fix, each with the kernels, their share of GPU
time and the numbers behind it, from the per-rank digests the report already makes:

- gemm.py: fp32 GEMMs on CUDA-core (SIMT) kernels: TF32 or bf16 autocast; tensor-core GEMMs on
  unaligned (align1/align2) kernels: pad the odd dimension;
- host.py: host-bound steps of kernels shorter than their own launch: CUDA graphs or
  torch.compile(mode="reduce-overhead");
- ddp.py: the gradient all-reduce exposed after backward: DDP's bucket size and overlap.

Each source is `(Evidence) -> list[Finding]` (reports/findings/finding.py); they and the per-rank
digests they read beside the report's (ddp_steps.rank_ddp, replays.rank_replays) are registered
as the topic "fixes" in reports/topics.py. Each says nothing below its threshold or where the data
cannot support it (unknown work is never read as zero)."""
from __future__ import annotations
