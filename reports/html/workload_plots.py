"""Each workload's own plot, from the results its ranks wrote (run.json "results", declared
in tracelab/results.py): plotly figures as plain dicts (no plotly import), like figures.py.

    for note, fig in workload_plots.workload_figures(run_json):   # [] for other workloads
        ...

allreduce: bus bandwidth against message size, one line per implementation;
train: step time per phase and model size (mean, std as error bars);
overlap: speedup of fused over unfused per shape, next to symm-mem-recipes' published ones, and the times.
"""
from __future__ import annotations

import pandas as pd

from tracelab.ingest import results
from .figures import label

# symm-mem-recipes (github.com/yifuwang/symm-mem-recipes): its Triton fused all-gather matmul
# over cuBLAS + NCCL on 8 H100s, (model, M) -> speedup
REFERENCE_AG_SPEEDUP = {("8B", 4096): 1.05, ("8B", 8192): 1.34, ("8B", 16384): 1.54,
                        ("70B", 4096): 1.29, ("70B", 8192): 1.42, ("70B", 16384): 1.47,
                        ("105B", 4096): 1.15, ("105B", 8192): 1.22, ("105B", 16384): 1.20}


def _layout(title: str, **extra) -> dict:
    return {"title": {"text": label(title)}, "margin": {"l": 60, "r": 20, "t": 50, "b": 60},
            "font": {"size": 12}, **extra}


def rows(result: dict) -> pd.DataFrame:
    """The workload's table of results (its "rows"), empty when it has none."""
    return pd.DataFrame(result.get("rows") or [])


def allreduce_bandwidth(result: dict) -> dict:
    """Bus bandwidth (GB/s) against message size (log scale), one line per implementation."""
    df = rows(result).sort_values(["impl", "msg_bytes"])
    data = [{"type": "scatter", "mode": "lines+markers", "name": label(impl),
             "x": part["msg_bytes"].tolist(), "y": part["busbw_gb_s"].round(3).tolist(),
             "customdata": part["latency_us"].round(2).tolist(),
             "hovertemplate": "%{x:.3s}B: %{y:.1f} GB/s, %{customdata} us<extra>" + label(impl) + "</extra>"}
            for impl, part in df.groupby("impl", sort=False)]
    title = f"all-reduce bus bandwidth, {result.get('world_size', '?')} ranks, {result.get('dtype', '')}"
    return {"data": data, "layout": _layout(title, xaxis={"type": "log", "title": {"text": "message (bytes)"}},
                                            yaxis={"title": {"text": "bus bandwidth (GB/s)"}})}


def train_step_times(result: dict) -> dict:
    """Mean step time (ms, std as error bars) per model size, one bar group per phase
    (and dtype and data-parallel variant where the run had several)."""
    df = rows(result)
    keys = [k for k in ("phase", "dtype", "ddp") if df[k].nunique() > 1] or ["phase"]
    data = []
    for key, part in df.groupby(keys, sort=False):
        name = " ".join(map(str, key if isinstance(key, tuple) else (key,)))
        data.append({"type": "bar", "name": label(name), "x": [label(s) for s in part["size"]],
                     "y": part["step_ms_mean"].round(3).tolist(),
                     "error_y": {"type": "data", "array": part["step_ms_std"].round(3).tolist()}})
    title = f"train step time, batch {df['batch_size'].iloc[0]} x {df['context_length'].iloc[0]} tokens"
    return {"data": data, "layout": _layout(title, barmode="group", xaxis={"title": {"text": "model size"}},
                                            yaxis={"title": {"text": "step time (ms)"}})}


def _shapes(df: pd.DataFrame) -> pd.Series:
    return df["model"] + " M=" + df["M"].astype(str)


def overlap_times(result: dict) -> dict:
    """Time (us) per shape of the product alone and of each variant, one bar group per operation."""
    df = rows(result)
    shape = _shapes(df)
    data = [{"type": "bar", "name": label(f"{op} {col[:-3]}"), "x": [label(s) for s in shape[part.index]],
             "y": part[col].round(2).tolist()}
            for op, part in df.groupby("op", sort=False) for col in df.columns if col.endswith("_us")]
    title = f"communication + matmul time, {result.get('world_size', '?')} ranks"
    return {"data": data, "layout": _layout(title, barmode="group", yaxis={"title": {"text": "time (us)"}})}


def overlap_speedup(result: dict) -> dict | None:
    """Speedup of fused over unfused (unfused time / fused time) per shape and operation,
    with symm-mem-recipes' all-gather matmul speedups on 8 H100s beside them; None when
    the run timed only one variant."""
    df = rows(result)
    if "speedup" not in df or df["speedup"].isna().all():
        return None
    df = df.dropna(subset=["speedup"])
    shape = _shapes(df)
    data = [{"type": "bar", "name": label(op), "x": [label(s) for s in shape[part.index]],
             "y": part["speedup"].round(3).tolist()} for op, part in df.groupby("op", sort=False)]
    ref = [(s, REFERENCE_AG_SPEEDUP.get((m, M))) for s, m, M in zip(shape, df["model"], df["M"])]
    ref = list(dict((s, v) for s, v in ref if v is not None).items())
    if ref:
        data.append({"type": "scatter", "mode": "markers", "name": "symm-mem-recipes (8 H100, all-gather matmul)",
                     "x": [label(s) for s, _ in ref], "y": [v for _, v in ref], "marker": {"symbol": "diamond"}})
    title = f"fused over unfused, {result.get('world_size', '?')} ranks"
    return {"data": data, "layout": _layout(title, barmode="group", yaxis={"title": {"text": "speedup (x)"}},
                                            shapes=[{"type": "line", "xref": "paper", "x0": 0, "x1": 1,
                                                     "y0": 1, "y1": 1, "line": {"dash": "dot"}}])}


PLOTS = {"allreduce": [("bus bandwidth against message size, per implementation", allreduce_bandwidth)],
         "train": [("step time per phase and model size (rank 0; std as error bars)", train_step_times)],
         "overlap": [("speedup of fused over unfused per shape (slowest rank's medians)", overlap_speedup),
                     ("time per shape: the product alone, unfused, fused (slowest rank's medians)", overlap_times)]}


def workload_figures(run: dict) -> list[tuple[str, dict]]:
    """(note, figure) pairs for the run's workload, from rank 0's results (run.json as any
    version of the runner wrote it); [] when the workload has no plot here or wrote no rows."""
    per_rank = results.of_run(run)
    first = per_rank.get("0") or next(iter(per_rank.values()), {})
    plots = PLOTS.get(first.get("workload", ""), [])
    if not first.get("rows"):
        return []
    made = [(note, make(first)) for note, make in plots]
    return [(note, fig) for note, fig in made if fig is not None]


def _train_steps(figs: list[dict]) -> list[float]:
    """Rank 0's step times (ms) of a train run of one configuration, [] for a sweep."""
    rows_ = figs[0].get("rows") if figs else None
    if not isinstance(rows_, list) or len(rows_) != 1 or not isinstance(rows_[0].get("step_ms"), list):
        return []
    return [float(x) for x in rows_[0]["step_ms"] if isinstance(x, (int, float))]


def _decode_tokens(figs: list[dict]) -> list[float]:
    return [float(f["tokens_per_s"]) for f in figs if isinstance(f.get("tokens_per_s"), (int, float))]


# workload -> (note, axis, values per run from its ranks' results, the runs it takes): the
# workload's own figure, one chart with every run side by side, in place of a chart per run
ACROSS_RUNS = {"train": ("step time per run, as the workload timed it (each step a point; a run under backend "
                         "none beside the profiled ones shows what profiling costs)", "step time (ms)", _train_steps, 1),
               "decode": ("tokens/s per run (each rank a point)", "tokens/s", _decode_tokens, 2)}


def across_runs(runs: list[tuple[str, dict]]) -> list[tuple[str, str, dict]]:
    """(workload, note, figure) per workload of the runs (that two or more ran, for decode): a box
    per run of the workload's own measure (ACROSS_RUNS), so runs compare in one chart, not one
    chart each; none where a run of it lacks the measure (a sweep of several configurations)."""
    from .side_by_side import box_chart
    from ..runtable import results_of

    out = []
    for workload, (note, axis, values, least) in ACROSS_RUNS.items():
        boxes = {name: v for name, info in runs if info.get("workload") == workload
                 and (v := values(results_of(info)))}
        if len(boxes) >= least and len(boxes) == sum(info.get("workload") == workload for _, info in runs):
            out.append((workload, note, box_chart(boxes, note.split(" (")[0], axis)))
    return out
