#!/usr/bin/env bash
# Issue 5 on a 2-GPU H200 machine (device kind nvidia-h200-x2): tensor-parallel llama-2-7b decode
# (random bf16 weights, batch 1, compiled) on 2 ranks with NCCL and with symmetric-memory one-shot
# all-reduce, under none, proton, torch and nsys, through the real `tracelab run` CLI (breakdown
# printed, report written). Carry .whl (msgspec, rich, plotly wheels) and .device-lib (nsys libs).
# FLAGS adds decode options to every row (e.g. the tuned set of benchmarks/RESULTS.md); IMPLS and
# BACKENDS pick the rows; TINY=1 ends with tiny 2-rank captures (symm-one-shot) for tests/data.
#   bash benchmarks/gpu_decode_tp.sh 2>&1 | tee $OUT/log.txt   # + $OUT/tp-runs.tar.gz, tp-summary.txt
set -uo pipefail
OUT=${OUT:-/tmp/tp-out}
W=/tmp/tp
START=$(date +%s)
BUDGET_S=${BUDGET_S:-500}
mkdir -p "$OUT" "$W/runs"
source benchmarks/device_prelude.sh
nvidia-smi -L

TOKENS=${TOKENS:-100}
read -r -a EXTRA <<< "${FLAGS:-}"
elapsed() { echo $(( $(date +%s) - START )); }
quiet() { grep -vE "USDT|UserWarning|warn|^\[default[0-9]\]:(Collecting|Generating|Processing|Saving|W[0-9]| *$)"; }
for allreduce in ${IMPLS:-nccl symm-one-shot}; do
  for backend in ${BACKENDS:-none torch proton nsys}; do
    if (( $(elapsed) > BUDGET_S )); then echo "SKIPPED (budget): $allreduce $backend"; continue; fi
    echo; echo "=== +$(elapsed)s decode 2 ranks allreduce=$allreduce backend=$backend"
    timeout $(( BUDGET_S + 60 - $(elapsed) )) python3 -m tracelab run decode --ranks 2 --backend $backend \
        --out "$W/runs" --top 6 -- --model llama-2-7b --compile --allreduce $allreduce --new-tokens $TOKENS \
        --samples 2 --warmup 1 "${EXTRA[@]}" 2>&1 | quiet
    last=$(ls -td "$W"/runs/*/ | head -1)
    [ $backend != none ] && python3 -m tracelab breakdown "$last" --by op_class --top 6 2>&1
  done
done
if [ "${TINY:-0}" = 1 ]; then
  for backend in proton torch nsys; do
    (( $(elapsed) > BUDGET_S + 30 )) && { echo "SKIPPED (budget): tiny $backend"; continue; }
    echo; echo "=== +$(elapsed)s tiny 2 ranks symm-one-shot backend=$backend"
    timeout 120 python3 -m tracelab run decode --ranks 2 --backend $backend --out "$W/caps" --top 6 -- \
        --model tiny --compile --allreduce symm-one-shot --prompt-len 4 --new-tokens 6 --samples 1 --warmup 1 2>&1 | quiet
  done
fi
python3 - "$W/runs" > "$OUT/tp-summary.txt" <<'PY'
import json, sys, pathlib
for run in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    doc = json.loads((run / "run.json").read_text()) if (run / "run.json").exists() else {}
    print(run.name, json.dumps(doc.get("results", doc.get("figures", {})))[:600])
PY
cat "$OUT/tp-summary.txt"
tar czf "$OUT/tp-runs.tar.gz" -C "$W" --exclude='*.nsys-rep' --exclude='*.qdstrm' --exclude='runs/*/*.sqlite' \
    --exclude='runs/*/*.pt.trace.json.gz' --exclude='runs/*/*.hatchet' --exclude='report.html' runs $(ls -d caps 2>/dev/null)
ls -la "$OUT"
