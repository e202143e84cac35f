#!/usr/bin/env bash
# Issue 20 on one H100/H200 (device kind nvidia-h100-x1): the known-shapes capture under proton again
# (known_shapes.py now enters each region per call, so proton's scope metrics are the whole work),
# proton-viewer's rates on it, and our decode and train runs under proton (regions now carry proton
# flops/bytes metrics) and torch, each followed by `tracelab roofline`.
# Carry .whl and .device-lib.   bash benchmarks/gpu_round2_roofline.sh   ($OUT/*.tar.gz, $OUT/log.txt)
set -uo pipefail
OUT=${OUT:-/tmp/r2-out}
W=/tmp/r2
mkdir -p "$OUT" "$W/runs" "$W/cap"
source benchmarks/device_prelude.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
roof() { echo "=== tracelab roofline $*"; timeout 120 python3 -m tracelab roofline "$@" 2>&1 | cut -c1-200; }
for b in proton torch; do
  echo "=== known_shapes $b"
  timeout 120 python3 "$REPO/benchmarks/known_shapes.py" --backend $b --out "$W/cap/shapes-$b" 2>&1 | tail -3
  roof "$W/cap/shapes-$b" --by scope --top 20
done
for m in "tflop16/s,tflop32/s,tbyte/s" "time/ms"; do
  echo "=== proton-viewer -m $m"
  proton-viewer -m "$m" "$W/cap/shapes-proton/rank0.hatchet" 2>&1 | tee -a "$W/cap/shapes-proton/proton-viewer.txt" | head -40
done
DEC=(--model llama-3.2-1b --prompt-len 8 --new-tokens 6 --samples 1 --warmup 1)
TRAIN=(--size small --phase step --dtype bf16 --steps 3 --warmup 2)
for b in proton torch; do
  for w in decode train; do
    echo "=== tracelab run $w --backend $b"
    if [ $w = decode ]; then args=("${DEC[@]}"); else args=("${TRAIN[@]}"); fi
    timeout 150 python3 -m tracelab run $w --ranks 1 --backend $b --out "$W/runs" --top 3 -- "${args[@]}" 2>&1 | grep -E "rank 0|run folder|error" | cut -c1-250
    dir=$(ls -d "$W/runs/$w-$b-"* | tail -1)
    roof "$dir" --top 8
    roof "$dir" --by scope --top 6
  done
done
(cd "$W/cap" && tar czf "$OUT/caps.tar.gz" .)
(cd "$W/runs" && rm -f */report.html && tar czf "$OUT/runs.tar.gz" .)
ls -la "$OUT"
