#!/usr/bin/env bash
# Issue 32's must-show on one H100 (device kind nvidia-h100-x1), at most ~120 s of machine time:
# the train workload (small, bf16, AdamW step, batch 8 x 512, a region per top-level module) run
# directly (no torchrun, no report: time) under torch.profiler with profile_memory=True and a
# memory snapshot of its last step; the same with profile_memory off (the profiler's own cost of
# recording memory); the same under nsys --cuda-memory-usage=true. Then benchmarks/memory_check.py
# (trace vs torch.cuda's counters per step, live at the peak vs the model's sizes, the cost, nsys
# held vs reserved, the snapshot) and `tracelab memory` on each.
# Carry .whl and .device-lib.   bash benchmarks/gpu_memory.sh   ($OUT/memory.tar.gz, log on stdout)
# CPU dry run of everything but nsys and the snapshot (no prelude):
#   CPU_DRY_RUN=1 TRAIN_SIZE=tiny BATCH=2 CONTEXT=128 SNAPSHOT= BUDGET_S=600 bash benchmarks/gpu_memory.sh
set -uo pipefail
OUT=${OUT:-/tmp/mem-out}
W=/tmp/mem
START=$(date +%s)
BUDGET_S=${BUDGET_S:-115}
SNAPSHOT=${SNAPSHOT---memory-snapshot}
mkdir -p "$OUT" "$W/runs"
if [[ -z "${CPU_DRY_RUN:-}" ]]; then
  source benchmarks/device_prelude.sh
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
else
  REPO=$PWD; cd "$W" || exit 2
fi
source "$REPO/benchmarks/gpu_common.sh"  # elapsed, budget, NSYS
TRAIN=(-m tracelab.workloads.train --size "${TRAIN_SIZE:-small}" --dtype bf16 --phase step --batch-size "${BATCH:-8}"
       --context-length "${CONTEXT:-512}" --warmup 2 --steps 4 --module-scopes)
done_in() { [[ -f "$1/rank0.results.json" ]] || { echo "NO RESULTS in $1 (timed out or failed)"; return 1; }; }
R=$W/runs
echo "=== +$(elapsed)s torch, profile_memory on${SNAPSHOT:+, a snapshot of the last step}"
TRACELAB_PROFILE_MEMORY=1 timeout 60 python3 "${TRAIN[@]}" --backend torch --out "$R/torch" $SNAPSHOT 2>&1 | grep -v USDT | tail -2
CHECK=(--torch "$R/torch")
done_in "$R/torch" || { (cd "$R" && tar czf "$OUT/memory.tar.gz" .); exit 1; }
[[ -n "$SNAPSHOT" && -f "$R/torch/rank0.memory.pickle" ]] && CHECK+=(--snapshot "$R/torch/rank0.memory.pickle")
if budget 30 torch-off; then
  echo "=== +$(elapsed)s torch, profile_memory off"
  TRACELAB_PROFILE_MEMORY=0 timeout 40 python3 "${TRAIN[@]}" --backend torch --out "$R/torch-off" 2>&1 | grep -v USDT | tail -1
  done_in "$R/torch-off" && CHECK+=(--torch-off "$R/torch-off")
fi
if [[ -z "${CPU_DRY_RUN:-}" ]] && budget 45 nsys; then
  echo "=== +$(elapsed)s nsys --cuda-memory-usage=true"
  mkdir -p "$R/nsys"
  timeout 60 "$NSYS" profile --trace=cuda,nvtx --sample=none --cpuctxsw=none --capture-range=cudaProfilerApi \
    --capture-range-end=stop --cuda-memory-usage=true -o "$R/nsys/rank0" \
    python3 "${TRAIN[@]}" --backend nsys --out "$R/nsys" > "$R/nsys/nsys.log" 2>&1
  timeout 40 "$NSYS" export --type sqlite -o "$R/nsys/rank0.sqlite" "$R/nsys/rank0.nsys-rep" >> "$R/nsys/nsys.log" 2>&1
  rm -f "$R/nsys/rank0.nsys-rep"; tail -2 "$R/nsys/nsys.log"
  [[ -f "$R/nsys/rank0.sqlite" ]] && done_in "$R/nsys" && CHECK+=(--nsys "$R/nsys")
fi
echo "=== +$(elapsed)s memory_check.py ${CHECK[*]}"
python3 "$REPO/benchmarks/memory_check.py" "${CHECK[@]}" 2>&1
for d in "$R/torch" "$R/nsys"; do
  [[ -d "$d" ]] && { echo "=== tracelab memory $d"; timeout 30 python3 -m tracelab memory "$d" --top 8 2>&1 | cut -c1-200 | head -60; }
done
(cd "$R" && tar czf "$OUT/memory.tar.gz" .)
echo "=== +$(elapsed)s done"; ls -la "$OUT"
