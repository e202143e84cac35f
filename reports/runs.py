"""The run table: each run folder's run.json side by side (one column per run), with the
workload's own results as rows and what the profiler cost against a run of the same
config under backend `none`. Pure: run.json dicts in, a DataFrame of display values out.

    table = run_table([("decode-torch-20261121-235636", run_json), ...])
"""
from __future__ import annotations

from collections import Counter
from statistics import mean
from typing import Callable

import pandas as pd

from ..results import of_run

RankResults = list[dict]  # one dict per rank: run.json "results" values (tracelab/results.py)


def _per_rank(figs: RankResults, key: str) -> list[float]:
    return [float(f[key]) for f in figs if isinstance(f.get(key), (int, float)) and not isinstance(f.get(key), bool)]


def _rows(figs: RankResults) -> list[dict]:
    """The workload's result rows of the first rank that has them."""
    return next((f["rows"] for f in figs if isinstance(f.get("rows"), list) and f["rows"]), [])


def _row_value(figs: RankResults, key: str, pick: Callable = max) -> float | None:
    values = [float(r[key]) for r in _rows(figs) if isinstance(r.get(key), (int, float))]
    return pick(values) if values else None


def _train(key: str, scale: float = 1.0) -> Callable[[RankResults], float | None]:
    """A train result of a run of one configuration (None when it swept several)."""
    def value(figs: RankResults) -> float | None:
        rows = _rows(figs)
        if len(rows) != 1 or not isinstance(rows[0].get(key), (int, float)):
            return None
        return float(rows[0][key]) * scale
    return value


def _mean_of(key: str) -> Callable[[RankResults], float | None]:
    def value(figs: RankResults) -> float | None:
        values = _per_rank(figs, key)
        return mean(values) if values else None
    return value


# workload -> (row label, value from the ranks' results, higher is better); the first row is
# the one a profiler's cost is measured on
RESULTS: dict[str, list[tuple[str, Callable[[RankResults], float | None], bool]]] = {
    "decode": [("tokens/s (mean of ranks)", _mean_of("tokens_per_s"), True),
               ("achieved GB/s (mean of ranks)", _mean_of("bandwidth_gb_s"), True),
               ("s per sample (mean of ranks)", _mean_of("s_per_sample"), False)],
    "train": [("step time (ms)", _train("step_ms_mean"), False), ("tokens/s", _train("tokens_per_s"), True),
              ("MFU %", _train("mfu", 100.0), True), ("peak memory (GB)", _train("peak_mem_bytes", 1e-9), False)],
    "allreduce": [("peak bus bandwidth (GB/s)", lambda f: _row_value(f, "busbw_gb_s"), True),
                  ("smallest latency (us)", lambda f: _row_value(f, "latency_us", min), False)],
    "overlap": [("best fused speedup", lambda f: _row_value(f, "speedup"), True)],
}


def results_of(info: dict) -> RankResults:
    """The ranks' results of a run.json (old run folders' too), in rank order."""
    figs = info.get("results", info.get("figures")) or {}
    if not isinstance(figs, dict):
        return []
    figs = of_run({"results": {k: v for k, v in figs.items() if isinstance(v, dict)}})
    return [v for _, v in sorted(figs.items(), key=lambda kv: str(kv[0]).zfill(6)) if isinstance(v, dict)]


def devices(info: dict) -> str:
    """'2 x NVIDIA H200' from run.json devices."""
    names = Counter(str(d.get("name", "?")) for d in info.get("devices") or [] if isinstance(d, dict))
    return ", ".join(f"{n} x {name}" for name, n in names.items()) or "-"


def same_config(a: dict, b: dict) -> bool:
    """Same workload, ranks and nodes, and every config key both runs record equal
    (backend aside): a key only one records (a newer tracelab's option) does not differ."""
    if any(a.get(k) != b.get(k) for k in ("workload", "ranks_per_node", "nnodes")):
        return False
    ca, cb = a.get("config") or {}, b.get("config") or {}
    return all(ca[k] == cb[k] for k in ca.keys() & cb.keys() if k != "backend")


def baseline(info: dict, runs: list[tuple[str, dict]]) -> tuple[str, dict] | None:
    """The run of the same workload and config (backend aside) under backend `none`."""
    if info.get("backend") == "none":
        return None
    return next(((n, r) for n, r in runs if r.get("backend") == "none" and same_config(r, info)), None)


def profiler_cost(info: dict, runs: list[tuple[str, dict]]) -> str:
    """'-35.1% tokens/s (168 under none)' or why it cannot be said."""
    if info.get("backend") == "none":
        return "(no profiler)"
    if baseline(info, runs) is None or not RESULTS.get(str(info.get("workload"))):
        return "- (no run of this config under backend none)"
    if (cost := cost_of(info, runs)) is None:
        return "-"
    return f"{100 * cost['change']:+.1f}% {cost['measure']} ({cost['theirs']:,.4g} under none, {cost['baseline']})"


def cost_of(info: dict, runs: list[tuple[str, dict]]) -> dict | None:
    """The profiler's cost as numbers: change (mine / theirs - 1 of the workload's first
    result), measure, mine, theirs, baseline (the run under none); None where it cannot be
    said (backend none, no baseline, no result). reports/findings.py states it unless a
    `within_noise` key says so."""
    base = baseline(info, runs)
    results = RESULTS.get(str(info.get("workload")))
    if info.get("backend") == "none" or base is None or not results:
        return None
    label, value, _ = results[0]
    mine, theirs = value(results_of(info)), value(results_of(base[1]))
    if mine is None or not theirs:
        return None
    unit = label.split(" (")[1].rstrip(")") if label.endswith(("(ms)", "(GB)", "(GB/s)", "(us)")) else ""
    return {"change": mine / theirs - 1, "measure": label.split(" (")[0], "unit": unit, "mine": mine,
            "theirs": theirs, "baseline": base[0]}


def _config_rows(runs: list[tuple[str, dict]]) -> dict[str, list]:
    """Config keys whose values differ between runs, one row each; the rest in one row."""
    configs = [{k: v for k, v in (r.get("config") or {}).items() if k != "backend"} for _, r in runs]
    keys = list(dict.fromkeys(k for c in configs for k in c))
    differ = [k for k in keys if len({repr(c.get(k)) for c in configs}) > 1]
    same = [k for k in keys if k not in differ]
    rows = {f"config: {k}": [c.get(k, "-") for c in configs] for k in differ}
    if same:
        text = "; ".join(f"{k}={configs[0][k]}" for k in same)
        rows["config" if len(runs) == 1 else "config (same in all)"] = [text] * len(runs)
    return rows


def _result_rows(runs: list[tuple[str, dict]]) -> dict[str, list]:
    rows: dict[str, list] = {}
    for _, info in runs:
        for label, value, _ in RESULTS.get(str(info.get("workload")), []):
            rows.setdefault(label, [None] * len(runs))
    for n, (_, info) in enumerate(runs):
        figs = results_of(info)
        for label, value, _ in RESULTS.get(str(info.get("workload")), []):
            rows[label][n] = value(figs)
    return rows


def run_table(runs: list[tuple[str, dict]]) -> pd.DataFrame:
    """One column per run (named by its folder), one row per field: what ran, where, with
    which versions, the workload's results and the profiler's cost. Values are display
    values (str, or float for results; None where a run has none)."""
    get = lambda key: [r.get(key, "-") for _, r in runs]  # noqa: E731
    rows = {"workload": get("workload"), "backend": get("backend"), "status": get("status"),
            "GPUs": [devices(r) for _, r in runs],
            "ranks": [f"{r.get('ranks_per_node', '?')} per node x {r.get('nnodes', '?')} node(s)" for _, r in runs],
            "started": get("started"), "wall time (s)": get("wall_s")}
    rows.update(_config_rows(runs))
    versions = list(dict.fromkeys(k for _, r in runs for k in (r.get("versions") or {})))
    rows.update({k: [(r.get("versions") or {}).get(k, "-") for _, r in runs] for k in versions})
    rows.update(_result_rows(runs))
    rows["profiler cost"] = [profiler_cost(r, runs) for _, r in runs]
    return pd.DataFrame(rows, index=[n for n, _ in runs]).T


LAST_ROWS = ("started", "wall time (s)")  # differ in every pair of runs, tell the least


def shared_rows(table: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """run_table's rows split: those whose values differ between the runs (in order, LAST_ROWS
    last), and one line 'field: value; ...' of what every run shares."""
    same = [f for f, row in table.iterrows() if len({repr(v) for v in row.tolist()}) == 1]
    parts = [f"{table.loc[f].iloc[0]}" if f.startswith("config") else f"{f}: {table.loc[f].iloc[0]}" for f in same
             if table.loc[f].iloc[0] is not None]
    differ = [f for f in table.index if f not in same]
    order = [f for f in differ if f not in LAST_ROWS] + [f for f in differ if f in LAST_ROWS]
    return table.loc[order], "; ".join(parts)
