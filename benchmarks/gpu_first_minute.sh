#!/usr/bin/env bash
# The README's first command on one GPU, as a user runs it (installed non-editable), timed end to
# end with its processes' peak memory, then the same decode under torch.profiler with every question asked of its run folder, and
# (optionally) more real changes after it: CHANGES="compile" passes on to gpu_changes.sh.
# Carry .whl and .device-lib.   [FIRST=readme] [CHANGES=...] bash benchmarks/gpu_first_minute.sh [gpu_changes.sh options]
# -> $OUT/first-runs.tar.gz (run folders), $OUT/first-log.txt
set -uo pipefail
OUT=${OUT:-/tmp/first-out}
W=/tmp/first
mkdir -p "$OUT" "$W/runs"
exec > >(tee "$OUT/first-log.txt") 2>&1
rm -rf /tmp/site "$W/runs"/*  # a warm machine keeps an older install and older runs
source benchmarks/device_prelude.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
first() {  # first NAME tracelab-run-args...: wall time of one `tracelab run`, as the README gives it, and
  # (first_command.py) its output lines by second and the peak memory of all its processes together
  local name=$1; shift
  echo; echo "=== $(date -u +%H:%M:%S) $name: tracelab run $*"
  local t0=$SECONDS
  timeout 240 python3 "$REPO/benchmarks/first_command.py" --cwd "$W" -- python3 -m tracelab run "$@" --out "$W/runs/$name" 2>&1 \
    | grep -vE "\[default[0-9]\]" | tail -32
  echo "=== $name: wall $((SECONDS - t0)) s"
}
# FIRST: which of the two first runs (default both): the README's as written, and under torch.profiler
for name in ${FIRST:-readme readme-torch}; do
  case $name in
    readme) first readme decode --ranks 2 ;;
    readme-torch) first readme-torch decode --ranks 2 --backend torch ;;
  esac
done
dir=$(ls -d "$W/runs/readme-torch"/*/ 2>/dev/null | head -1)
if [[ -n "$dir" ]]; then
  for q in "steps" "idle --top 3" "whatif" "roofline --top 5"; do
    echo "--- tracelab $q"; timeout 60 python3 -m tracelab $q "$dir" 2>&1 | cut -c1-200 | tail -24
  done
fi
(cd "$W/runs" && find . -type f -size +15M -delete && tar czf "$OUT/first-runs.tar.gz" .)
if [[ -n "${CHANGES:-}" ]]; then
  cd "$REPO" && OUT="$OUT" bash benchmarks/gpu_changes.sh "$@"
fi
