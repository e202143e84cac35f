#!/usr/bin/env bash
# The gate's pairs on one GPU (device kind nvidia-h100-x1), at most about 250 s: tracelab installed
# non-editable as the other GPU scripts do (device_prelude.sh), then `gate_pairs.py make --gpu`
# (rounds of train small fp32 and bf16, decode tiny and the fp32 train's changes), starting no
# run past BUDGET_S seconds. The run folders come back as $OUT/gate-gpu.tar.gz; judge them here:
#   tar xzf gate-gpu.tar.gz -C bench-out && python benchmarks/gate_pairs.py judge bench-out/gate-gpu --gpu
# Carry .whl.   bash benchmarks/gpu_gate.sh   ($OUT/gate-gpu.tar.gz, $OUT/log.txt)
set -uo pipefail
OUT=${OUT:-/tmp/gate-out}
W=/tmp/gate-gpu
BUDGET_S=${BUDGET_S:-185}
mkdir -p "$OUT" "$W"
exec > >(tee "$OUT/log.txt") 2>&1
rm -rf /tmp/site "$W/gate-gpu"  # a warm machine keeps an older install and older runs
source benchmarks/device_prelude.sh
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
python3 "$REPO/benchmarks/gate_pairs.py" make "$W/gate-gpu" --gpu --runs 4 --budget-s "$BUDGET_S" --threads 4 2>&1 \
  | grep -vE "^\[default[0-9]\]"
du -sh "$W"/gate-gpu/*/* | sort -h | tail -3
(cd "$W" && find gate-gpu -name '*.nsys-rep' -delete && tar czf "$OUT/gate-gpu.tar.gz" gate-gpu)
ls -l "$OUT"
