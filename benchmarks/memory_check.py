"""Issue 32's must-show, from run folders of the train workload (benchmarks/gpu_memory.sh makes
them on one GPU): what tracelab reads from the memory events against the allocator's own
counters the workload recorded around each step (rank0.results.json), and what was live at the
peak against the model's own sizes.

    python benchmarks/memory_check.py --torch DIR [--torch-off DIR] [--nsys DIR] [--snapshot FILE]

--torch: a torch.profiler(profile_memory=True) run: per step, the trace's peak allocated against
  max_memory_allocated() (within 1%), allocated at the step's start and end against
  memory_allocated(), reserved at the peak against max_memory_reserved()/memory_reserved(); then
  what was live at the highest peak, by scope, against parameters x bytes and AdamW's two states.
--torch-off: the same run with profile_memory off (TRACELAB_PROFILE_MEMORY=0): the step time
  medians, what recording memory costs the step.
--nsys: an nsys --cuda-memory-usage=true run: the memory CUDA held (reserved) against
  memory_reserved(); allocated is unknown to nsys.
--snapshot: the last step's memory snapshot (train --memory-snapshot): its replayed peak and the
  trace's for that step.
On the CPU the workload's counters are None: the comparisons say n/a.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import tracelab
from tracelab.reports.memory import RankMemoryDigest, combine

MIB = 2**20


def _digest(path: Path):
    p = tracelab.load_many(path, reduce={"memory": RankMemoryDigest(top=12)}, keep_events=False)[0]
    return combine([(str(path), {p.rank: p.summary["memory"]})])


def _row(folder: Path) -> dict:
    return json.loads((folder / "rank0.results.json").read_text())["rows"][0]


def _pct(a, b) -> str:
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{100 * (a / b - 1):+.2f}%"


def _mib(n) -> str:
    return "n/a" if n is None else f"{n / MIB:,.1f} MiB"


def torch_steps(folder: Path) -> None:
    m, row = _digest(folder), _row(folder)
    print(f"== {folder}: per step, trace vs torch.cuda counters (params {row['params']:,}, {row['dtype']}, "
          f"{row['phase']}, batch {row['batch_size']} x {row['context_length']})")
    steps = m.steps.sort_values("step")
    for k, (_, s) in enumerate(steps.iterrows()):
        got = {key: row[key][k] if row[key] else None for key in
               ("step_peak_allocated_bytes", "step_start_allocated_bytes", "step_end_allocated_bytes",
                "step_peak_reserved_bytes", "step_end_reserved_bytes")}
        print(f"step {s['step']}: peak {_mib(s['peak_allocated_bytes'])} vs max_memory_allocated "
              f"{_mib(got['step_peak_allocated_bytes'])} ({_pct(s['peak_allocated_bytes'], got['step_peak_allocated_bytes'])}); "
              f"start {_mib(s['allocated_start_bytes'])} vs {_mib(got['step_start_allocated_bytes'])} "
              f"({_pct(s['allocated_start_bytes'], got['step_start_allocated_bytes'])}); "
              f"end {_mib(s['allocated_end_bytes'])} vs {_mib(got['step_end_allocated_bytes'])} "
              f"({_pct(s['allocated_end_bytes'], got['step_end_allocated_bytes'])}); "
              f"reserved at peak {_mib(s['reserved_bytes'])} vs max_memory_reserved {_mib(got['step_peak_reserved_bytes'])}"
              f" / memory_reserved {_mib(got['step_end_reserved_bytes'])}; during {s['peak_during']}; "
              f"allocator calls {s['alloc_calls']} ({s['alloc_sync_calls']} sync)")
    live(m, row)
    for text, _, _ in m.found:
        print("finding:", text)


def live(m, row: dict) -> None:
    """What was live at the highest peak, by scope, against the model's own sizes."""
    peak = m.peaks.iloc[0]
    top = m.top[(m.top["step"] == peak["step"]) & m.top["by"].isin(["scope", "before_trace"])]
    params = row["params"]
    print(f"live at the highest peak (step {peak['step']}, {_mib(peak['peak_allocated_bytes'])}), by scope:")
    for _, t in top.iterrows():
        print(f"  {t['name']:<40} {_mib(t['bytes'])}")
    weights, adam = 4 * params, 2 * 4 * params  # fp32 parameters (autocast keeps them fp32); AdamW: exp_avg, exp_avg_sq
    before = top.loc[top["by"] == "before_trace", "bytes"].sum()
    print(f"model: {params:,} parameters x 4 B = {_mib(weights)} weights; gradients {_mib(weights)}; AdamW's two "
          f"states {_mib(adam)}; weights + states = {_mib(weights + adam)} against '(allocated before the trace)' "
          f"{_mib(before)} ({_pct(before, weights + adam)})")


def step_cost(on: Path, off: Path) -> None:
    a, b = _row(on)["step_ms"][:-1], _row(off)["step_ms"][:-1]  # the last step carries the snapshot
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"== profile_memory cost on the train step: {ma:.2f} ms with, {mb:.2f} ms without "
          f"(medians of {len(a)} and {len(b)} steps): {_pct(ma, mb)}")


def nsys(folder: Path) -> None:
    m, row = _digest(folder), _row(folder)
    held = m.steps["reserved_bytes"].max()
    print(f"== {folder}: nsys sees CUDA's allocations (allocated: unknown)")
    print(f"memory held from CUDA at its peak {_mib(held)} vs max_memory_reserved "
          f"{_mib(max(row['step_peak_reserved_bytes'] or [0]) or None)}: the difference, "
          f"{_mib(held - max(row['step_peak_reserved_bytes'] or [0]))}, is what CUDA libraries (cuBLAS workspaces, "
          "...) and the context allocated outside PyTorch's caching allocator")
    for n in m.notes:
        print("note:", n)


def snapshot(path: Path, torch_dir: Path) -> None:
    s = _digest(path).steps.iloc[0]
    t = _digest(torch_dir).steps.sort_values("step").iloc[-1]
    print(f"== snapshot {path}: replayed peak {_mib(s['peak_allocated_bytes'])}, reserved there "
          f"{_mib(s['reserved_bytes'])}; the trace's last step: peak {_mib(t['peak_allocated_bytes'])} "
          f"({_pct(s['peak_allocated_bytes'], t['peak_allocated_bytes'])})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--torch", type=Path, required=True)
    p.add_argument("--torch-off", type=Path)
    p.add_argument("--nsys", type=Path)
    p.add_argument("--snapshot", type=Path)
    args = p.parse_args()
    torch_steps(args.torch)
    if args.torch_off:
        step_cost(args.torch, args.torch_off)
    if args.nsys:
        nsys(args.nsys)
    if args.snapshot:
        snapshot(args.snapshot, args.torch)


if __name__ == "__main__":
    main()
