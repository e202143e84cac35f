#!/bin/bash
# fp32 -> bf16 autocast on one GPU, held out: the train workload at other shapes than the rows
# the per-shape rule was made on (H100 rows: small, batch 4 x 256), the trace before under
# torch.profiler, the after runs without it, the factors file (each product's shape timed fp32
# against bf16, autocast's dispatch per CPU operator) made on this GPU, and the prediction:
#
#     W=$OUT bash benchmarks/gpu_bf16.sh          (from the checkout's root; carry .whl)
#
# About 150 s on one H100. Leaves in $W/bf16: changes.json, factors.json, predictions.json,
# predict.txt, the runs' run.json and results (the traces deleted: small output).
W=${W:-${OUT:-/tmp/out}}
mkdir -p "$W"
. benchmarks/device_prelude.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 400 python3 "$REPO/benchmarks/changes.py" measure --gpu --out "$W/bf16" --repeats 2 --only bf16 \
    --base-args "--batch-size 2 --context-length 384"
python3 "$REPO/benchmarks/changes.py" predict "$W/bf16" | tee "$W/bf16/predict.txt"
python3 - "$W/bf16/bf16/factors.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("factors:", d["machine"], "default", round(d["default"], 3), "shapes", len(d["shapes"]),
      "products", d["products_timed"], "of", d["products_in_trace"], "dispatch ns/op", d["dispatch_ns_per_op"],
      "quartiles", (d.get("dispatch") or {}).get("quartiles_ns_per_op"))
PY
find "$W/bf16" -name '*.trace.json*' -delete
find "$W/bf16" -type d -name logs -prune -exec rm -rf {} +
