#!/usr/bin/env bash
# Issue 27's GPU must-show, on one 2-GPU H100 machine (device kind nvidia-h100-x2), in about 240 s:
#  (1) a host-bound training step (train, tiny, batch 1, full step with AdamW(capturable=True)) traced
#      eagerly under torch, and the same step timed without a profiler eager, as one whole-step CUDA
#      graph and under torch.compile(mode="reduce-overhead") (benchmarks/whatif_graph_step.py);
#  (2) a 2-rank DDP job (tiny, host-bound) whose rank 1 does ~10.7 ms of extra GPU work (`extra_work`,
#      --late rank1 --late-work 4) every other step (--late-every 2: the steps between are the same job
#      without it, under the same conditions), and the same job without it at all (ddp-none);
#  (3) the same job whose rank 1 synchronises, then its host sleeps 10 ms (`host_stall`, --host-stall-ms
#      1:10), every other step;
# then `tracelab whatif` of each (JSON kept, a few lines printed) and, budget left, the predictions
# against the steps without the cause (benchmarks/whatif_pairs.py). Carry .whl and .device-lib.
#   bash benchmarks/gpu_whatif.sh   # $OUT/log.txt, $OUT/graph_step.jsonl, $OUT/whatif.tar.gz
set -uo pipefail
OUT=${OUT:-/tmp/whatif-out}
W=/tmp/whatif
START=$(date +%s)
BUDGET_S=${BUDGET_S:-230}
mkdir -p "$OUT" "$W/runs" "$W/json"
exec > >(tee "$OUT/log.txt") 2>&1
[[ -n "${SKIP_PRELUDE:-}" ]] && { REPO=$PWD; cd "$W"; } || source benchmarks/device_prelude.sh  # SKIP_PRELUDE: a CPU test here
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null
source "$REPO/benchmarks/gpu_common.sh"  # elapsed, budget
CAP=${CAP---capturable}  # CAP= (empty) for a CPU test: AdamW(capturable=True) needs a GPU
STEP=(--size tiny --batch-size 1 --phase step $CAP)
DDP=(--size tiny --phase step --context-length 64 --steps 12 --warmup 2 --ddp bucketed)  # as tests/data/ddp-2gpu-*
trace() {  # trace NAME RANKS LIMIT_S train-args...: a torch-traced run into $W/runs/NAME
  local name=$1 ranks=$2 limit=$3; shift 3
  budget "$limit" "$name" || return 0
  echo; echo "=== +$(elapsed)s $name: tracelab run train --ranks $ranks --backend torch -- $*"
  timeout "$limit" python3 -m tracelab run train --ranks "$ranks" --backend torch --out "$W/runs/$name" --top 3 \
    -- "$@" 2>&1 | grep -vE "^\[default[0-9]\]:$" | tail -6
}
whatif() {  # whatif NAME SCENARIO...: the JSON kept, and its figures in a few lines
  local dir; dir=$(ls -d "$W/runs/$1"/*/ 2>/dev/null | head -1); local name=$1; shift
  [[ -n "$dir" ]] || { echo "no run folder for $name"; return 0; }
  local args=(); for s in "$@"; do args+=(--scenario "$s"); done
  echo "=== +$(elapsed)s tracelab whatif $dir ${args[*]}"
  timeout 60 python3 -m tracelab whatif "$dir" "${args[@]}" --format json > "$W/json/$name.json" || return 0
  python3 - "$W/json/$name.json" <<'PY'
import json, statistics as st, sys
d = json.load(open(sys.argv[1]))
steps = d["steps"][1:] or d["steps"]  # the first step holds warm-up
print("steps (ms):", [round(s["step_ns"] / 1e6, 3) for s in d["steps"]])
print("path, mean of steps 1.. (ms):", {k: round(st.mean(s["path"][k] for s in steps) / 1e6, 3) for k in steps[0]["path"]},
      "ranks:", sorted({r for s in steps for r in s["path_ranks"]}))
for s in d["scenarios"]:
    print(f"  {s['name']} {s['args']}: measured {s['step_ns'] / 1e6:.3f} predicted {s['predicted_ns'] / 1e6:.3f} "
          f"saving {s['saving_ns'] / 1e6:.3f} ms per step over {s['steps']} steps" if s["steps"] else f"  {s['name']}: no step")
print("notes:", d["notes"])
PY
}
trace step-eager 1 60 "${STEP[@]}" --steps 8 --warmup 3
if budget 70 graph-step; then
  echo; echo "=== +$(elapsed)s whatif_graph_step.py ${STEP[*]:0:4}"
  timeout 90 python3 "$REPO/benchmarks/whatif_graph_step.py" --size tiny --batch-size 1 --steps 30 --warmup 5 \
    2>/dev/null | tee "$OUT/graph_step.jsonl" | cut -c1-200
fi
trace ddp-late 2 50 "${DDP[@]}" --late rank1 --late-work 4 --late-every 2
trace ddp-none 2 50 "${DDP[@]}" --late none
trace ddp-stall 2 50 "${DDP[@]}" --host-stall-ms 1:10 --late-every 2
whatif step-eager no-host-gaps
whatif ddp-late "remove:extra_work@1" balance no-host-gaps
whatif ddp-none
whatif ddp-stall "remove:host_stall@1" balance
run_of() { ls -d "$W/runs/$1"/*/ 2>/dev/null | head -1; }
if budget 25 pairs && [[ -n "$(run_of ddp-late)" && -n "$(run_of ddp-stall)" ]]; then
  timeout 40 python3 "$REPO/benchmarks/whatif_pairs.py" --interleaved extra_work "remove:extra_work@1" "$(run_of ddp-late)"
  timeout 40 python3 "$REPO/benchmarks/whatif_pairs.py" --interleaved host_stall "remove:host_stall@1" "$(run_of ddp-stall)"
fi
(cd "$W" && find runs -name '*.nsys-rep' -delete; rm -f runs/*/*/report.html; tar czf "$OUT/whatif.tar.gz" runs json)
echo "=== +$(elapsed)s done"; ls -la "$OUT"
