"""Plotly figures (plain dicts, no plotly import) and table layouts for the HTML report.

Strings from traces go through `label()`: plotly renders a subset of HTML in its
labels and decodes entities, so escaping shows the text as it is and lets no tag in.
"""
from __future__ import annotations

import html

import pandas as pd

from ..schema import OP_CLASSES
from . import timeline
from .compare import Input, measured, rows_are

COLORS = {"gemm": "#4c78a8", "attention": "#f58518", "communication": "#e45756", "elementwise": "#72b7b2",
          "reduction": "#54a24b", "memory": "#eeca3b", "other": "#b279a2"}
HEATMAP_KERNELS = 25
TIMELINE_BINS = 400
TIMELINE_RANKS = 16  # ranks drawn per timeline figure
LABEL_CHARS = 80

TOP_KERNEL_COLUMNS = {"kernel": "kernel", "op_class": "op class", "total_ns": "total (ms)", "share": "share %",
                      "count": "count", "mean_ns": "mean (us)", "inputs": "inputs", "max_ns": "max input (ms)",
                      "min_ns": "min input (ms)", "slowest": "slowest"}
TIMELINE_COLUMNS = {"label": "input", "busy_ns": "busy (ms)", "span_ns": "span (ms)", "idle_share": "idle %",
                    "comm_ns": "communication (ms)", "overlap_ns": "overlapped (ms)", "exposed_ns": "exposed (ms)",
                    "exposed_share": "exposed %"}
SKEW_COLUMNS = {"group": "run", "kernel": "kernel", "instances": "collectives", "mean_skew_ns": "mean start skew (us)",
                "max_skew_ns": "max start skew (us)", "last_rank": "most often last rank", "last_share": "of them %",
                "clock": "clock"}


def label(text: object) -> str:
    """A trace string made safe and short for a plotly label."""
    text = str(text)
    if len(text) > LABEL_CHARS:
        text = text[: LABEL_CHARS - 1] + "\u2026"
    return html.escape(text, quote=True)


def labelled_events(inputs: list[Input]) -> pd.DataFrame:
    """The columns the figures need from every input, with its label (ordered as given)."""
    parts = [i.events[["kind", "kernel", "op_class", "dur_ns", "count"]].assign(label=i.label) for i in inputs]
    df = pd.concat(parts, ignore_index=True)
    df["label"] = pd.Categorical(df["label"], categories=[i.label for i in inputs])
    df["kernel"] = df["kernel"].astype(str)
    return df


def _layout(title: str, **extra) -> dict:
    return {"title": {"text": title}, "margin": {"l": 60, "r": 20, "t": 50, "b": 60},
            "font": {"size": 12}, **extra}


def op_class_bars(events: pd.DataFrame) -> dict:
    """Stacked bars: GPU time (ms) per input, one colour per op class."""
    ms = events.pivot_table(index="label", columns="op_class", values="dur_ns", aggfunc="sum",
                            observed=False, fill_value=0) / 1e6
    data = [{"type": "bar", "name": cls, "x": [label(x) for x in ms.index], "y": ms[cls].round(4).tolist(),
             "marker": {"color": COLORS[cls]}} for cls in OP_CLASSES if cls in ms and ms[cls].any()]
    return {"data": data, "layout": _layout(f"{measured(events)} by op class (ms)", barmode="stack",
                                            xaxis={"type": "category"}, height=420)}


def top_kernels(events: pd.DataFrame, n: int) -> pd.DataFrame:
    """Kernels by total time over all inputs: op class, count, mean, in how many inputs,
    the largest and smallest input's time and which input is slowest."""
    per = events.groupby(["kernel", "label"], observed=True)["dur_ns"].sum().unstack("label", fill_value=0)
    out = events.groupby("kernel", observed=True).agg(op_class=("op_class", "first"), total_ns=("dur_ns", "sum"),
                                                      count=("count", "sum"))
    out["share"] = out["total_ns"] / out["total_ns"].sum() if out["total_ns"].sum() else 0.0
    out["mean_ns"] = out["total_ns"] / out["count"].where(out["count"] > 0)
    out["inputs"] = (per > 0).sum(axis=1)
    out["max_ns"], out["min_ns"] = per.max(axis=1), per.min(axis=1)
    out["slowest"] = per.idxmax(axis=1).astype(str)
    out["op_class"] = out["op_class"].astype(str)
    return out.sort_values("total_ns", ascending=False).head(n).reset_index()


def kernel_heatmap(events: pd.DataFrame) -> dict:
    """Input x kernel heatmap of the top kernels' time (ms)."""
    top = events.groupby("kernel")["dur_ns"].sum().nlargest(HEATMAP_KERNELS).index
    ms = (events[events["kernel"].isin(top)]
          .pivot_table(index="kernel", columns="label", values="dur_ns", aggfunc="sum", observed=False, fill_value=0)
          .reindex(top[::-1]) / 1e6)
    data = [{"type": "heatmap", "z": ms.round(4).values.tolist(), "x": [label(x) for x in ms.columns],
             "y": [label(k) for k in ms.index], "colorscale": "Viridis", "colorbar": {"title": {"text": "ms"}}}]
    return {"data": data, "layout": _layout(f"Top {rows_are(events)}: {measured(events)} per input (ms)", height=160 + 22 * len(top),
                                            xaxis={"type": "category"}, yaxis={"type": "category", "automargin": True})}


def timelines(inputs: list[Input]) -> list[tuple[str, dict]]:
    """Per run, per rank: how busy each op class keeps the GPU over time (binned)."""
    out = []
    for group in dict.fromkeys(i.group for i in inputs):
        members = [i for i in inputs if i.group == group and timeline.timed(i.events).shape[0]]
        if not members:
            continue
        shown = members[:TIMELINE_RANKS]
        offsets = timeline.clock_offsets([{"rank": i.rank, "trace_start_epoch_ns": i.epoch_ns} for i in shown])
        events = pd.concat([timeline.timed(i.events) for i in shown], ignore_index=True)
        bins = timeline.activity_bins(events, TIMELINE_BINS, offsets)
        note = (f"{group + ': ' if group else ''}share of each time bin the GPU runs each op class "
                f"(stacked; above 1 where classes overlap); clock: {'epoch' if offsets else 'each trace from its start'}"
                + (f"; first {TIMELINE_RANKS} of {len(members)} ranks" if len(members) > len(shown) else ""))
        out.append((note, _timeline_figure(bins, [i.rank for i in shown], group)))
    return out


def _timeline_figure(bins: pd.DataFrame, ranks: list[int], group: str) -> dict:
    data, layout = [], _layout(label(f"{group} timeline" if group else "timeline"), height=120 + 110 * len(ranks))
    step = 1.0 / len(ranks)
    for row, rank in enumerate(ranks):
        axis = "" if row == 0 else str(row + 1)
        layout[f"yaxis{axis}"] = {"domain": [1 - (row + 1) * step + 0.02, 1 - row * step - 0.02],
                                  "title": {"text": f"rank {rank}"}, "rangemode": "tozero"}
        mine = bins[bins["rank"] == rank]
        for cls in OP_CLASSES:
            b = mine[mine["op_class"] == cls]
            if b.empty or not b["busy_ns"].any():
                continue
            data.append({"type": "scatter", "mode": "lines", "stackgroup": f"r{rank}", "name": cls,
                         "legendgroup": cls, "showlegend": row == 0, "line": {"width": 0.5, "color": COLORS[cls]},
                         "x": ((b["bin_start_ns"] - bins["bin_start_ns"].min()) / 1e6).round(4).tolist(),
                         "y": (b["busy_ns"] / b["bin_ns"]).round(4).tolist(), "yaxis": f"y{axis}"})
    layout["xaxis"] = {"title": {"text": "ms"}, "anchor": f"y{len(ranks) if len(ranks) > 1 else ''}"}
    return {"data": data, "layout": layout}


def overlap_bars(tl: pd.DataFrame) -> dict:
    """Per input, its span split into busy without communication, communication overlapped
    with compute, communication exposed, and idle (ms)."""
    parts = {"busy, no communication": tl["busy_ns"] - tl["overlap_ns"].fillna(0) - tl["exposed_ns"].fillna(0),
             "communication overlapped": tl["overlap_ns"].fillna(0),
             "communication exposed": tl["exposed_ns"].fillna(0), "idle": tl["idle_ns"]}
    colors = ["#4c78a8", "#f2a3a3", "#e45756", "#d9d9d9"]
    data = [{"type": "bar", "name": name, "x": [label(x) for x in tl["label"]], "y": (v / 1e6).round(4).tolist(),
             "marker": {"color": c}} for (name, v), c in zip(parts.items(), colors)]
    return {"data": data, "layout": _layout("Span of each input (ms)", barmode="stack", height=420,
                                            xaxis={"type": "category"})}


def compare_columns(c) -> dict[str, str]:
    cols = {"kernel": "kernel"}
    for i, name in enumerate(c.labels):
        cols[f"time_ns[{name}]"] = f"{name} (ms)"
        if i:
            cols[f"ratio[{name}]"] = f"{name} / first"
    return {**cols, "spread": "spread", "slowest": "slowest"}
