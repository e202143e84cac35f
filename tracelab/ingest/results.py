"""Each workload's results: one declared schema per workload, as schema.COLUMNS declares
the events. A rank writes its record with `write` (rank{r}.results.json, checked against
the schema), the runner gathers the ranks' records into run.json["results"], and the CLI
and the report read them back with `of_run`, which also reads run folders written before
these names (run.json "figures", rank{r}.figures.json, `_gbps` units).

Names carry units (`_us`, `_ms`, `_s`, `_bytes`, `_gb_s` for GB/s, `_tflops`); a field is
(unit, meaning). Results that come in rows (one per size, shape or configuration) hold
them under "rows", declared by ROWS.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from tracelab.core.errors import RunError


class Field(NamedTuple):
    unit: str
    meaning: str


RESULTS_FILE = "rank{rank}.results.json"
OLD_RESULTS_FILE = "rank{rank}.figures.json"  # what run folders made before held
RUN_KEY, OLD_RUN_KEY = "results", "figures"
OLD_NAMES = {"busbw_gbps": "busbw_gb_s", "algbw_gbps": "algbw_gb_s"}  # old name -> name
# fields added after run folders were made, and what those runs did: nobody was made late
ADDED = {"train": {"late": "none", "late_work": 0, "host_stall_ms": None, "late_every": 1, "capturable": False,
                   "host_stall_unmarked": False, "host_stall_before_sync": False},
         "decode": {"late": "none", "late_work": 0, "host_stall_ms": None, "late_every": 1, "host_stall_unmarked": False}}
ADDED["train"]["extra_memory_mb"] = {}  # no rank held extra memory before the option existed
ADDED["train"].update(cuda_graph=False, compile=False, tf32=False, attention=None)  # eager, as before the options
# the same steps timed with the profiler off and on (workloads/harness.py step_times): older runs timed none
_NO_STEP_TIMES = {f"{phase}_step_ns{tail}": None for phase in ("unprofiled", "profiled") for tail in ("", "_samples")}
ADDED["decode"].update(_NO_STEP_TIMES, profiled_tokens=None)  # before: every token of every sample
# row fields added since, and what older rows held of them: nothing recorded
ADDED_ROWS = {"train": {k: None for k in ("step_start_allocated_bytes", "step_end_allocated_bytes",
                                          "step_peak_allocated_bytes", "step_end_reserved_bytes",
                                          "step_peak_reserved_bytes", "memory_snapshot")},
              "allreduce": dict(_NO_STEP_TIMES), "overlap": {"step_times": None}}
ADDED_ROWS["train"].update(_NO_STEP_TIMES, unprofiled_region_ns=None, profiled_region_ns=None)

_EVERY = {
    "workload": Field("", "the workload's name"),
    "rank": Field("", "this process's rank"),
    "world_size": Field("", "ranks in the job"),
    "device": Field("", "the device's name (cpu on the CPU)"),
}
# The profiler's cost, per run: the same steps (decode's `token N`, train's `step N`, one call of an
# all-reduce size or an overlap variant) timed the same way in the same processes, with the profiler off and on.
STEP_TIMES = {
    "unprofiled_step_ns": Field("ns", "median step with the profiler off (null: not timed, --no-unprofiled)"),
    "unprofiled_step_ns_samples": Field("ns", "each of those steps"),
    "profiled_step_ns": Field("ns", "median of the same steps inside the profiled window"),
    "profiled_step_ns_samples": Field("ns", "each of those steps"),
}
_SWEEP = {**_EVERY, "torch": Field("", "torch version"), "rows": Field("", "one record per case (ROWS)")}
_LATE = {"late": Field("", "who was made late on purpose: none, rank0, rank1 or alternating (--late)"),
         "late_work": Field("products", "the late rank's extra matrix products per step or token (--late-work)"),
         "host_stall_ms": Field("", "R:MS: rank R's host sleeps MS ms after a sync every step or token, in a "
                                    "host_stall region (--host-stall-ms); null: none"),
         "host_stall_unmarked": Field("", "the stall's sleep in no region, untraced (--host-stall-unmarked)"),
         "late_every": Field("steps", "the extra work and the stall happen every N-th step or token (--late-every)")}

# Each phase of those steps (a region directly inside the step: forward, backward, ...) on the host's
# clock, with the profiler off and on: its own slowdown under the profiler (reports/whatif/regions.py).
REGION_TIMES = {
    "unprofiled_region_ns": Field("ns", "region -> its median time a step with the profiler off, over the steps "
                                        "that entered it; \"\": the step outside every region (null: not timed)"),
    "profiled_region_ns": Field("ns", "the same inside the profiled window"),
}
RESULTS: dict[str, dict[str, Field]] = {
    "decode": {**_EVERY,
               "model": Field("", "model configuration name"), "dtype": Field("", "weights' dtype"),
               "compile": Field("", "decode step compiled"), "allreduce": Field("", "tensor-parallel sum"),
               "matvec": Field("", "weight products"), "fuse_mlp": Field("", "gate and up projections stacked"),
               "pdl": Field("", "programmatic dependent launch"), "inductor": Field("", "inductor settings"),
               "attention": Field("", "attention kernel choice"), "batch_size": Field("sequences", "batch"),
               **_LATE,
               "prompt_len": Field("tokens", "prompt length"), "new_tokens": Field("tokens", "generated per sample"),
               "sample_s": Field("s", "each measured sample's time (the profiler off since step_times)"), "s_per_sample": Field("s", "their mean"),
               "tokens_per_s": Field("tokens/s", "new tokens / s_per_sample (per sequence)"),
               "profiled_tokens": Field("tokens", "the decode steps the trace holds (--profile-tokens)"),
               **STEP_TIMES,
               "batch_tokens_per_s": Field("tokens/s", "tokens_per_s x batch"),
               "weight_bytes": Field("bytes", "weights this rank reads per step"),
               "bandwidth_gb_s": Field("GB/s", "weight_bytes x steps per second, as gpt-fast"),
               "first_tokens": Field("", "first 16 generated ids of the first sequence")},
    "train": {**_SWEEP, "mfu_formula": Field("", "how mfu is computed"),
              "bucket_mb": Field("MB", "bucketed data parallel's bucket size"), **_LATE,
              "host_stall_before_sync": Field("", "the stall's sleep after the backward, before the gradient "
                                                  "sync waits, not before the backward (--host-stall-before-sync)"),
              "capturable": Field("", "AdamW(capturable=True) (--capturable)"),
              "cuda_graph": Field("", "the whole step replayed as one CUDA graph (--cuda-graph)"),
              "compile": Field("", "the model torch.compiled, default mode (--compile)"),
              "tf32": Field("", "fp32 matrix products on TF32 tensor cores (--tf32)"),
              "attention": Field("", "attention's kernel in an sdpa region: auto or math; null: torch's, no region"),
              "extra_memory_mb": Field("MiB", "rank -> MiB it holds more through each step (--extra-memory-mb)")},
    "allreduce": {**_SWEEP, "dtype": Field("", "element type"),
                  "busbw_formula": Field("", "how busbw_gb_s is computed")},
    "overlap": {**_SWEEP, "dtype": Field("", "element type")},
}

ROWS: dict[str, dict[str, Field]] = {
    "train": {"size": Field("", "model size"), "phase": Field("", "forward, forward-backward or step"),
              "dtype": Field("", "fp32 or bf16"), "ddp": Field("", "gradient sync variant"),
              "params": Field("", "parameters"), "batch_size": Field("sequences", "over all ranks"),
              "context_length": Field("tokens", "per sequence"), "warmup": Field("steps", "before timing"),
              "steps": Field("steps", "timed"), "step_ms": Field("ms", "each timed step"),
              "step_ms_mean": Field("ms", "mean step"), "step_ms_std": Field("ms", "its std"),
              "first_step_ms": Field("ms", "first timed step"), "tokens_per_s": Field("tokens/s", "this rank's"),
              "model_tflop_per_step": Field("TFLOP", "model FLOPs per step"),
              "achieved_tflops": Field("TFLOP/s", "model FLOPs / step time"),
              "peak_tflops": Field("TFLOP/s", "the device's peak"), "peak_source": Field("", "where the peak came from"),
              "mfu": Field("", "achieved / peak"), "peak_mem_bytes": Field("bytes", "peak GPU memory (None on the CPU)"),
              # torch.cuda's counters around each timed step (lists; None on the CPU): what the trace's
              # memory rows are checked against
              "step_start_allocated_bytes": Field("bytes", "memory_allocated() before each step"),
              "step_end_allocated_bytes": Field("bytes", "memory_allocated() after each step"),
              "step_peak_allocated_bytes": Field("bytes", "max_memory_allocated() over each step"),
              "step_end_reserved_bytes": Field("bytes", "memory_reserved() after each step"),
              "step_peak_reserved_bytes": Field("bytes", "max_memory_reserved() over each step"),
              "memory_snapshot": Field("", "the last step's memory snapshot file (--memory-snapshot), else None"),
              **STEP_TIMES, **REGION_TIMES},
    "allreduce": {"impl": Field("", "implementation"), "msg_bytes": Field("bytes", "message size"),
                  "iters": Field("", "timed calls"), "latency_us": Field("us", "slowest rank's median"),
                  "rank_latency_us": Field("us", "this rank's median"), "algbw_gb_s": Field("GB/s", "msg_bytes / latency"),
                  "busbw_gb_s": Field("GB/s", "algbw x 2(n-1)/n"), "checked": Field("", "sum verified"),
                  "rel_err": Field("", "relative error of the sum"), **STEP_TIMES},
    "overlap": {"op": Field("", "operation"), "model": Field("", "model whose shapes are used"),
                "M": Field("", "rows"), "N": Field("", "columns"), "K": Field("", "inner dimension"),
                "matmul_us": Field("us", "the product alone"), "unfused_us": Field("us", "collective then product"),
                "fused_us": Field("us", "symmetric-memory fused"), "speedup": Field("x", "unfused / fused"),
                "rel_err": Field("", "fused against unfused"), "checked": Field("", "fused result verified"),
                "step_times": Field("", "variant -> STEP_TIMES of its calls (a step is one call)")},
}


def check(record: dict[str, Any]) -> dict[str, Any]:
    """The record, or RunError naming the first field its workload does not declare or lacks
    (a bug in the workload, caught before anything reads it)."""
    workload = record.get("workload")
    declared = RESULTS.get(workload)
    if declared is None:
        raise RunError("results", f"unknown workload {workload!r}; declared: {', '.join(RESULTS)}")
    _same_keys(f"{workload} results", record, declared)
    for i, row in enumerate(record.get("rows", [])):
        optional = {k for k in ROWS[workload] if k.endswith("_us") or k == "speedup"}  # variants not run
        _same_keys(f"{workload} row {i}", row, ROWS[workload], optional)
    return record


def _same_keys(what: str, got: dict, declared: dict, optional: set[str] = frozenset()) -> None:
    extra = sorted(set(got) - set(declared))
    missing = sorted(set(declared) - set(got) - set(optional))
    if extra or missing:
        raise RunError(what, f"undeclared {extra} / missing {missing} (tracelab/results.py declares them)")


def write(out_dir: str | os.PathLike, rank: int, record: dict[str, Any]) -> Path:
    """This rank's results, checked, as JSON; the runner gathers them into run.json."""
    path = Path(out_dir) / RESULTS_FILE.format(rank=rank)
    path.write_text(json.dumps(check(record), indent=1, sort_keys=True))
    return path


def upgrade(record: dict[str, Any]) -> dict[str, Any]:
    """A record with the names of today (old unit spellings renamed), in rows too."""
    out = {**ADDED.get(record.get("workload"), {}), **{OLD_NAMES.get(k, k): v for k, v in record.items()}}
    if isinstance(out.get("rows"), list):
        added = ADDED_ROWS.get(record.get("workload"), {})
        out["rows"] = [{**added, **{OLD_NAMES.get(k, k): v for k, v in row.items()}} for row in out["rows"]]
    return out


def of_run(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """rank (as a string) -> that rank's results, from run.json as any version wrote it."""
    per_rank = run.get(RUN_KEY, run.get(OLD_RUN_KEY)) or {}
    return {rank: upgrade(record) for rank, record in per_rank.items()}
