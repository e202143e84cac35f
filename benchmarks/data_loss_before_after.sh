#!/bin/bash
# The data-loss cases of issue 29, each run with two tracelab installs: BEFORE (a venv whose
# editable tracelab is the code before the fix) and AFTER (this checkout's). Usage:
#   BEFORE=/path/to/old/.venv bash benchmarks/data_loss_before_after.sh [OUT]
REPO=$(cd "$(dirname "$0")/.." && pwd)
D=$REPO/tests/data
OUT=${1:-/tmp/tracelab-dataloss}
for who in before after; do
  if [ $who = before ]; then V=${BEFORE:?set BEFORE to the old venv}; else V=${AFTER:-$REPO/.venv}; fi
  T=$V/bin/tracelab; P=$V/bin/python
  W=$OUT/$who; rm -rf $W; mkdir -p $W; cd $W
  export TRACELAB_CACHE=0
  echo "=== $who"
  echo "--- 1. export parquet run/ -o run/ --force"
  cp -r $D/decode-2gpu-torch run; ls run | tr '\n' ' '; echo
  $T export parquet run/ -o run/ --force 2>&1 | tail -1; echo "exit ${PIPESTATUS[0]}; run/ now: $(ls run | tr '\n' ' ')"
  echo "--- 2. report t.json.gz -o t.json.gz --force"
  cp $D/decode-1gpu-torch/rank0.pt.trace.json.gz t.json.gz; h=$(sha256sum t.json.gz | cut -c1-12)
  $T report t.json.gz -o t.json.gz --force 2>&1 | tail -1; echo "exit ${PIPESTATUS[0]}; sha256 $h -> $(sha256sum t.json.gz | cut -c1-12), starts: $(head -c 15 t.json.gz | tr -d '\0' | od -c | head -1 | cut -c9-40)"
  echo "--- 3. 2-rank run whose cache entry meta.json is []"
  rm -rf c cache; cp -r $D/decode-2gpu-torch c
  TRACELAB_CACHE=1 TRACELAB_CACHE_DIR=$W/cache $P - <<PY
import sys, json, os
from pathlib import Path
from tracelab import cache
from tracelab.load import load_many
cache.MIN_BYTES = 0; cache.RACY_S = -1.0
print("first read ranks:", [p.rank for p in load_many("c", workers=1)])
entry = sorted(p for p in Path("cache").iterdir() if not p.name.startswith("."))[0]
(entry / "meta.json").write_text("[]")
print("after meta.json [] ranks:", [p.rank for p in load_many("c", workers=1)])
PY
  echo "--- 4. dangling symlink rank2 in a run folder"
  rm -rf l; cp -r $D/decode-2gpu-torch l; ln -s gone.json l/rank2.pt.trace.json
  $T breakdown l --format csv 2>&1 | cut -d, -f1 | sort -u | tr '\n' ' '; echo "exit ${PIPESTATUS[0]}"
  echo "--- 5. two-member gzip (zcat reads it)"
  $P -c "import sys; sys.path.insert(0, '$REPO/benchmarks'); import mem_kernels as m; from pathlib import Path; m.write_trace(Path('plain.json'), 100000)"; n=$(stat -c %s plain.json)
  (head -c $((n/2)) plain.json | gzip; tail -c +$((n/2+1)) plain.json | gzip) > two.json.gz
  $T breakdown two.json.gz --format csv 2>&1 | tail -1 | cut -c1-150; echo "exit ${PIPESTATUS[0]}"
  echo "--- 6. 160 gzip members of 5 MiB each ([, spaces, ]), 0.8 MB (ulimit -v 4 GB)"
  $P -c "import gzip; s=gzip.compress(b' '*(5*1024**2),9); open('bomb.hatchet','wb').write(gzip.compress(b'[')+s*160+gzip.compress(b']'))"; ls -la bomb.hatchet | awk '{print $5" bytes"}'
  (ulimit -v 4000000; /usr/bin/time -f "%e s, peak %M KB" $T breakdown bomb.hatchet 2>&1 | tail -2)
  echo "--- 7. SIGTERM while export perfetto streams"
  rm -f m.json .m.json.*
  $P - <<PY &
import sys, time
from tracelab.reports import perfetto
from tracelab import cli
orig = perfetto.write_json
def slow(put, *a, **k):
    put(b'{"traceEvents": [')
    time.sleep(30)
    return orig(put, *a, **k)
perfetto.write_json = slow
sys.argv = ["tracelab", "export", "perfetto", "$D/decode-1gpu-torch/rank0.pt.trace.json.gz", "-o", "m.json"]
cli.main()
PY
  pid=$!; for i in $(seq 100); do ls -a | grep -q '^\.m\.json\..*\.tmp$' && break; sleep 0.2; done; kill -TERM $pid; wait $pid; echo "exit $?; left: $(ls -a | grep m.json | tr '\n' ' ')"
done
