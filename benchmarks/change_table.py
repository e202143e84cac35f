"""changes.py's table: per change, the step before (measured unprofiled), the what-if's prediction
for it and the step after (measured unprofiled), and the error; pure (the whatif call is given).

A run's step is its slowest rank's median (results' rows[0]; a collective ties the ranks' steps).
The prediction is the scenario row's `predicted_unprofiled_ns` (the replay with the profiler's
cost taken out) where whatif gives it, else its `predicted_ns` (the profiled replay), said in the
row's `predicted_from`; `ratio_ms` beside it is the profiled prediction's fraction of the profiled
step applied to the unprofiled step before (a proportional model: right for device work, wrong for
host time the profiler stretched).
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Callable

WhatIfCall = Callable[[Path, str], dict]


def step_ns(run_dir: Path, key: str) -> float | None:
    """The slowest rank's `key` (unprofiled_step_ns, profiled_step_ns) from run.json's results."""
    results = json.loads((run_dir / "run.json").read_text()).get("results") or {}
    values = [rec["rows"][0].get(key) for rec in results.values() if rec.get("rows")]
    values = [v for v in values if v is not None]
    return max(values) if len(values) == len(results) and values else None


def scenario_text(entry: dict, folder: Path | None = None) -> str | None:
    """The change's scenario with its measured factor filled in, or its factors file (in `folder`,
    the measurement's, beside the change's runs)."""
    scenario = entry.get("scenario")
    measured = entry.get("factor") or {}
    if scenario is not None and "{factors_file}" in scenario:
        return None if "file" not in measured or folder is None else \
            scenario.format(factors_file=folder / entry["name"] / measured["file"])
    if scenario is None or "{factor}" not in scenario:
        return scenario
    factor = measured.get("factor")
    return None if factor is None else scenario.format(factor=f"{factor:.4g}")


def scenario_row(doc: dict) -> dict | None:
    """The one scenario's row of a whatif JSON (one input)."""
    doc = doc["inputs"][0] if "inputs" in doc else doc
    rows = [r for r in doc.get("scenarios", []) if r["name"] != "together"]
    return rows[0] if rows else None


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _measured(entry: dict, folder: Path) -> dict:
    """The before and after steps (each side's median over its runs), or why there are none."""
    runs = entry["runs"]
    failed = [f"{r['run_dir']}: {r.get('error')}" for r in runs if r["status"] != "ok"]
    if failed:
        return {"why": "; ".join(failed)}
    ms = {side: [_ms(step_ns(folder / entry["name"] / r["run_dir"], "unprofiled_step_ns")) for r in runs
                 if r["side"] == side] for side in ("before", "after")}
    return {"before_ms": _median(ms["before"]), "after_ms": _median(ms["after"]), "before_runs_ms": ms["before"],
            "after_runs_ms": ms["after"], "before_profiled_ms": _ms(step_ns(folder / entry["name"] / "before",
                                                                             "profiled_step_ns"))}


def _predicted(entry: dict, folder: Path, measured: dict, whatif: WhatIfCall) -> dict:
    scenario = scenario_text(entry, folder)
    if scenario is None:
        return {"why": (entry.get("note") or "no scenario models this change") if entry.get("scenario") is None
                else "its microbenchmark did not run"}
    doc = whatif(folder / entry["name"] / "before", scenario)
    row = None if "error" in doc else scenario_row(doc)
    if row is None or row.get("predicted_ns") is None:
        return {"scenario": scenario, "why": doc.get("error") or "whatif claims no step of the trace before "
                                                                   "(its unchanged replay misses them)"}
    unprofiled = row.get("predicted_unprofiled_ns")
    out = {"scenario": scenario, "predicted_ms": _ms(unprofiled if unprofiled is not None else row["predicted_ns"]),
           "predicted_from": "predicted_unprofiled_ns" if unprofiled is not None else "predicted_ns (profiled)",
           "replay_step_ms": _ms(row["step_ns"]), "replay_predicted_ms": _ms(row["predicted_ns"]),
           "steps_claimed": row.get("steps")}
    if measured.get("before_ms") is not None and row["step_ns"]:
        out["ratio_ms"] = measured["before_ms"] * row["predicted_ns"] / row["step_ns"]
    return out


def _error_pct(predicted: float | None, after: float | None) -> float | None:
    return None if predicted is None or not after else 100 * (predicted - after) / after


def predict_rows(doc: dict, folder: Path, whatif: WhatIfCall) -> list[dict]:
    """One row per change of changes.json (`doc`): measured, predicted, errors, or why not."""
    rows = []
    for entry in doc["changes"]:
        row = {"change": entry["name"], "what": entry.get("what"), "ranks": entry.get("ranks"), "note": entry.get("note"),
               **{k: entry.get(k) for k in ("measured_at", "load_avg_1m", "repeats")}}
        if entry.get("skipped"):
            rows.append({**row, "why": f"skipped: {entry['skipped']}"})
            continue
        measured = _measured(entry, folder)
        predicted = _predicted(entry, folder, measured, whatif) if "why" not in measured else {}
        row.update(measured, **predicted, factor=(entry.get("factor") or {}).get("factor"))
        row["error_pct"] = _error_pct(row.get("predicted_ms"), row.get("after_ms"))
        row["ratio_error_pct"] = _error_pct(row.get("ratio_ms"), row.get("after_ms"))
        rows.append(row)
    return rows


def summary(rows: list[dict]) -> dict:
    """Median and worst absolute error over the rows that have one, per prediction."""
    out = {}
    for key in ("error_pct", "ratio_error_pct"):
        errors = [abs(r[key]) for r in rows if r.get(key) is not None]
        out[key] = {"predicted": len(errors), "median_abs": statistics.median(errors) if errors else None,
                    "worst_abs": max(errors) if errors else None}
    return out


def _cell(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_table(rows: list[dict], totals: dict) -> str:
    """A markdown table, then the summary and each row's reason where it has no prediction."""
    lines = ["| change | scenario | before ms | predicted ms | after ms | error % | ratio ms | ratio error % |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        scenario = (r.get("scenario") or "-").replace("|", "\\|")  # a regex's alternatives, not cells
        lines.append(f"| {r['change']} | `{scenario}` | {_cell(r.get('before_ms'))} | "
                     f"{_cell(r.get('predicted_ms'))} | {_cell(r.get('after_ms'))} | {_cell(r.get('error_pct'), 1)} | "
                     f"{_cell(r.get('ratio_ms'))} | {_cell(r.get('ratio_error_pct'), 1)} |")
    for key, label in (("error_pct", "predicted"), ("ratio_error_pct", "ratio")):
        t = totals[key]
        lines.append(f"\n{label}: {t['predicted']} changes predicted; |error| median {_cell(t['median_abs'], 1)}%, "
                     f"worst {_cell(t['worst_abs'], 1)}%")
    sources = sorted({r["predicted_from"] for r in rows if r.get("predicted_from")})
    lines.append(f"predicted from: {', '.join(sources) or '-'}")
    lines += [f"{r['change']}: {r['why'] if r.get('why') else r['note']}" for r in rows if r.get("why") or r.get("note")]
    return "\n".join(lines)
