"""Charts that compare: one chart per question with the runs, ranks or profilers side by side,
and which ranks a chart of one bar or column per rank draws above MANY_RANKS (the outliers
beside the first ones, as the timeline does). Plotly figures as plain dicts, like figures.py.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import fmt
from ..align.align import measured, rows_are
from ..ranks import Input
from .figures import (CATEGORY_AXIS, HEATMAP_KERNELS, MANY_RANKS, OUTLIERS_SHOWN, _layout, axis_label, label, outliers,
                      outliers_and_first)


def drawn(inputs: list[Input]) -> tuple[list[str], str]:
    """The labels a chart of one bar or column per input draws, and a note ('' when all):
    every input up to MANY_RANKS; above, per run the ranks whose compute time is an outlier,
    then the first ranks (outliers_and_first), MANY_RANKS in all, so a straggler among a
    thousand is drawn beside ranks that read as bars, not hairlines."""
    if len(inputs) <= MANY_RANKS:
        return [i.label for i in inputs], ""
    groups = list(dict.fromkeys(i.group for i in inputs))
    per_run = max(2, MANY_RANKS // len(groups))
    picked = [i for g in groups for i in outliers_and_first([i for i in inputs if i.group == g], per_run)]
    return [i.label for i in picked], (f"{len(picked)} of {len(inputs):,} inputs drawn: per run the ranks whose compute "
                                       "time is an outlier, then the first ranks; the tables cover every input")


def ranks_drawn(per_rank: pd.Series, always: list | None = None) -> list:
    """Of a value per rank (index: rank), the ranks a chart draws: all up to MANY_RANKS; above,
    `always` (the straggler), the outliers (outliers(), at most OUTLIERS_SHOWN, the farthest
    first), then the first ranks, MANY_RANKS in all, in rank order."""
    if len(per_rank) <= MANY_RANKS:
        return list(per_rank.index)
    odd = list(dict.fromkeys([*(always or []), *outliers(per_rank)[:OUTLIERS_SHOWN]]))
    rest = [r for r in per_rank.index if r not in odd][:MANY_RANKS - len(odd)]
    return sorted(odd + rest)


def only(events: pd.DataFrame, labels: list[str] | None) -> pd.DataFrame:
    """The rows of the `labels` inputs (all when None), the label's categories cut to them."""
    if labels is None:
        return events
    out = events[events["label"].isin(labels)]
    return out.assign(label=pd.Categorical(out["label"].astype(str), categories=labels))


def step_time_boxes(inputs: list[Input]) -> dict | None:
    """One chart for the question "how long is a step, and how steady?": the traced step time
    (first to last GPU activity of the step, CPU operators' in a CPU-only run: reports/timeline/steps.py) of every run side by side, a
    box per run (all its ranks' steps), or per rank for one run of up to MANY_RANKS ranks;
    every step a point where there are few. None where no input has steps."""
    one_run = len({i.group for i in inputs}) == 1 and len(inputs) <= MANY_RANKS
    boxes: dict[str, list[float]] = {}
    devices = set()
    for i in inputs:
        digest = i.digest("waits")
        steps = digest.steps
        if len(steps):
            devices.add(digest.device)
            key = i.label if one_run else (i.group or "all ranks")
            boxes.setdefault(key, []).extend((steps["span_ns"] / 1e6).round(4).tolist())
    if not boxes:
        return None
    device = "CPU" if devices == {"CPU"} else "GPU"  # a CPU-only run's steps are its operators'
    return box_chart(boxes, "traced step time per " + ("rank" if one_run else "run") + f" (ms): first to last {device} "
                     "activity of each step, each step a point", "step time (ms)")


def box_chart(boxes: dict[str, list[float]], title: str, axis: str) -> dict:
    """A box per name (median, quartiles, whiskers), its points beside it up to 400 of them."""
    few = sum(map(len, boxes.values())) <= 400
    data = [{"type": "box", "name": axis_label(name), "y": values, "boxpoints": "all" if few else "outliers",
             "jitter": 0.4, "pointpos": 0, "marker": {"size": 5}, "showlegend": False,
             "hovertemplate": "%{y}<extra>" + label(name) + "</extra>"} for name, values in boxes.items()]
    return {"data": data, "layout": _layout(title, xaxis=CATEGORY_AXIS, yaxis={"title": {"text": axis},
                                                                              "rangemode": "tozero"}, height=420)}


def kernel_heatmap(events: pd.DataFrame, drawn: list[str] | None = None) -> dict:
    """Input x kernel heatmap of the top kernels. With several inputs it opens on each cell
    against its row's median over all inputs (diverging: red above, blue below, white at the
    median), so two inputs that agree are white and the one that differs stands out; buttons
    switch to the colour per row (each kernel's time as a share of its largest input's) and
    to one log scale over all cells. `drawn`: the input labels to draw (all when None; the
    median is over every input). The time (ms), calls, time per call and the difference are
    in the hover text (and the time printed in the cells when there are few inputs)."""
    top = (events.groupby(["kernel", "label"], observed=True)["dur_ns"].sum().groupby(level="kernel").max()
           .nlargest(HEATMAP_KERNELS).index)  # by their largest input's time, as the top table
    mine = events[events["kernel"].isin(top)]
    pivot = lambda col: (mine.pivot_table(index="kernel", columns="label", values=col, aggfunc="sum",  # noqa: E731
                                          observed=False, fill_value=0).reindex(top[::-1]))
    ms, calls = pivot("dur_ns") / 1e6, pivot("count")
    diff = against_median(ms)
    if drawn is not None:
        ms, calls, diff = ms[drawn], calls[drawn], diff[drawn]
    share = ms.div(ms.max(axis=1).where(ms.max(axis=1) > 0), axis=0).fillna(0)
    per_call_us = (ms * 1e3 / calls.where(calls > 0)).fillna(0)
    views = _heatmap_views(share, ms, diff)
    first = views[0] if len(ms.columns) > 1 else views[1]
    data = [{"type": "heatmap", "z": first["args"][0]["z"][0], "x": [axis_label(x) for x in ms.columns],
             "y": [label(k) for k in ms.index], "colorscale": first["args"][0]["colorscale"][0],
             "zmin": first["args"][0]["zmin"], "zmax": first["args"][0]["zmax"], "zmid": first["args"][0]["zmid"],
             "colorbar": {"title": {"text": first["args"][0]["colorbar.title.text"]}},
             "customdata": [[[t, int(c), u, d] for t, c, u, d in zip(*r)] for r in
                            zip(ms.round(4).values.tolist(), calls.values.tolist(), per_call_us.round(2).values.tolist(),
                                _against_text(diff, ms).values.tolist())],
             "hovertemplate": "%{y}<br>%{x}: %{customdata[0]:,.3f} ms, %{customdata[1]:,} calls, "
                              "%{customdata[2]:,.2f} us per call, %{customdata[3]}<extra></extra>"}]
    if len(ms.columns) <= 8:
        data[0] |= {"text": [[fmt.duration(t * 1e6) for t in row] for row in ms.values], "texttemplate": "%{text}",
                    "textfont": {"size": 10}}
    title = f"Top {rows_are(events)}: {measured(events)} per input"
    buttons = {"type": "buttons", "direction": "right", "x": 0, "y": 1.01, "xanchor": "left", "yanchor": "bottom",
               "pad": {"b": 2}, "buttons": views if len(ms.columns) > 1 else views[1:]}
    return {"data": data, "layout": _layout(title, height=160 + 22 * len(top), xaxis=CATEGORY_AXIS,
                                            yaxis={"type": "category", "automargin": True},
                                            updatemenus=[buttons], margin={"l": 60, "r": 20, "t": 96, "b": 60})}


DIVERGING = [[0, "#2166ac"], [0.5, "#f7f7f7"], [1, "#b2182b"]]  # below the median blue, at it white, above red
DIFF_CLIP = 100.0  # percent: the difference view's colours saturate at twice (and none of) the median


def against_median(ms: pd.DataFrame) -> pd.DataFrame:
    """Each cell against its row's median over the columns, in percent (NaN where the median is 0)."""
    median = ms.median(axis=1)
    return ms.sub(median, axis=0).div(median.where(median > 0), axis=0) * 100


def _against_text(diff: pd.DataFrame, ms: pd.DataFrame) -> pd.DataFrame:
    """The hover's words for each cell against its row's median."""
    words = diff.map(lambda d: f"{d:+.1f}% against the row's median" if pd.notna(d) else "")
    return words.where(diff.notna(), np.where(ms > 0, "the row's median is 0 (most inputs lack it)", "none"))


def _none(df: pd.DataFrame) -> pd.DataFrame:
    return df.astype(object).where(df.notna(), None)


def _heatmap_views(share: pd.DataFrame, ms: pd.DataFrame, diff: pd.DataFrame) -> list[dict]:
    """The heatmap's buttons: against the row's median (diverging), colour per row (share of
    the row's largest), one log10 scale over all cells."""
    log_ms = np.log10(ms.where(ms > 0)).round(3)
    lo, hi = (float(log_ms.min().min()), float(log_ms.max().max())) if log_ms.notna().any().any() else (0.0, 1.0)
    view = lambda z, scale, lo, hi, mid, title: {  # noqa: E731
        "z": [z], "colorscale": [scale], "zmin": lo, "zmax": hi, "zmid": mid, "colorbar.title.text": title}
    # a time where the row's median is none (a kernel only some inputs run): as far above as the scale goes
    only_here = pd.DataFrame(np.where(ms > 0, DIFF_CLIP, 0.0), index=ms.index, columns=ms.columns)
    clipped = diff.clip(-DIFF_CLIP, DIFF_CLIP).round(1).fillna(only_here).values.tolist()
    return [{"label": "against the row's median", "method": "restyle",
             "args": [view(clipped, DIVERGING, -DIFF_CLIP, DIFF_CLIP, 0, "% vs median")]},
            {"label": "colour per row", "method": "restyle",
             "args": [view(share.round(4).values.tolist(), "Viridis", 0, 1, None, "of row max")]},
            {"label": "log scale (ms)", "method": "restyle",
             "args": [view(_none(log_ms).values.tolist(), "Viridis", lo, hi, None, "log10 ms")]}]


def kernel_bars(events: pd.DataFrame) -> dict:
    """The top kernels of one input as horizontal bars (time, largest on top, coloured by op
    class, the time printed on each): what a heatmap of one column would show as one colour."""
    from .figures import COLORS

    per = (events.groupby("kernel", observed=True).agg(dur_ns=("dur_ns", "sum"), calls=("count", "sum"),
                                                       op_class=("op_class", "first"))
           .nlargest(HEATMAP_KERNELS, "dur_ns").iloc[::-1])
    per_call_us = (per["dur_ns"] / 1e3 / per["calls"].where(per["calls"] > 0)).fillna(0)
    data = [{"type": "bar", "orientation": "h", "x": (per["dur_ns"] / 1e6).round(4).tolist(),
             "y": [label(k) for k in per.index], "marker": {"color": [COLORS.get(str(c), "#999") for c in per["op_class"]]},
             "text": [fmt.duration(ns) for ns in per["dur_ns"]], "textposition": "auto", "cliponaxis": False,
             "customdata": [[int(c), round(float(u), 2), str(o)] for c, u, o in
                            zip(per["calls"], per_call_us, per["op_class"])],
             "hovertemplate": "%{y}<br>%{x:,.3f} ms, %{customdata[0]:,} calls, %{customdata[1]:,.2f} us per call, "
                              "%{customdata[2]}<extra></extra>", "showlegend": False}]
    title = f"Top {rows_are(events)}: {measured(events)} (ms; colour: op class)"
    return {"data": data, "layout": _layout(title, height=160 + 22 * len(per), xaxis={"title": {"text": "ms"}},
                                            yaxis={"type": "category", "automargin": True})}
