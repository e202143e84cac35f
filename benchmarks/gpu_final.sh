#!/usr/bin/env bash
# The merged tree end to end on 2 GPUs (device kind nvidia-h100-x2), about 300 s: `tracelab run`
# installed non-editable as a user would, then every question on its run folders:
#  decode 2 ranks (torch), train 2 ranks DDP flat small bf16 (torch: the DDP fix finding's real
#  positive, memory recorded by default), train 1 rank under nsys (memory from CUDA's events).
# Carry .whl and .device-lib.   bash benchmarks/gpu_final.sh   ($OUT/final-runs.tar.gz, $OUT/log.txt)
set -uo pipefail
OUT=${OUT:-/tmp/final-out}
W=/tmp/final
START=$(date +%s)
BUDGET_S=${BUDGET_S:-330}
mkdir -p "$OUT" "$W/runs"
exec > >(tee "$OUT/log.txt") 2>&1
rm -rf /tmp/site  # a warm machine keeps an older install, which pip --target would not replace
source benchmarks/device_prelude.sh
source "$REPO/benchmarks/gpu_common.sh"  # elapsed, budget
run() {  # run NAME LIMIT_S tracelab-run-args...
  local name=$1 limit=$2 workload=$3; shift 3
  budget "$limit" "$name" || return 0
  echo; echo "=== +$(elapsed)s $name: tracelab run $workload $*"
  timeout "$limit" python3 -m tracelab run "$workload" --out "$W/runs/$name" "$@" 2>&1 | grep -vE "^\[default[0-9]\]" | tail -25
}
ask() {  # ask NAME: every question on the run folder
  local dir; dir=$(ls -d "$W/runs/$1"/*/ 2>/dev/null | head -1); [[ -n "$dir" ]] || return 0
  for q in "steps" "idle --top 3" "whatif" "memory --top 5" "roofline --top 5"; do
    echo "--- tracelab $q $1"; timeout 60 python3 -m tracelab $q "$dir" 2>&1 | cut -c1-180 | tail -22
  done
}
run decode-tp2 110 decode --ranks 2 --backend torch -- --samples 2
ask decode-tp2
run ddp-flat 90 train --ranks 2 --backend torch -- --size small --dtype bf16 --ddp flat --steps 5 --warmup 2
ask ddp-flat
run train-nsys 70 train --ranks 1 --backend nsys -- --size small --dtype bf16 --steps 4 --warmup 2
ask train-nsys
(cd "$W/runs" && find . -name '*.nsys-rep' -delete && find . -type f -size +15M -delete && tar czf "$OUT/final-runs.tar.gz" .)
echo "=== +$(elapsed)s done"
