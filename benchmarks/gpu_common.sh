# Sourced by the GPU scripts (gpu_final.sh) after device_prelude.sh,
# with START (date +%s) and BUDGET_S set: the time spent, the budget check, and nsys_cap.
elapsed() { echo $(( $(date +%s) - START )); }
budget() { if (( $(elapsed) > BUDGET_S - $1 )); then echo "SKIPPED (budget): $2"; return 1; fi; }
NSYS=${TRACELAB_NSYS:-nsys}
nsys_cap() {  # nsys_cap DIR python-args...: profile the cudaProfilerApi range, export SQLite
  local dir=$1; shift
  timeout 200 "$NSYS" profile --trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none --capture-range=cudaProfilerApi \
    --capture-range-end=stop --cuda-graph-trace=node -o "$dir/rank0" python3 "$@" > "$dir/nsys.log" 2>&1
  "$NSYS" export --type sqlite -o "$dir/rank0.sqlite" "$dir/rank0.nsys-rep" >> "$dir/nsys.log" 2>&1
  rm -f "$dir/rank0.nsys-rep"; tail -3 "$dir/nsys.log"
}
