#!/usr/bin/env bash
# Issue 24's must-show on one H100/H200 (device kind nvidia-h100-x1): tiny decode --compile
# (reduce-overhead: CUDA graphs) under torch, nsys and proton, each run writing Inductor's
# kernel-to-module map (rank0.provenance.json) at compile time; then per run
# `breakdown --by scope` and `--by module_type`, and the per-layer kernel counts with their sum
# against the unattributed total. Also: the same decode with --no-provenance (what the map
# costs at compile time and in tokens/s), and graph_scopes.py again under torch and nsys
# (replays attributed to their capture scopes, on this checkout).
# Carry .whl and .device-lib.   bash benchmarks/gpu_round2_graphs.sh   ($OUT/runs.tar.gz, log on stdout)
set -uo pipefail
OUT=${OUT:-/tmp/r2-out}
W=/tmp/r2
START=$(date +%s)
BUDGET_S=${BUDGET_S:-560}
mkdir -p "$OUT" "$W/runs" "$W/cap"
source benchmarks/device_prelude.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
source "$REPO/benchmarks/gpu_common.sh"  # elapsed, budget, nsys_cap
DEC=(--model tiny --compile --prompt-len 8 --new-tokens 6 --samples 1 --warmup 1)
layers() {  # layers RUN_DIR: kernels and ms per layer (module layers.N...), their sum, the total
  python3 - "$1" <<'EOF'
import sys, tracelab
p = tracelab.load_many(sys.argv[1])[0]
e = p.events
layer = e["module"].str.extract(r"^layers\.(\d+)")[0]
print("provenance:", p.meta.get("provenance"), "| notes:", p.meta.get("notes"))
table = e.assign(layer=layer).dropna(subset=["layer"]).groupby("layer").agg(kernels=("count", "sum"), ms=("dur_ns", "sum"))
table["ms"] /= 1e6
print(table.to_string())
attributed = e["module"] != ""
print(f"attributed {int(e.loc[attributed, 'count'].sum())} kernels {e.loc[attributed, 'dur_ns'].sum() / 1e6:.3f} ms"
      f" + unattributed {int(e.loc[~attributed, 'count'].sum())} kernels {e.loc[~attributed, 'dur_ns'].sum() / 1e6:.3f} ms"
      f" = total {int(e['count'].sum())} kernels {e['dur_ns'].sum() / 1e6:.3f} ms")
EOF
}
run() {  # run LABEL TIMEOUT_S tracelab-run-args...: the run, then breakdowns of the newest run folder
  local label=$1 limit=$2; shift 2
  budget $((limit / 2)) "$label" || return 0
  echo; echo "=== +$(elapsed)s $label: tracelab run $*"
  timeout "$limit" python3 -m tracelab run "$@" 2>&1 | grep -E "rank 0:|warm-up|error|note" | tail -6
  local dir; dir=$(ls -dt "$W"/runs/*/ | head -1)
  echo "=== +$(elapsed)s $label: $dir"; ls "$dir"
  python3 -m tracelab breakdown "$dir" --by scope --top 40 2>&1 | tail -45
  python3 -m tracelab breakdown "$dir" --by module_type --top 25 2>&1 | tail -30
  layers "$dir"
}
# issue 21: idle with known causes (syncs, then host work), under torch and nsys, then tracelab idle
timeout 90 python3 "$REPO/benchmarks/idle_causes.py" --backend torch --out "$W/cap/idle-sync-torch" 2>&1 | tail -1
mkdir -p "$W/cap/idle-sync-nsys"; nsys_cap "$W/cap/idle-sync-nsys" "$REPO/benchmarks/idle_causes.py" --backend nsys --out "$W/cap/idle-sync-nsys"
for d in "$W/cap/idle-sync-torch" "$W/cap/idle-sync-nsys"; do
  echo "=== tracelab idle $d"; timeout 60 python3 -m tracelab idle "$d" 2>&1 | cut -c1-180 | head -40
done
for b in torch nsys proton; do
  run "decode-compile-$b" 170 decode --ranks 1 --backend $b --out "$W/runs" --top 5 -- "${DEC[@]}"
done
run "decode-compile-torch-noprov" 150 decode --ranks 1 --backend torch --out "$W/runs" --top 5 -- "${DEC[@]}" --no-provenance
if budget 90 graph_scopes; then
  for c in inside outside; do
    timeout 120 python3 "$REPO/benchmarks/graph_scopes.py" --backend torch --capture $c --out "$W/cap/graph-$c-torch" 2>&1 | tail -1
    mkdir -p "$W/cap/graph-$c-nsys"; nsys_cap "$W/cap/graph-$c-nsys" "$REPO/benchmarks/graph_scopes.py" --backend nsys --capture $c --out "$W/cap/graph-$c-nsys"
    for d in "$W/cap/graph-$c-torch" "$W/cap/graph-$c-nsys"; do
      echo "=== $d"; python3 -m tracelab breakdown "$d" --by scope --top 0 2>&1 | tail -20
    done
  done
fi
(cd "$W/runs" && find . -name '*.nsys-rep' -delete; rm -f */report.html; tar czf "$OUT/runs.tar.gz" .)
(cd "$W/cap" && tar czf "$OUT/caps.tar.gz" .)
echo "=== +$(elapsed)s done"; ls -la "$OUT"
