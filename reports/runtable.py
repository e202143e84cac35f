"""The run table: each run folder's run.json side by side (one column per run), with the
workload's own results as rows and what the profiler cost against a run of the same
config under backend `none`. Pure: run.json dicts in, a DataFrame of display values out.

    table = run_table([("decode-torch-20261121-235636", run_json), ...])
"""
from __future__ import annotations

from collections import Counter
import math
from pathlib import Path
from statistics import mean, median
from typing import Callable

import pandas as pd

from tracelab.ingest.results import of_run
from .stats import INTERVAL_LEVEL
from .stats.tests import median_difference

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


def _median_step_ms(figs: RankResults) -> float | None:
    """A train run's median step time (ms), the statistic its profiler cost is judged on (a
    mean would carry the first step's warm-up); None where the run recorded no per-step times."""
    steps = _step_ms(figs)
    return float(median(steps)) if steps else None


def _median_of_ranks(key: str, scale: float = 1.0) -> Callable[[RankResults], float | None]:
    """The mean over ranks of each rank's median of its per-sample list `key` (x scale)."""
    def value(figs: RankResults) -> float | None:
        medians = [median(f[key]) * scale for f in figs if isinstance(f.get(key), list) and f[key]
                   and all(isinstance(x, (int, float)) for x in f[key])]
        return mean(medians) if medians else None
    return value


def number_text(value: float, digits: int = 4) -> str:
    """A number as a reader reads it: `digits` significant digits, thousands separated, never
    an exponent (19,170 not 1.917e+04; 1.779 not 1.779296768)."""
    if not math.isfinite(value) or value == 0:
        return f"{value:g}"
    places = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:,.{places}f}"


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
               ("s per sample, median (mean of ranks)", _median_of_ranks("sample_s"), False)],
    "train": [("step time, median (ms)", _median_step_ms, False), ("tokens/s", _train("tokens_per_s"), True),
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
    """'2 x NVIDIA H200' from run.json devices; a run on the CPU (index -1, no GPU) 'none (CPU:
    x86_64, 2 cores)', never a count of GPUs it did not have."""
    listed = [d for d in info.get("devices") or [] if isinstance(d, dict)]
    cpus = [d for d in listed if d.get("index") == -1]
    names = Counter(str(d.get("name", "?")) for d in listed if d.get("index") != -1)
    text = ", ".join(f"{n} x {name}" for name, n in names.items())
    if cpus and not text:
        cores = cpus[0].get("cores")
        return f"none (CPU: {cpus[0].get('name', '?')}" + (f", {cores} cores)" if cores else ")")
    return text or "-"


def same_config(a: dict, b: dict, sweep: bool = False) -> bool:
    """Same workload, ranks and nodes, and every config key both runs record equal
    (backend aside): a key only one records (a newer tracelab's option) does not differ.
    With `sweep`, `b` may have swept more values of a key than `a` ran (`--ddp flat,bucketed`
    covers `--ddp flat`): b's rows then hold a's configuration among others."""
    if any(a.get(k) != b.get(k) for k in ("workload", "ranks_per_node", "nnodes")):
        return False
    ca, cb = a.get("config") or {}, b.get("config") or {}
    same = (lambda x, y: _covers(y, x)) if sweep else (lambda x, y: x == y)
    return all(same(ca[k], cb[k]) for k in ca.keys() & cb.keys() if k != "backend")


def _covers(theirs, mine) -> bool:
    """A swept value (comma text or list) holding every value of mine, or the same value."""
    if theirs == mine:
        return True
    if isinstance(theirs, str) and isinstance(mine, str):
        return set(mine.split(",")) <= set(theirs.split(","))
    if isinstance(theirs, list) and isinstance(mine, list):
        return set(map(str, mine)) <= set(map(str, theirs))
    return False


def baseline(info: dict, runs: list[tuple[str, dict]]) -> tuple[str, dict] | None:
    """The run of the same workload and config (backend aside) under backend `none`; else one
    under none that swept this config among others, narrowed to its rows of this config
    (_narrowed), where this run ran one configuration."""
    if info.get("backend") == "none":
        return None
    exact = next(((n, r) for n, r in runs if r.get("backend") == "none" and same_config(r, info)), None)
    if exact is not None or len(_rows(results_of(info))) > 1:
        return exact
    return next(((n, narrowed) for n, r in runs if r.get("backend") == "none" and same_config(info, r, sweep=True)
                 and (narrowed := _narrowed(r, _rows(results_of(info))[:1])) is not None), None)


def _narrowed(info: dict, mine: list[dict]) -> dict | None:
    """run.json `info` with each rank's result rows cut to those of the configuration of the
    one row `mine` (equal on every config key whose value differs between info's rows: the
    swept ones); None where that leaves no row or more than one."""
    if len(mine) != 1:
        return None
    ranks, key = {}, "results" if "results" in info else "figures"  # old run folders say figures
    for rank, figs in (info.get(key) or {}).items():
        rows = figs.get("rows") if isinstance(figs, dict) else None
        if not isinstance(rows, list) or not rows:
            return None
        varying = {k for k in rows[0] if k in (info.get("config") or {}) and any(r.get(k) != rows[0].get(k) for r in rows)}
        kept = [r for r in rows if all(r.get(k) == mine[0].get(k) for k in varying if k in mine[0])]
        if len(kept) != 1:
            return None
        ranks[rank] = {**figs, "rows": kept}
    return {**info, key: ranks} if ranks else None


def _step_ms(figs: RankResults) -> list[float] | None:
    """A train run's per-step times (ms) of its one configuration (the first rank's)."""
    rows = _rows(figs)
    return [float(x) for x in rows[0]["step_ms"]] if len(rows) == 1 and isinstance(rows[0].get("step_ms"), list) else None


def _sample_ms(figs: RankResults) -> list[float] | None:
    """A decode run's time per sample (ms), the first rank's."""
    values = next((f["sample_s"] for f in figs if isinstance(f.get("sample_s"), list)), None)
    return [1e3 * float(x) for x in values] if values else None


# workload -> (what, per-step samples in ms from the ranks' results): what a profiler's cost is
# judged on where the runs recorded one value per step or sample (lower is better)
SAMPLES: dict[str, tuple[str, Callable[[RankResults], list[float] | None]]] = {
    "train": ("step time", _step_ms), "decode": ("time per sample", _sample_ms)}


def profiler_cost(info: dict, runs: list[tuple[str, dict]]) -> str:
    """The profiler's cost against the same config under backend `none`: on the medians of
    the per-step samples with the interval of their difference (reports/stats.py), "within
    noise" where it holds 0; from one value per run (no noise known) where that is all
    there is; or why it cannot be said."""
    if info.get("backend") == "none":
        return "(no profiler)"
    if baseline(info, runs) is None or not RESULTS.get(str(info.get("workload"))):
        return "- (no run of this config under backend none)"
    if (cost := cost_of(info, runs)) is None:
        return "-"
    if "text" in cost:
        return cost["text"]
    return (f"{100 * cost['change']:+.1f}% {cost['measure']} ({cost['theirs']:,.4g} under none, {cost['baseline']}); "
            "one value per run: whether beyond the noise is unknown")


def cost_of(info: dict, runs: list[tuple[str, dict]]) -> dict | None:
    """The profiler's cost as numbers: change (mine / theirs - 1), measure, mine, theirs,
    baseline (the run under none), and where both runs recorded per-step samples the medians'
    test (`within_noise`, `text`: sampled_cost); None where it cannot be said (backend none,
    no baseline, no result). reports/findings/findings.py states it unless `within_noise` is true."""
    base = baseline(info, runs)
    results = RESULTS.get(str(info.get("workload")))
    if info.get("backend") == "none" or base is None or not results:
        return None
    what, samples = SAMPLES.get(str(info.get("workload")), ("", lambda figs: None))
    mine_s, theirs_s = samples(results_of(info)), samples(results_of(base[1]))
    if mine_s and theirs_s and len(mine_s) > 1 and len(theirs_s) > 1:
        d = median_difference(theirs_s, mine_s)
        return {"change": d.relative, "measure": what, "unit": "ms", "mine": d.median_b,
                "theirs": d.median_a, "baseline": base[0], "within_noise": bool(d.within_noise),
                "text": sampled_cost(what, theirs_s, mine_s, base[0])}
    label, value, _ = results[0]
    mine, theirs = value(results_of(info)), value(results_of(base[1]))
    if mine is None or not theirs:
        return None
    unit = label.split(" (")[1].rstrip(")") if label.endswith(("(ms)", "(GB)", "(GB/s)", "(us)")) else ""
    return {"change": mine / theirs - 1, "measure": label.split(" (")[0], "unit": unit, "mine": mine,
            "theirs": theirs, "baseline": base[0]}


def sampled_cost(what: str, base_ms: list[float], mine_ms: list[float], base_name: str) -> str:
    """'+45.8% step time (median 12.92 ms against 8.86 ms under none, NAME; 97% interval of the
    difference +1.35 to +6.45 ms, 4 against 4 steps)', led by 'within noise: ' where it is."""
    d = median_difference(base_ms, mine_ms)
    head = f"{100 * d.relative:+.1f}% {what} (median {d.median_b:,.2f} ms against {d.median_a:,.2f} ms " \
           f"under none, {base_name}; "
    if d.confidence is None:
        tail = f"{d.n_b} against {d.n_a} samples: too few for a {INTERVAL_LEVEL:.0%} interval, p = {d.p_value:.2g})"
    else:
        tail = (f"{d.confidence:.0%} interval of the difference {d.low:+,.2f} to {d.high:+,.2f} ms"
                f"{' holds 0' if d.within_noise else ''}, {d.n_b} against {d.n_a} samples)")
    return ("within noise: " if d.within_noise else "") + head + tail


def _config_rows(runs: list[tuple[str, dict]]) -> dict[str, list]:
    """Config keys whose values differ between runs, one row each (None where a run's
    workload has no such key: it does not apply); keys every run records alike in one row."""
    configs = [{k: v for k, v in (r.get("config") or {}).items() if k != "backend"} for _, r in runs]
    keys = list(dict.fromkeys(k for c in configs for k in c))
    same = [k for k in keys if all(k in c for c in configs) and len({repr(c[k]) for c in configs}) == 1]
    rows = {f"config: {k}": [c.get(k) for c in configs] for k in keys if k not in same}
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
    # object cells: a row that does not apply to a run stays None (blank), never NaN
    return pd.DataFrame(list(rows.values()), index=list(rows), columns=[n for n, _ in runs], dtype=object)


LAST_ROWS = ("started", "wall time (s)")  # differ in every pair of runs, tell the least


def _shown(value) -> str:
    return number_text(value) if isinstance(value, float) else str(value)


def shared_rows(table: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """run_table's rows split: those whose values differ between the runs (in order, LAST_ROWS
    last), and one line 'field: value; ...' of what every run shares."""
    same = [f for f, row in table.iterrows() if len({repr(v) for v in row.tolist()}) == 1]
    parts = [f"{table.loc[f].iloc[0]}" if f.startswith("config") else f"{f}: {_shown(table.loc[f].iloc[0])}"
             for f in same if table.loc[f].iloc[0] is not None]
    differ = [f for f in table.index if f not in same]
    order = [f for f in differ if f not in LAST_ROWS] + [f for f in differ if f in LAST_ROWS]
    return table.loc[order], "; ".join(parts)


def info_beside(path: str, runs) -> dict | None:
    """The run.json info of the run folder a trace at `path` lies in, from the infos the caller read
    (`runs`: (folder name, info) pairs); None for a bare trace. Reads no file: reports are pure."""
    folder = Path(path).parent.name if path else None
    return next((info for name, info in runs if name == folder), None)
