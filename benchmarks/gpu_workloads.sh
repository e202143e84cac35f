#!/usr/bin/env bash
# Issue 4's figures on one 2-GPU H200 machine (device kind nvidia-h200-x2), in two parts
# that each fit one device call (< 540 s):
#
#   bash benchmarks/gpu_workloads.sh figures    # all-reduce sweep of every implementation,
#                                               # multimem's refusal, overlap speedups, train
#                                               # step times + MFU on 1 GPU, the 4 DP variants
#                                               # on 2, a 2-rank out-of-memory, allreduce captures
#   bash benchmarks/gpu_workloads.sh captures   # train and overlap under proton, torch, nsys
#   bash benchmarks/gpu_workloads.sh all        # both, new steps started while BUDGET_S lasts
#   bash benchmarks/gpu_workloads.sh pack       # pack what a part cut short left
#
# Run from the repository root with .device-lib carried (../shared/device/fetch-nsys-libs.sh).
# Writes $OUT/runs.tar.gz (every run folder: run.json, figures, logs) and
# $OUT/captures.tar.gz (2-rank traces for tests/data); tee the output to $OUT/log.txt.
# NVLink multicast stays off throughout (the runner sets the same variables for every rank).
set -uo pipefail
PART=${1:?usage: gpu_workloads.sh figures|captures}
OUT=${OUT:-/tmp/gw-out}
W=/tmp/gw
START=$(date +%s)
BUDGET_S=${BUDGET_S:-480}
mkdir -p "$OUT" "$W/runs" "$W/captures"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

step() { echo; echo "=== +$(( $(date +%s) - START ))s $*"; }
time_left() {  # skip what would not finish inside the call
  if (( $(date +%s) - START > BUDGET_S )); then echo "SKIPPED (budget): $*"; return 1; fi
}

# tracelab run through the runner's API: the CLI would also render the report, which needs
# plotly and msgspec, not on this machine. tl_run ROOT WORKLOAD RANKS BACKEND [workload args]
tl_run() {
  local root=$1 workload=$2 ranks=$3 backend=$4
  shift 4
  python3 - "$root" "$workload" "$ranks" "$backend" "$@" <<'PY'
import sys
from pathlib import Path
from tracelab import runner
from tracelab.errors import TracelabError
root, workload, ranks, backend, *args = sys.argv[1:]
try:
    result = runner.run(runner.RunSpec(workload, int(ranks), backend, Path(root), args), on_line=print)
except TracelabError as e:
    print(f"tracelab run {workload}: error: {e}")
    sys.exit(2)
print("RUN_DIR", result.run_dir, "traces:", [t.name for t in result.traces])
PY
}

setup() {
  step "machine"
  nvidia-smi -L
  nvidia-smi topo -m | head -4
  nvidia-smi nvlink -s -i 0 | head -4
  env | grep -E 'NVLS|MULTICAST' | sort
  python3 -m pip install -q --no-deps --no-build-isolation --no-index . 2>&1 | tail -2
  # run from elsewhere: in the repository root, ./tracelab (without its workloads) would
  # shadow the installed package; nsys's libraries are found through LD_LIBRARY_PATH
  export LD_LIBRARY_PATH=$PWD/.device-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  . benchmarks/nsys_env.sh
  cd "$W" || exit 2
  python3 -c "import torch, triton, tracelab.workloads.train as t; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'gpus', torch.cuda.device_count())"
}

captures() {  # captures WORKLOAD ARGS...: 2 ranks under proton, torch and nsys
  local workload=$1
  shift
  for backend in proton torch nsys; do
    time_left "$workload $backend capture" || return 0
    step "capture $workload under $backend"
    timeout 80 bash -c "$(declare -f tl_run); tl_run $W/captures $workload 2 $backend $*"
  done
}

figures() {
  step "multimem (NVLink multicast is off here): expect one line and exit 2"
  python3 -m tracelab.workloads.allreduce --impl multimem --out "$W/multimem"
  echo "exit status $?"

  step "allreduce sweep, 2 GPUs, bf16, every implementation"
  timeout 150 bash -c "$(declare -f tl_run); tl_run $W/runs allreduce 2 none \
      --impl nccl,symm-one-shot,symm-two-shot,triton-one-shot --sizes 4K-1G"

  time_left overlap && step "overlap: fused vs unfused on reference 004's shapes, 2 GPUs" &&
  timeout 120 bash -c "$(declare -f tl_run); tl_run $W/runs overlap 2 none"

  time_left train-1gpu && step "train, 1 GPU: small..xl, fp32 and bf16, forward+backward, batch 4 x 256" &&
  timeout 150 bash -c "$(declare -f tl_run); tl_run $W/runs train 1 none --size small,medium,large,xl \
      --dtype fp32,bf16 --phase forward-backward --warmup 3 --steps 5"

  time_left ddp && step "train, 2 GPUs: the four DP variants (and none), small, full step with AdamW" &&
  timeout 120 bash -c "$(declare -f tl_run); tl_run $W/runs train 2 none --size small --dtype fp32,bf16 \
      --phase step --ddp none,naive,flat,overlap,bucketed --bucket-mb 25 --batch-size 8 --warmup 3 --steps 10"
}

checks() {
  time_left oom && step "out of memory on both ranks: expect one line per rank, no hang" &&
  timeout 60 python3 -m torch.distributed.run --standalone --nproc-per-node 2 -m tracelab.workloads.train \
      --size 2.7B --batch-size 256 --context-length 2048 --ddp flat --out "$W/oom" 2>&1 | grep -E "tracelab|exitcode"
  echo "exit status ${PIPESTATUS[0]}"

  time_left cold && step "train, 1 GPU: no warm-up (the cold start), large fp32" &&
  timeout 80 bash -c "$(declare -f tl_run); tl_run $W/runs train 1 none --size large --dtype fp32 \
      --phase forward,forward-backward --warmup 0 --steps 5"
}

capture_allreduce() {
  captures allreduce --impl nccl,symm-one-shot,triton-one-shot --sizes 4K,1M --iters 5
}

capture_rest() {
  captures train --size tiny --phase step --ddp bucketed --context-length 64 --steps 2 --warmup 1
  captures overlap --models 8B --rows 4096 --iters 2 --warmup 1
}

pack() {
  tar czf "$OUT/runs.tar.gz" -C "$W" runs
  tar czf "$OUT/captures.tar.gz" -C "$W" --exclude='*.nsys-rep' --exclude='*.qdstrm' captures
  ls -la "$OUT"
}

case $PART in
  figures) setup; figures; checks; capture_allreduce; pack ;;
  captures) setup; capture_rest; pack ;;
  all) setup; figures; capture_allreduce; checks; capture_rest; pack ;;  # as far as BUDGET_S allows
  pack) pack ;;  # after a part cut short by its time limit
  *) echo "unknown part $PART"; exit 2 ;;
esac
step "done"
