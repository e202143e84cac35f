#!/usr/bin/env bash
# Issue 30's headline figures at the final tree, in one run on this (CPU) machine, one after the
# other: the per-stage table before (BASE, a worktree of the session's start) and after at 1 and 64
# ranks (bench_pair, alternating); the report of 1,024 ranks cold (a fresh digest and Parquet cache,
# written as a user's first run writes it) and again warm; HTA 0.5.0 beside tracelab at 64 ranks;
# one rank's peak memory cold and from the cache; the 375 MB tiled trace against HTA; the default
# test suite with PYTHONDONTWRITEBYTECODE=1. Every line goes to $LOG.
#   BASE=/tmp/base30 HTA_PY=/work/bench-venv/bin/python bash benchmarks/issue30_final.sh
set -uo pipefail
cd "$(dirname "$0")/.."
[[ -n ${VIRTUAL_ENV:-} ]] || source .venv/bin/activate  # the checkout's venv (README)
LOG=${LOG:-/tmp/issue30_final.log}
BASE=${BASE:?a worktree of the before tree}
HTA_PY=${HTA_PY:?HTA 0.5.0 venv python}
SRC=${SRC:-../shared/traces/hta/trace_diff/control/control.json.gz}
R64=${R64:-/tmp/ranks64}; R1024=${R1024:-/tmp/ranks1024}
exec > >(tee "$LOG") 2>&1
stamp() { echo; echo "=== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*"; }
stamp "git $(git rev-parse --short HEAD), base $(git -C "$BASE" rev-parse --short HEAD)"
stamp "one rank, warm process, like for like (warm_parse.py), before and after alternating"
for i in 1 2 3; do python benchmarks/warm_parse.py "$SRC" --repo "$BASE"; python benchmarks/warm_parse.py "$SRC"; done
python benchmarks/warm_parse.py "$SRC" --heap
stamp "per stage, 1 rank, before/after"; python benchmarks/bench_pair.py "$SRC" --base "$BASE" --runs 3
stamp "per stage, 64 ranks, before/after"; python benchmarks/bench_pair.py "$SRC" --base "$BASE" --ranks 64 --runs 1
[[ -d $R64 ]] || python benchmarks/make_ranks.py "$R64" --ranks 64 --src "$SRC"
[[ -d $R1024 ]] || python benchmarks/make_ranks.py "$R1024" --ranks 1024 --src "$SRC"
CACHE=$(mktemp -d)
stamp "report of 1,024 ranks, cold (fresh caches, written)"
TRACELAB_CACHE_DIR=$CACHE python benchmarks/measure_tree.py -- python -m tracelab report "$R1024" -o /tmp/r1024.html --force
stamp "report of 1,024 ranks, warm (the same caches)"
TRACELAB_CACHE_DIR=$CACHE python benchmarks/measure_tree.py -- python -m tracelab report "$R1024" -o /tmp/r1024.html --force
rm -rf "$CACHE"
stamp "tracelab report against HTA 0.5.0, 64 ranks, cache off"
python benchmarks/bench_hta_ranks.py --hta-python "$HTA_PY" "$R64"
CACHE=$(mktemp -d)
stamp "one rank: tracelab.load cold (cache off), then writing the cache, then from it"
LOAD="import tracelab; tracelab.load('$SRC')"
TRACELAB_CACHE=0 python benchmarks/measure_tree.py -- python -c "$LOAD"
for i in 1 2; do TRACELAB_CACHE_DIR=$CACHE python benchmarks/measure_tree.py -- python -c "$LOAD"; done
rm -rf "$CACHE"
stamp "375 MB tiled trace against HTA"; python benchmarks/bench_chrome.py --src "$SRC" --copies 12 --repeat 2 --hta-repeat 1 --hta-python "$HTA_PY"
stamp "default test suite, PYTHONDONTWRITEBYTECODE=1"
PYTHONDONTWRITEBYTECODE=1 /usr/bin/time -f "suite: %e s wall, %U s user, %S s system" python -m pytest -q -p no:cacheprovider 2>&1 | tail -4
stamp done
