#!/usr/bin/env bash
# One-GPU captures with step marks (issue 10) and the profilers' cost (issue 15), on one H100/H200
# (device kind nvidia-h100-x1), through the real `tracelab run` CLI:
#   - train, tiny, full steps (forward, backward, AdamW), 4 timed steps after 1 warm-up,
#     under none, proton, torch and nsys: every trace carries `step N` regions;
#   - decode, tiny, compiled, 6 new tokens, under none, proton, torch and nsys: `token N` regions,
#     and tokens/s under each backend against none (what each profiler costs).
# Carry .whl (msgspec, rich, plotly, typer ... wheels) and .device-lib (libdw/libelf for nsys).
#   bash benchmarks/gpu_steps.sh     # $OUT/log.txt, $OUT/steps-runs.tar.gz
set -uo pipefail
OUT=${OUT:-/tmp/steps-out}
W=/tmp/steps
START=$(date +%s)
BUDGET_S=${BUDGET_S:-540}
mkdir -p "$OUT" "$W/runs"
source benchmarks/device_prelude.sh
source "$REPO/benchmarks/nsys_env.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -c "import torch; print('nccl', torch.cuda.nccl.version())"

elapsed() { echo $(( $(date +%s) - START )); }
run() {  # run LABEL TIMEOUT_S tracelab-run-args...
  local label=$1 limit=$2; shift 2
  if (( $(elapsed) > BUDGET_S - limit / 2 )); then echo "SKIPPED (budget): $label"; return 0; fi
  echo; echo "=== +$(elapsed)s $label: tracelab run $*"
  timeout "$limit" python3 -m tracelab run "$@" 2>&1 | tail -30
  echo "=== +$(elapsed)s $label: exit ${PIPESTATUS[0]}"
}

TRAIN=(--size tiny --phase step --context-length 64 --steps 4 --warmup 1)
DECODE=(--model tiny --compile --prompt-len 4 --new-tokens 6 --samples 1 --warmup 1)
for backend in none proton torch nsys; do
  run "train-$backend" 90 train --ranks 1 --backend $backend --out "$W/runs" --top 6 -- "${TRAIN[@]}"
done
for backend in none proton torch nsys; do
  run "decode-$backend" 150 decode --ranks 1 --backend $backend --out "$W/runs" --top 6 -- "${DECODE[@]}"
done
echo; echo "=== +$(elapsed)s figures per run"
for f in "$W"/runs/*/run.json; do
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-2], r.get('status'), json.dumps(r.get('results', r.get('figures')))[:400])" "$f"
done
(cd "$W/runs" && find . -name '*.nsys-rep' -delete; tar czf "$OUT/steps-runs.tar.gz" .)
ls -la "$OUT"
