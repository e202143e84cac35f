#!/usr/bin/env bash
# Captures for issues 20, 21 and 24 on one H100/H200 (device kind nvidia-h100-x1), PART=a or b:
#   a: benchmarks/known_shapes.py under torch, proton (+ proton-viewer -m tflop/s,tbytes/s) and nsys;
#      benchmarks/graph_scopes.py under torch and nsys, capture inside and outside the trace;
#      train (tracelab run) with a tiny batch (host-bound) and a large one (GPU-bound) under torch, nsys;
#   b: train small bf16 with batch 32 x 1024 (GPU-bound even under torch.profiler) under torch, nsys;
#      decode (tracelab run) tiny --compile under torch, nsys, proton; llama-3.2-1b eager under torch
#      and proton; train small bf16 steps under torch and proton (MFU against the trace).
# Carry .whl and .device-lib.   PART=a bash benchmarks/gpu_round1.sh   ($OUT/*.tar.gz, log.txt)
set -uo pipefail
OUT=${OUT:-/tmp/r1-out}
W=/tmp/r1
START=$(date +%s)
BUDGET_S=${BUDGET_S:-560}
mkdir -p "$OUT" "$W/runs" "$W/cap"
source benchmarks/device_prelude.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
source "$REPO/benchmarks/gpu_common.sh"  # elapsed, budget, nsys_cap
run() {  # run LABEL TIMEOUT_S tracelab-run-args...
  local label=$1 limit=$2; shift 2
  budget $((limit / 2)) "$label" || return 0
  echo; echo "=== +$(elapsed)s $label: tracelab run $*"
  timeout "$limit" python3 -m tracelab run "$@" 2>&1 | tail -25
  echo "=== +$(elapsed)s $label: exit ${PIPESTATUS[0]}"
}
if [ "${PART:-a}" = a ]; then
  for b in torch proton; do
    echo "=== +$(elapsed)s known_shapes $b"
    timeout 120 python3 "$REPO/benchmarks/known_shapes.py" --backend $b --out "$W/cap/shapes-$b" 2>&1 | tail -3
  done
  echo "=== +$(elapsed)s known_shapes nsys"
  mkdir -p "$W/cap/shapes-nsys"; nsys_cap "$W/cap/shapes-nsys" "$REPO/benchmarks/known_shapes.py" --backend nsys --out "$W/cap/shapes-nsys"
  for m in "tflop/s,tbytes/s" "time/ms"; do
    echo "=== proton-viewer -m $m"; proton-viewer -m "$m" "$W/cap/shapes-proton/rank0.hatchet" 2>&1 | tee -a "$W/cap/shapes-proton/proton-viewer.txt" | head -60
  done
  for c in inside outside; do
    echo "=== +$(elapsed)s graph_scopes torch $c"
    timeout 120 python3 "$REPO/benchmarks/graph_scopes.py" --backend torch --capture $c --out "$W/cap/graph-$c-torch" 2>&1 | tail -3
    echo "=== +$(elapsed)s graph_scopes nsys $c"
    mkdir -p "$W/cap/graph-$c-nsys"; nsys_cap "$W/cap/graph-$c-nsys" "$REPO/benchmarks/graph_scopes.py" --backend nsys --capture $c --out "$W/cap/graph-$c-nsys"
  done
  (cd "$W/cap" && tar czf "$OUT/caps.tar.gz" .)
  SMALL=(--size tiny --phase step --context-length 64 --batch-size 1 --steps 4 --warmup 2)
  LARGE=(--size small --phase step --context-length 512 --batch-size 16 --dtype bf16 --steps 3 --warmup 2)
  for b in torch nsys; do
    run "idle-small-$b" 120 train --ranks 1 --backend $b --out "$W/runs" --top 5 -- "${SMALL[@]}"
    run "idle-large-$b" 150 train --ranks 1 --backend $b --out "$W/runs" --top 5 -- "${LARGE[@]}"
  done
else
  XL=(--size small --phase step --context-length 1024 --batch-size 32 --dtype bf16 --steps 3 --warmup 2)
  for b in torch nsys; do
    run "idle-xl-$b" 150 train --ranks 1 --backend $b --out "$W/runs" --top 5 -- "${XL[@]}"
  done
  DEC=(--prompt-len 8 --new-tokens 6 --samples 1 --warmup 1)
  for b in torch nsys proton; do
    run "decode-compile-$b" 170 decode --ranks 1 --backend $b --out "$W/runs" --top 5 -- --model tiny --compile "${DEC[@]}"
  done
  for b in torch proton; do
    run "decode-1b-$b" 120 decode --ranks 1 --backend $b --out "$W/runs" --top 5 -- --model llama-3.2-1b "${DEC[@]}"
    run "train-small-$b" 120 train --ranks 1 --backend $b --out "$W/runs" --top 5 -- --size small --phase step --dtype bf16 --steps 3 --warmup 2
  done
fi
(cd "$W/runs" && find . -name '*.nsys-rep' -delete; rm -f */report.html; tar czf "$OUT/runs-${PART:-a}.tar.gz" .)
echo "=== +$(elapsed)s done"; ls -la "$OUT"
