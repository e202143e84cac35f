#!/usr/bin/env bash
# A real capture for the DDP fix finding (reports/fixes/ddp.py) and the overlap-comm what-if:
# 2 GPUs (device kind nvidia-h100-x2), train medium bf16, GPU-bound steps whose gradients
# (~1.4 GB fp32) are all-reduced once after backward (--ddp flat), against the same job with
# bucketed all-reduces launched during backward (--ddp bucketed, 25 MB buckets). Under torch
# (the captures) and under none (step times without a profiler, each variant in one process).
# Carry .whl and .device-lib.   bash benchmarks/gpu_ddp_exposed.sh
# ($OUT/log.txt with each run's steps, whatif and findings; $OUT/NAME.tar.gz per run, under 16 MiB)
set -uo pipefail
OUT=${OUT:-/tmp/ddp-out}
W=/tmp/ddp
START=$(date +%s)
BUDGET_S=${BUDGET_S:-300}
mkdir -p "$OUT" "$W/runs"
exec > >(tee "$OUT/log.txt") 2>&1
rm -rf /tmp/site
source benchmarks/device_prelude.sh
source "$REPO/benchmarks/gpu_common.sh"
JOB=${JOB:-"--size medium --dtype bf16 --batch-size 8 --context-length 512 --phase step --steps 5 --warmup 3"}
run() {  # run NAME LIMIT_S BACKEND DDP
  local name=$1 limit=$2 backend=$3 ddp=$4
  budget "$limit" "$name" || return 0
  echo; echo "=== +$(elapsed)s $name: tracelab run train --ranks 2 --backend $backend -- $JOB --ddp $ddp"
  timeout "$limit" python3 -m tracelab run train --ranks 2 --backend "$backend" --out "$W/runs/$name" -- $JOB --ddp "$ddp" \
    2>&1 | grep -vE "^\[default[0-9]\]" | tail -12
}
ask() {  # ask NAME: the questions the fix finding answers, then the run folder back
  local dir; dir=$(ls -d "$W/runs/$1"/*/ 2>/dev/null | head -1); [[ -n "$dir" ]] || return 0
  echo "--- tracelab steps $1"; timeout 90 python3 -m tracelab steps "$dir" 2>&1 | cut -c1-400 | tail -14
  echo "--- tracelab whatif $1"; timeout 90 python3 -m tracelab whatif "$dir" 2>&1 | cut -c1-220 | tail -24
  (cd "$dir/.." && tar czf "$OUT/$1.tar.gz" . && ls -la "$OUT/$1.tar.gz")
}
run none 100 none flat,bucketed,overlap
run flat-torch 80 torch flat
ask flat-torch
run bucketed-torch 80 torch bucketed
ask bucketed-torch
(cd "$W/runs/none" && tar czf "$OUT/none.tar.gz" .)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "=== +$(elapsed)s done"
