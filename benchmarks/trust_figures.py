"""The figures benchmarks/gpu_trust.sh prints for issue 28's must-show, from a run folder:

    python benchmarks/trust_figures.py tokens RUN_DIR             the run's own tokens/s and ms per token
    python benchmarks/trust_figures.py steps STEPS_JSON RUN_DIR   tracelab steps' per-token times beside them
    python benchmarks/trust_figures.py decode ROOFLINE_JSON RUN_DIR

`decode` takes `tracelab roofline RUN_DIR --by scope --top 0 --format json` and prints the share
of GPU time whose work is known and decode_one_token's bytes per token against the bytes of
weights a decode step reads (the run's weight_bytes, gpt-fast's figure: every parameter but the
embedding table). decode_one_token runs once per new token after the first, per sample.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def _results(run: Path) -> dict:
    return json.loads((run / "rank0.results.json").read_text())


def tokens(run: Path) -> str:
    r = _results(run)
    return (f"run's own: {r['tokens_per_s']:.1f} tokens/s = {1e3 / r['tokens_per_s']:.3f} ms per token "
            f"({r['new_tokens']} new tokens per sample, samples {[round(s, 4) for s in r['sample_s']]} s)")


def steps(steps_json: Path, run: Path) -> str:
    """`tracelab steps RUN_DIR --format json`'s step times (first to last GPU activity of each
    `token N` step) against the run's own time per token (s per sample / new tokens, the prefill
    included, so a few % above a decode step)."""
    rows = json.loads(steps_json.read_text())["steps"]
    r = _results(run)
    per_token_ms = 1e3 / r["tokens_per_s"]
    spans = sorted(x["span_ns"] / 1e6 for x in rows if x["span_ns"] is not None)
    if not spans:
        return "no steps"
    median = spans[len(spans) // 2]
    return (f"tracelab steps: {len(spans)} steps (expected {(r['new_tokens'] - 1) * len(r['sample_s'])}: tokens 1.."
            f"{r['new_tokens'] - 1} per sample), median {median:.3f} ms, mean {sum(spans) / len(spans):.3f} ms, "
            f"min {spans[0]:.3f}, max {spans[-1]:.3f}; run's own {per_token_ms:.3f} ms per token: median "
            f"{100 * (median / per_token_ms - 1):+.1f}% (must be within 5%)")


def decode(roofline_json: Path, run: Path) -> list[str]:
    roof, r = json.loads(roofline_json.read_text()), _results(run)
    prov = run / "rank0.provenance.json"
    work = json.loads(prov.read_text()).get("work", {}) if prov.is_file() else {}
    out = [f"provenance work: {len(work)} Triton kernels with bytes, "
           f"{sum('flops' in w for w in work.values())} with FLOPs"]
    cov = roof["coverage"][0]
    if not cov["gpu_ns"]:
        return out + ["no GPU time in this run (a CPU run): no roofline"]
    out.append(f"work known for {cov['known_ns'] / 1e6:.3f} of {cov['gpu_ns'] / 1e6:.3f} ms GPU time: "
               f"{100 * cov['known_ns'] / cov['gpu_ns']:.1f}% (must be >= 95%)")
    rows = [x for x in roof["rows"] if x["key"] == "decode_one_token" or x["key"].startswith("decode_one_token/")]
    calls = (r["new_tokens"] - 1) * len(r["sample_s"])
    moved = sum(x["bytes"] or 0 for x in rows)
    dur, known = sum(x["dur_ns"] for x in rows), sum(x["known_ns"] for x in rows)
    if not rows or not calls:
        return out + ["no decode_one_token rows"]
    out.append(f"decode_one_token: {dur / 1e6:.3f} ms GPU time over {calls} calls, work known for "
               f"{100 * known / dur:.1f}% of it; {moved / calls / 1e9:.6g} GB per token against weight_bytes "
               f"{r['weight_bytes'] / 1e9:.6g} GB: {100 * (moved / calls / r['weight_bytes'] - 1):+.1f}% "
               "(must be within 5%)")
    return out


if __name__ == "__main__":
    what, *args = sys.argv[1:]
    if what == "tokens":
        print(tokens(Path(args[0])))
    elif what == "steps":
        print(steps(Path(args[0]), Path(args[1])))
    else:
        print("\n".join(decode(Path(args[0]), Path(args[1]))))
