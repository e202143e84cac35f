#!/usr/bin/env bash
# Issue 5 on one H100 (device kind nvidia-h100-x1), through the real `tracelab run` CLI:
#  1. llama-2-7b shapes, random bf16 weights, batch 1, 200 new tokens, compiled, no profiler
#     (gpt-fast's own figure on an H100: 172.5 tokens/s, 2283 GB/s);
#  2. tiny compiled decode captured under proton, torch and nsys (small files for tests/data);
#  3. while the budget lasts: the same 7b decode under proton and torch, for where the time goes
#     and what each profiler costs.
# PARTS picks and orders them (default "7b tiny profile"); also gemv (benchmarks/gemv_bench.py),
# 7b-triton / 7b-cublas (--matvec), tiny-proton, profile-triton, and
#   tune: 7b with --fuse-mlp --pdl, the plain 7b, a torch profile of the first (its per-kernel
#         breakdown as CSV under $OUT), then --pdl alone while the budget lasts;
#   tune2: 7b with --fuse-mlp and inductor's split reductions off, the same with --pdl, a torch
#         profile of the first (CSV under $OUT), then the first with mix-order reductions off;
#         the chosen kernel configs (*.best_config and their sources) go to $OUT too;
#   tune3: the next candidates (RESULTS.md's list): the best so far (mix-order and split reductions
#         off) with --attention auto, then mix-order off with split reductions on, with and without
#         --attention auto.
#   best: the winner of tune4 again (backend none), then a torch profile of it without --pdl (whose
#         early launches make kernel durations overlap) -> $OUT/profile-by-kernel.csv
#   tune4: the best so far (fused w1/w3, mix-order and split reductions off) with --pdl, then with
#         inductor's combo kernels (independent small kernels launched as one), then with a wider
#         coordinate-descent search of each kernel's launch configuration.
# Carry .whl (msgspec, rich, plotly ... wheels) and .device-lib (libdw/libelf for nsys).
#   bash benchmarks/gpu_decode.sh        # writes $OUT/log.txt, $OUT/decode-runs.tar.gz, $OUT/summary.txt
set -uo pipefail
OUT=${OUT:-/tmp/decode-out}
W=/tmp/dec
START=$(date +%s)
BUDGET_S=${BUDGET_S:-420}
mkdir -p "$OUT" "$W/runs" "$W/caps"
source benchmarks/device_prelude.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv

elapsed() { echo $(( $(date +%s) - START )); }
quiet() { grep -vE "USDT|^\[default[0-9]\]:(Collecting|Generating|Processing|Saving|W[0-9])"; }
run() {  # run LABEL TIMEOUT_S tracelab-run-args...
  local label=$1 limit=$2; shift 2
  echo; echo "=== +$(elapsed)s $label: tracelab run $*"
  timeout "$limit" python3 -m tracelab run "$@" 2>&1 | quiet | tail -45
  echo "=== +$(elapsed)s $label: exit ${PIPESTATUS[0]}"
}

SEVEN_B=(--model llama-2-7b --compile --batch-size 1 --prompt-len 8 --new-tokens 200)
TINY=(--model tiny --compile --prompt-len 4 --new-tokens 6 --samples 1 --warmup 1)
BEST=(--fuse-mlp --inductor triton.mix_order_reduction=False --inductor split_reductions=False)  # + --pdl: the winner
kernel_csv() {  # the newest torch trace's per-kernel table -> $OUT/profile-by-kernel.csv
  local trace
  trace=$(ls -t "$W"/runs/decode-torch-*/rank0.pt.trace.json.gz 2>/dev/null | head -1)
  [ -n "$trace" ] || return 0
  python3 -m tracelab breakdown "$trace" --by kernel --format csv > "$OUT/profile-by-kernel.csv"
  python3 -m tracelab breakdown "$trace" --by op_class --top 10
}
budget_ok() { if (( $(elapsed) > BUDGET_S - ${1:-60} )); then echo "SKIPPED (budget): $2"; return 1; fi; }

for part in ${PARTS:-7b tiny profile}; do
  case $part in
    7b) run "7b-none" 300 decode --ranks 1 --backend none --out "$W/runs" -- "${SEVEN_B[@]}" --samples 5 --warmup 1 ;;
    tiny) for backend in proton torch nsys; do
            run "tiny-$backend" 120 decode --ranks 1 --backend $backend --out "$W/caps" --top 8 -- "${TINY[@]}"
          done ;;
    tune) run "7b-fuse-pdl" 230 decode --ranks 1 --backend none --out "$W/runs" -- "${SEVEN_B[@]}" \
            --fuse-mlp --pdl --samples 5 --warmup 1
          budget_ok 150 "7b-none" && run "7b-none" 230 decode --ranks 1 --backend none --out "$W/runs" -- \
            "${SEVEN_B[@]}" --samples 5 --warmup 1
          budget_ok 70 "7b-fuse-pdl-torch" && run "7b-fuse-pdl-torch" $(( BUDGET_S - $(elapsed) )) decode --ranks 1 \
            --backend torch --out "$W/runs" --top 15 -- "${SEVEN_B[@]}" --fuse-mlp --pdl --samples 2 --warmup 1
          kernel_csv
          budget_ok 150 "7b-pdl" && run "7b-pdl" $(( BUDGET_S - $(elapsed) )) decode --ranks 1 --backend none \
            --out "$W/runs" -- "${SEVEN_B[@]}" --pdl --samples 5 --warmup 1 ;;
    tune2) NOSPLIT=(--fuse-mlp --inductor split_reductions=False)
          run "7b-fuse-nosplit" 230 decode --ranks 1 --backend none --out "$W/runs" -- "${SEVEN_B[@]}" \
            "${NOSPLIT[@]}" --samples 5 --warmup 1
          budget_ok 150 "7b-fuse-nosplit-pdl" && run "7b-fuse-nosplit-pdl" 230 decode --ranks 1 --backend none \
            --out "$W/runs" -- "${SEVEN_B[@]}" "${NOSPLIT[@]}" --pdl --samples 5 --warmup 1
          budget_ok 70 "7b-fuse-nosplit-torch" && run "7b-fuse-nosplit-torch" $(( BUDGET_S - $(elapsed) )) decode \
            --ranks 1 --backend torch --out "$W/runs" --top 20 -- "${SEVEN_B[@]}" "${NOSPLIT[@]}" --samples 2 --warmup 1
          for trace in "$W"/runs/decode-torch-*/rank0.pt.trace.json.gz; do
            [ -f "$trace" ] && python3 -m tracelab breakdown "$trace" --by kernel --format csv > "$OUT/profile-by-kernel.csv"
          done
          ( cd /tmp/torchinductor_$(whoami) 2>/dev/null && find . -name '*.best_config' | while read -r f; do
              echo "$f"; ls "${f%.best_config}".py 2>/dev/null; done | tar czf "$OUT/best-configs.tar.gz" -T - )
          budget_ok 150 "7b-fuse-nosplit-nomix" && TORCHINDUCTOR_MIX_ORDER_REDUCTION=0 run "7b-fuse-nosplit-nomix" \
            $(( BUDGET_S - $(elapsed) )) decode --ranks 1 --backend none --out "$W/runs" -- "${SEVEN_B[@]}" \
            "${NOSPLIT[@]}" --samples 5 --warmup 1 ;;
    tune3) NOMIX=(--fuse-mlp --inductor triton.mix_order_reduction=False)
          for extra in "--attention auto --inductor split_reductions=False" "" "--attention auto"; do
            budget_ok 150 "7b-nomix $extra" && run "7b-nomix $extra" 230 decode --ranks 1 --backend none \
              --out "$W/runs" -- "${SEVEN_B[@]}" "${NOMIX[@]}" $extra --samples 5 --warmup 1
          done ;;
    tune4) for extra in "" "--inductor combo_kernels=True" \
              "--inductor coordinate_descent_check_all_directions=True --inductor coordinate_descent_search_radius=2"; do
            budget_ok 150 "7b-best-pdl $extra" && run "7b-best-pdl $extra" 230 decode --ranks 1 --backend none \
              --out "$W/runs" -- "${SEVEN_B[@]}" "${BEST[@]}" --pdl $extra --samples 5 --warmup 1
          done ;;
    best) run "7b-best-pdl" 230 decode --ranks 1 --backend none --out "$W/runs" -- "${SEVEN_B[@]}" "${BEST[@]}" \
            --pdl --samples 5 --warmup 1
          budget_ok 70 "7b-best-torch" && run "7b-best-torch" $(( BUDGET_S - $(elapsed) )) decode --ranks 1 \
            --backend torch --out "$W/runs" --top 15 -- "${SEVEN_B[@]}" "${BEST[@]}" --samples 2 --warmup 1
          kernel_csv ;;
    tiny-proton) run "tiny-proton" 120 decode --ranks 1 --backend proton --out "$W/caps" --top 8 -- "${TINY[@]}" ;;
    gemv) echo; echo "=== +$(elapsed)s gemv bench"; timeout 150 python3 "$REPO/benchmarks/gemv_bench.py" --model llama-2-7b ;;
    7b-triton|7b-cublas) budget_ok 90 "$part" && run "$part" $(( BUDGET_S - $(elapsed) )) decode --ranks 1 \
            --backend none --out "$W/runs" -- "${SEVEN_B[@]}" --matvec ${part#7b-} --samples 5 --warmup 1 ;;
    profile|profile-triton) for backend in proton $([ $part = profile ] && echo torch); do
          budget_ok 100 "7b-$backend" && run "7b-$backend" $(( BUDGET_S - $(elapsed) )) decode --ranks 1 \
            --backend $backend --out "$W/runs" --top 12 -- "${SEVEN_B[@]}" --samples 2 --warmup 1 \
            $([ $part = profile-triton ] && echo --matvec triton)
        done ;;
  esac
done

python3 - "$W" > "$OUT/summary.txt" <<'PY'
import json, sys, pathlib
for run in sorted(pathlib.Path(sys.argv[1]).glob("*/*/run.json")):
    doc = json.loads(run.read_text())
    for rank, f in doc.get("results", doc.get("figures", {})).items():
        if "s_per_sample" not in f:
            continue
        print(f"{run.parent.name} rank {rank} status={doc.get('status')} s/sample={f.get('s_per_sample'):.4f} "
              f"tokens/s={f.get('tokens_per_s'):.2f} GB/s={f.get('bandwidth_gb_s'):.1f} matvec={f.get('matvec')} "
              f"fuse_mlp={f.get('fuse_mlp')} pdl={f.get('pdl')} inductor={f.get('inductor')} "
              f"samples={f.get('sample_s')}")
    print("  versions", json.dumps(doc.get("versions")), "devices", json.dumps(doc.get("devices")))
PY
cat "$OUT/summary.txt"
tar czf "$OUT/decode-runs.tar.gz" -C "$W" --exclude='*.nsys-rep' --exclude='*.qdstrm' --exclude='report.html' --exclude='runs/decode-torch-*/rank*.pt.trace.json.gz' runs caps
ls -la "$OUT"
