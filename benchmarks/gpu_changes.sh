#!/usr/bin/env bash
# Real changes measured on one GPU (benchmarks/changes.py measure --gpu), one change at a time so a
# call cut short still brings back the changes it finished: after each, its run folders go to
# $OUT/<change>.tgz (traces of CS336's small model: a few MiB) and changes.json to $OUT. Predict
# here:  mkdir -p D && for f in OUT/*.tgz; do tar xzf $f -C D; done && cp OUT/changes.json D/ &&
#        python benchmarks/changes.py predict D
# Carry .whl.   CHANGES="scope stall bf16" bash benchmarks/gpu_changes.sh [measure options]
#   e.g. --repeats 1 --late-work 8 --stall-ms 10 --base-args "--batch-size 8"   (a held-out check)
# DEVICE=cpu measures the CPU changes on the machine's CPUs with CUDA hidden (a quiet many-core host).
set -uo pipefail
OUT=${OUT:-/tmp/changes-out}
W=/tmp/changes-gpu
mkdir -p "$OUT" "$W"
exec > >(tee "$OUT/log.txt") 2>&1
rm -rf /tmp/site "$W/changes"  # a warm machine keeps an older install and older runs
source benchmarks/device_prelude.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
gpu=--gpu
[[ ${DEVICE:-gpu} == cpu ]] && { gpu=; export CUDA_VISIBLE_DEVICES=; }
for change in ${CHANGES:-scope stall bf16}; do
  python3 "$REPO/benchmarks/changes.py" measure $gpu --out "$W/changes" --only "$change" "$@" 2>&1 \
    | grep -vE "^\[default[0-9]\]"
  (cd "$W/changes" && find "$change" -name '*.nsys-rep' -delete; tar czf "$OUT/$change.tgz" "$change")
  cp "$W/changes/changes.json" "$OUT/"
  date -u +"%H:%M:%S $change done"
done
ls -l "$OUT"
