#!/usr/bin/env bash
# The README's first command as a user with 2 GPUs types it (device kind nvidia-h100-x2), timed:
# `tracelab run decode --ranks 2` with every default (on a GPU: llama-2-7b, bf16, eager, the default
# backend), each output line stamped with the seconds since the command started; then, as time
# allows, the same under --backend torch. Carry .whl and .device-lib.
#   [WHICH='default torch torch-short'] [TORCH_LIMIT_S=200] bash benchmarks/gpu_readme.sh
#   ($OUT/log.txt, $OUT/readme-runs.tar.gz)
set -uo pipefail
OUT=${OUT:-/tmp/readme-out}
W=/tmp/readme
START=$(date +%s)
BUDGET_S=${BUDGET_S:-560}
mkdir -p "$OUT" "$W/runs"
exec > >(tee "$OUT/log.txt") 2>&1
rm -rf /tmp/site
source benchmarks/device_prelude.sh
source "$REPO/benchmarks/gpu_common.sh"  # elapsed, budget
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
stamp() { local t0; t0=$(date +%s); while IFS= read -r line; do echo "+$(( $(date +%s) - t0 ))s $line"; done; }
readme() {  # readme NAME LIMIT_S extra-args...: the README's command in a folder of its own
  local name=$1 limit=$2; shift 2
  budget "$limit" "$name" || return 0
  echo; echo "=== +$(elapsed)s $name: tracelab run decode --ranks 2 $* (limit ${limit}s)"
  mkdir -p "$W/runs/$name"
  local t0; t0=$(date +%s)
  (cd "$W/runs/$name" && timeout "$limit" python3 -m tracelab run decode --ranks 2 "$@" 2>&1 | stamp | cut -c1-220 | tail -70)
  echo "=== $name: $(( $(date +%s) - t0 )) s wall"
}
# WHICH picks the runs (default: both): "default", "torch", "torch-short" (1 sample of 50 tokens)
for which in ${WHICH:-default torch}; do
  case $which in
    default) readme default 330 ;;
    torch) readme torch "${TORCH_LIMIT_S:-200}" --backend torch ;;
    torch-short) readme torch-short 200 --backend torch -- --samples 1 --new-tokens 50 ;;
  esac
done
(cd "$W/runs" && find . -type f -size +15M -delete && tar czf "$OUT/readme-runs.tar.gz" .)
echo "=== +$(elapsed)s done"
