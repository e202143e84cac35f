"""Issue 28's must-show: a decode run folder of several samples (`tracelab run decode -- --samples 2`)
has one step per token per sample, and its per-token step time agrees with the run's own tokens/s.

    python benchmarks/per_token.py RUN_DIR [RUN_DIR ...]

Per rank: the steps `tracelab steps` finds, their mean and median span (first to last GPU activity
of the step; CPU operators on a CPU run) and period (a step's first start to the next token's),
against 1 / tokens_per_s of run.json, and the ratios (within 5% is the bar). tokens/s is a mean
over each sample's prefill and its tokens, host time between them included: the mean period is
its like (the span leaves the host's time between tokens out; the median drops the slow tokens)."""
from __future__ import annotations

import json
import statistics as st
import subprocess
import sys
from pathlib import Path


def per_token(run_dir: Path) -> list[str]:
    steps = json.loads(subprocess.run([sys.executable, "-m", "tracelab", "steps", str(run_dir), "--format", "json"],
                                      capture_output=True, text=True, check=True).stdout)["steps"]
    run = json.loads((run_dir / "run.json").read_text())
    out = []
    for rank, res in sorted(run["results"].items()):
        spans = [r["span_ns"] / 1e6 for r in steps if r["rank"] == int(rank)]
        periods = [r["period_ns"] / 1e6 for r in steps if r["rank"] == int(rank) and r["period_ns"] is not None]
        want_ms = 1e3 / res["tokens_per_s"]
        samples, tokens = run["config"].get("samples"), run["config"].get("new_tokens")
        out.append(f"{run_dir.name} rank {rank}: {len(spans)} steps (samples {samples} x new tokens {tokens}: "
                   f"{samples * (tokens - 1) if samples and tokens else '?'} decode steps expected); step time mean "
                   f"{st.mean(spans):.3f} ms, median {st.median(spans):.3f} ms; run.json {res['tokens_per_s']:.2f} "
                   f"tokens/s = {want_ms:.3f} ms/token; mean/that {st.mean(spans) / want_ms:.3f}, "
                   f"median/that {st.median(spans) / want_ms:.3f}; period ({len(periods)} steps) mean {st.mean(periods):.3f} ms, "
                   f"median {st.median(periods):.3f} ms; mean/that {st.mean(periods) / want_ms:.3f}, "
                   f"median/that {st.median(periods) / want_ms:.3f}")
    return out


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print("\n".join(per_token(Path(arg))))
