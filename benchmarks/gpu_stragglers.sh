#!/usr/bin/env bash
# Issue 14 on one 2-GPU machine (device kind nvidia-h200-x2): a small data-parallel training job
# (tiny model, bucketed gradient all-reduce over NCCL) in three variants, each under torch, nsys
# and proton:
#   late=rank1        rank 1 does 4 extra 4096x4096 fp32 products before every step's backward
#   late=alternating  the rank of the step's parity does them
#   late=none         equal work
# and the tensor-parallel decode (tiny, compiled, NCCL all-reduce, 16 tokens) in the same three
# variants, the late rank's products before each token's step; first a symm-one-shot decode with
# no profiler (the workloads' shared process-group setup on GPUs). WORKLOADS picks: "train decode".
# Carry .whl (msgspec, rich, plotly, typer, pydantic ... wheels) and .device-lib (nsys's libraries).
#   bash benchmarks/gpu_stragglers.sh   # $OUT/log.txt, $OUT/stragglers.tar.gz (the run folders)
set -uo pipefail
OUT=${OUT:-/tmp/straggler-out}
W=/tmp/strag
START=$(date +%s)
BUDGET_S=${BUDGET_S:-540}
mkdir -p "$OUT" "$W/runs"
source benchmarks/device_prelude.sh
source "$REPO/benchmarks/nsys_env.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -c "import torch; print('nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"

elapsed() { echo $(( $(date +%s) - START )); }
TRAIN=(--size tiny --phase step --context-length 64 --steps 8 --warmup 2 --ddp bucketed --late-work 4)
DECODE=(--model tiny --compile --allreduce nccl --prompt-len 4 --new-tokens 17 --samples 1 --warmup 1 --late-work 4)
variants() {  # variants WORKLOAD ARGS...: rank1, alternating, none under torch, nsys, proton
  local workload=$1; shift
  for backend in torch nsys proton; do
    for late in rank1 alternating none; do
      if (( $(elapsed) > BUDGET_S - 40 )); then echo "SKIPPED (budget): $workload $late $backend"; continue; fi
      echo; echo "=== +$(elapsed)s $workload late=$late backend=$backend"
      timeout 120 python3 -m tracelab run $workload --ranks 2 --backend $backend --out "$W/runs/$workload-$late" \
        --top 4 -- "$@" --late $late 2>&1 | grep -vE "nsys-rep|^\[default[0-9]\]:$" | tail -14
      echo "=== +$(elapsed)s exit ${PIPESTATUS[0]}"
    done
  done
}
for workload in ${WORKLOADS:-train decode}; do
  case $workload in
    train) variants train "${TRAIN[@]}" ;;
    decode)
      echo; echo "=== +$(elapsed)s decode, symm-one-shot, no profiler"
      timeout 150 python3 -m tracelab run decode --ranks 2 --backend none --out "$W/runs/decode-check" \
        -- --model tiny --compile --allreduce symm-one-shot --prompt-len 4 --new-tokens 17 --samples 2 2>&1 | tail -4
      variants decode "${DECODE[@]}" ;;
  esac
done
for d in "$W"/runs/*/*/; do
  echo; echo "=== steps $d"; timeout 60 python3 -m tracelab steps "$d" 2>&1 | tail -6
done
(cd "$W/runs" && find . -name '*.nsys-rep' -delete && find . -name report.html -delete; tar czf "$OUT/stragglers.tar.gz" .)
ls -la "$OUT"
