#!/usr/bin/env bash
# Issue 28 (h28a) on one H100/H200 (device kind nvidia-h100-x1): decode of 2 samples under torch and
# nsys (each sample's `token 1..N` must be distinct steps, per-token step time = the run's tokens/s
# within 5%: benchmarks/per_token.py), then `tracelab idle` (launch table: graph launches counted
# once) and `steps` findings of each; a train run under none and torch for the report's run table
# (median step time, plain numbers, run.json at the end). Budget about 420 s.
# Carry .whl and .device-lib.   bash benchmarks/gpu_truth.sh   ($OUT/runs.tar.gz, log on stdout)
set -uo pipefail
OUT=${OUT:-/tmp/truth-out}
W=/tmp/truth
START=$(date +%s)
BUDGET_S=${BUDGET_S:-420}
mkdir -p "$OUT" "$W/runs"
source benchmarks/device_prelude.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
source "$REPO/benchmarks/gpu_common.sh"  # elapsed, budget
DEC=(--model tiny --compile --prompt-len 8 --new-tokens 32 --samples 2 --warmup 1)
TRAIN=(--size tiny --phase step --steps 8 --warmup 2)
run() {  # run LABEL TIMEOUT_S tracelab-run-args...: the run, then per-token, idle and steps of it
  local label=$1 limit=$2; shift 2
  budget $((limit / 2)) "$label" || return 0
  echo; echo "=== +$(elapsed)s $label: tracelab run $*"
  timeout "$limit" python3 -m tracelab run "$@" 2>&1 | grep -E "rank 0:|warm-up|error|note" | tail -6
  local dir; dir=$(ls -dt "$W"/runs/*/ | head -1)
  echo "=== +$(elapsed)s $label: $dir"
  if [[ $label == decode-* ]]; then python3 "$REPO/benchmarks/per_token.py" "$dir" 2>&1 | tail -4; fi
  timeout 60 python3 -m tracelab idle "$dir" 2>&1 | grep -A4 "kernel launches" | cut -c1-200
  timeout 60 python3 -m tracelab steps "$dir" 2>&1 | sed -n '/^clock\|^straggler\|^findings/,$p' | cut -c1-300 | head -14
}
run decode-torch 150 decode --ranks 1 --backend torch --out "$W/runs" --top 5 -- "${DEC[@]}"
run decode-nsys 170 decode --ranks 1 --backend nsys --out "$W/runs" --top 5 -- "${DEC[@]}"
run train-none 60 train --ranks 1 --backend none --out "$W/runs" --top 5 -- "${TRAIN[@]}"
run train-torch 60 train --ranks 1 --backend torch --out "$W/runs" --top 5 -- "${TRAIN[@]}"
(cd "$W/runs" && find . -name '*.nsys-rep' -delete; tar czf "$OUT/runs.tar.gz" .)
echo "=== +$(elapsed)s done"; ls -la "$OUT"
