#!/usr/bin/env bash
# Issue 28's must-show on one H100 (device kind nvidia-h100-x1), within BUDGET_S (150 s):
#  (a) our own decode run under torch and under nsys, 2 samples (`token N` ranges repeat per
#      sample): tracelab steps' per-token step times beside the run's own tokens/s;
#  (b) a compiled Llama decode (MODEL, default llama-3.2-1b: llama-2-7b compiles for 95-140 s
#      cold, over this budget; MODEL=llama-2-7b BUDGET_S=300 for it) under torch, writing
#      Inductor's per-kernel bytes and FLOPs into rank0.provenance.json's "work" at compile time;
#      then `tracelab roofline RUN --by scope`, the share of GPU time whose work is known, and
#      decode_one_token's bytes per token against the weights a step reads (run's weight_bytes).
# PARTS="a b" (default) picks the parts; (b) gets what (a) leaves of BUDGET_S, less 35 s for its roofline
# and the tar:
# where its compile does not fit, `PARTS=b BUDGET_S=150` gives it the whole budget.
# Carry .whl and .device-lib.   bash benchmarks/gpu_trust.sh   ($OUT/trust-runs.tar.gz, log on stdout)
set -uo pipefail
OUT=${OUT:-/tmp/trust-out}
W=/tmp/trust
START=$(date +%s)
BUDGET_S=${BUDGET_S:-150}
MODEL=${MODEL:-llama-3.2-1b}
PARTS=${PARTS:-a b}
mkdir -p "$OUT" "$W/runs"
source benchmarks/device_prelude.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
source "$REPO/benchmarks/gpu_common.sh"  # elapsed, budget
EAGER=(--model tiny --prompt-len 8 --new-tokens 32 --samples 2 --warmup 1)
COMPILED=(--model "$MODEL" --compile --prompt-len 8 --new-tokens 16 --samples 1 --warmup 1)

# (a) per-token steps against the run's own tokens/s, torch then nsys
for b in torch nsys; do
  [[ " $PARTS " == *" a "* ]] || break
  budget 60 "decode-$b" || continue
  echo; echo "=== +$(elapsed)s (a) tracelab run decode --ranks 1 --backend $b -- ${EAGER[*]}"
  timeout 45 python3 -m tracelab run decode --ranks 1 --backend $b --out "$W/runs/a-$b" --top 3 -- "${EAGER[@]}" \
    2>&1 | grep -E "rank 0:|error|Error|note" | tail -4
  dir=$(ls -dt "$W"/runs/a-$b/*/ 2>/dev/null | head -1)
  [ -n "$dir" ] && [ -f "$dir/rank0.results.json" ] || continue
  echo "=== +$(elapsed)s $dir"; python3 "$REPO/benchmarks/trust_figures.py" tokens "$dir"
  timeout 20 python3 -m tracelab steps "$dir" 2>&1 | cut -c1-160 | head -12
  timeout 20 python3 -m tracelab steps "$dir" --format json > "$W/steps-$b.json" 2>/dev/null \
    && python3 "$REPO/benchmarks/trust_figures.py" steps "$W/steps-$b.json" "$dir"
done

# (b) the compiled decode's roofline, Inductor's work from the provenance map
if [[ " $PARTS " == *" b "* ]] && budget 60 "compiled $MODEL"; then
  echo; echo "=== +$(elapsed)s (b) tracelab run decode --ranks 1 --backend torch -- ${COMPILED[*]}"
  timeout $((BUDGET_S - $(elapsed) - 35)) python3 -m tracelab run decode --ranks 1 --backend torch \
    --out "$W/runs/b-torch" --top 3 -- "${COMPILED[@]}" 2>&1 | grep -E "rank 0:|warm-up|error|Error|note" | tail -6
  dir=$(ls -dt "$W"/runs/b-torch/*/ 2>/dev/null | head -1)
  if [ -n "$dir" ] && [ -f "$dir/rank0.results.json" ]; then
    echo "=== +$(elapsed)s $dir"; python3 "$REPO/benchmarks/trust_figures.py" tokens "$dir"
    timeout 20 python3 -m tracelab roofline "$dir" --by scope --top 25 2>&1 | cut -c1-170 | head -40
    timeout 20 python3 -m tracelab roofline "$dir" --by scope --top 0 --format json > "$W/roofline.json" 2>/dev/null \
      && python3 "$REPO/benchmarks/trust_figures.py" decode "$W/roofline.json" "$dir"
  fi
fi

# the run folders, traces kept where under 16 MiB a file (else the rank 0 trace and run.json only)
(cd "$W/runs" && find . \( -name '*.nsys-rep' -o -name report.html \) -delete
 for d in */*/; do
   if [ -n "$(find "$d" -type f -size +16M)" ]; then
     find "$d" -type f ! -name run.json ! -name 'rank0.*' -delete; find "$d" -type f -size +16M -delete
   fi
 done
 tar czf "$OUT/trust-runs.tar.gz" .)
echo "=== +$(elapsed)s done"; ls -la "$OUT"
