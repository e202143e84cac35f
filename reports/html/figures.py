"""Plotly figures (plain dicts, no plotly import) and table layouts for the HTML report.

Strings from traces go through `label()`: plotly renders a subset of HTML in its
labels and decodes entities, so escaping shows the text as it is and lets no tag in.
"""
from __future__ import annotations

import html
import re

import numpy as np
import pandas as pd

from tracelab.core.schema import OP_CLASSES
from ..stats import MAD_TO_SD, noise
from ..timeline import intervals as timeline
from ..align.align import Comparison, measured
from ..ranks import Input

COLORS = {"gemm": "#4c78a8", "attention": "#f58518", "communication": "#e45756", "elementwise": "#72b7b2",
          "reduction": "#54a24b", "memory": "#eeca3b", "other": "#b279a2"}
HEATMAP_KERNELS = 25
TIMELINE_BINS = 400
TIMELINE_RANKS = 16  # ranks drawn per timeline figure
LABEL_CHARS = 80

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


AXIS_LINE_CHARS = 24  # an axis label longer than this breaks after - _ / . into lines
CATEGORY_AXIS = {"type": "category", "automargin": True}


def axis_label(text: object) -> str:
    """label(), broken into lines of about AXIS_LINE_CHARS after - _ / . so that long run
    names stay whole and distinct under a bar instead of cut to 'decode-torch-2026...'."""
    lines, line = [], ""
    for part in re.split(r"(?<=[-_/.])", str(text)):
        if line and len(line) + len(part) > AXIS_LINE_CHARS:
            lines.append(line)
            line = ""
        line += part
    return "<br>".join(label(x) for x in [*lines, line])


def labelled_events(inputs: list[Input]) -> pd.DataFrame:
    """The columns the figures need from every input, with its label (ordered as given)."""
    parts = [i.sums[["kind", "kernel", "op_class", "dur_ns", "count"]] for i in inputs]
    df = pd.concat(parts, ignore_index=True)
    df["label"] = pd.Categorical.from_codes(np.repeat(np.arange(len(parts)), [len(p) for p in parts]),
                                            categories=[i.label for i in inputs])  # each row's input, set once
    df["kernel"] = df["kernel"].astype(str)
    return df


def _layout(title: str, **extra) -> dict:
    return {"title": {"text": title}, "margin": {"l": 60, "r": 20, "t": 50, "b": 60},
            "font": {"size": 12}, **extra}


def op_class_bars(events: pd.DataFrame) -> dict:
    """Stacked bars: GPU time (ms) per input, one colour per op class."""
    ms = events.pivot_table(index="label", columns="op_class", values="dur_ns", aggfunc="sum",
                            observed=False, fill_value=0) / 1e6
    data = [{"type": "bar", "name": cls, "x": [axis_label(x) for x in ms.index], "y": ms[cls].round(4).tolist(),
             "marker": {"color": COLORS[cls]}} for cls in OP_CLASSES if cls in ms and ms[cls].any()]
    return {"data": data, "layout": _layout(f"{measured(events)} by op class (ms)", barmode="stack",
                                            xaxis=CATEGORY_AXIS, height=420)}


PER_INPUT_COLUMNS = 4  # up to this many inputs, the top table has time, calls and mean per input


def top_kernels(events: pd.DataFrame, n: int) -> pd.DataFrame:
    """Kernels by their largest input's time. Times of different inputs (ranks, runs,
    profilers) are never added together: up to PER_INPUT_COLUMNS inputs, per input
    time_ns[L], count[L] and mean_ns[L] (per call); over inputs the mean per input, the largest and smallest, which input is
    slowest, and the mean per call over every call."""
    per = events.groupby(["kernel", "label"], observed=True)[["dur_ns", "count"]].sum().unstack("label", fill_value=0)
    time, calls = per["dur_ns"], per["count"]
    out = events.groupby("kernel", observed=True).agg(op_class=("op_class", "first"))
    out["op_class"] = out["op_class"].astype(str)
    if len(time.columns) <= PER_INPUT_COLUMNS:
        per_label = {}
        for label in time.columns:
            per_label |= {f"time_ns[{label}]": time[label], f"count[{label}]": calls[label],
                          f"mean_ns[{label}]": time[label] / calls[label].where(calls[label] > 0)}
        out = pd.concat([out, pd.DataFrame(per_label)], axis=1)
    out["inputs"] = (time > 0).sum(axis=1)
    out["per_input_ns"] = time.sum(axis=1) / len(time.columns)
    out["max_ns"], out["min_ns"] = time.max(axis=1), time.min(axis=1)
    out["mean_ns"] = time.sum(axis=1) / calls.sum(axis=1).where(calls.sum(axis=1) > 0)
    out["slowest"] = noise.slowest(time.rename(columns=str), {}).astype(str)  # "" where the lead is noise
    return out.sort_values("max_ns", ascending=False).head(n).reset_index()


def top_kernel_columns(labels: list[str]) -> dict[str, str]:
    """The top table's columns: per input when there are few inputs, else over inputs."""
    cols = {"kernel": "kernel", "op_class": "op class"}
    if len(labels) <= PER_INPUT_COLUMNS:
        for label in labels:
            cols |= {f"time_ns[{label}]": f"{label} (ms)", f"count[{label}]": f"{label} calls",
                     f"mean_ns[{label}]": f"{label} per call (us)"}
        return cols | {"slowest": "slowest"}
    return cols | {"per_input_ns": "mean per input (ms)", "max_ns": "max input (ms)", "min_ns": "min input (ms)",
                   "slowest": "slowest", "inputs": "inputs", "mean_ns": "per call (us)"}


OUTLIERS_SHOWN = 4  # ranks whose compute is an outlier drawn in the timeline beside the first ranks


def timeline_shown(inputs: list[Input]) -> list[tuple[str, list[Input], int]]:
    """Per run with timed ranks: (group, the ranks its timeline draws, how many timed ranks it
    has). With more than TIMELINE_RANKS: the ranks whose compute time is an outlier (outliers(),
    the farthest first, at most OUTLIERS_SHOWN), then the first ranks, in rank order, so a
    straggler among a thousand is drawn beside the others."""
    out = []
    for group in dict.fromkeys(i.group for i in inputs):
        members = [i for i in inputs if i.group == group and i.digest("span") is not None]  # GPU rows timed
        if not members:
            continue
        if len(members) > TIMELINE_RANKS:
            members = outliers_and_first(members, TIMELINE_RANKS)
        out.append((group, members, len([i for i in inputs if i.group == group and i.digest("span") is not None])))
    return out


def outliers_and_first(members: list[Input], count: int) -> list[Input]:
    """The ranks whose compute time (all but communication, from their sums) is an outlier,
    the farthest first, at most OUTLIERS_SHOWN; then the first others, up to `count` in all;
    in rank order."""
    compute = pd.Series([_compute_ns(i.sums) for i in members])
    odd = [members[k] for k in outliers(compute)[:OUTLIERS_SHOWN]]
    rest = [i for i in members if all(i is not o for o in odd)][:max(0, count - len(odd))]
    return sorted(odd + rest, key=lambda i: i.rank)


def _compute_ns(sums: pd.DataFrame) -> float:
    """A rank's time but communication, from its sums (integer ns summed by numpy: no masked frame)."""
    keep = (sums["op_class"] != "communication").to_numpy()
    if sums["dur_ns"].dtype.kind in "iu":
        return float(sums["dur_ns"].to_numpy()[keep].sum())
    return float(sums.loc[keep, "dur_ns"].sum())


def outliers(values: pd.Series) -> list:
    """Index labels of the values beyond 3 scaled median absolute deviations of the median (and
    at least 5% off it: 5% alone is no outlier), the farthest first."""
    med = values.median()
    mad = MAD_TO_SD * (values - med).abs().median()
    off = (values - med).abs()
    return off[off > 3 * max(mad, 0.05 * abs(med))].sort_values(ascending=False, kind="stable").index.tolist()


def timeline_edges(shown: list[Input], offsets: dict[int, int] | None, n_bins: int = 0) -> np.ndarray:
    """The bins the shown ranks share: TIMELINE_BINS from the first start to the last end
    of any of them on one clock (each rank's span, RANK_DIGESTS "span")."""
    n_bins = n_bins or TIMELINE_BINS
    spans = [(i.digest("span"), (offsets or {}).get(i.rank, 0)) for i in shown]
    first = min(s[0] + o for s, o in spans)
    last = max(s[1] + o for s, o in spans)
    return np.linspace(first, max(last, first + n_bins), n_bins + 1).round().astype(np.int64)


def timelines(inputs: list[Input]) -> list[tuple[str, dict]]:
    """Per run, per rank: how busy each op class keeps the GPU over time (binned), from each
    shown rank's "segments" digest."""
    out = []
    for group, shown, n_timed in timeline_shown(inputs):
        offsets = timeline.clock_offsets([{"rank": i.rank, "trace_start_epoch_ns": i.epoch_ns} for i in shown])
        edges = timeline_edges(shown, offsets)
        bins = timeline.on_edges(pd.concat([_bins(i, edges - (offsets or {}).get(i.rank, 0)).assign(rank=i.rank)
                                            for i in shown], ignore_index=True), edges)
        note = (f"{group + ': ' if group else ''}share of each time bin the GPU runs each op class "
                f"(stacked; above 1 where classes overlap); clock: {'epoch' if offsets else 'each trace from its start'}"
                + (f"; {len(shown)} of {n_timed} ranks: {_ranks_text([i.rank for i in shown])}"
                   if n_timed > len(shown) else ""))
        out.append((note, _timeline_figure(bins, [i.rank for i in shown], group)))
    return out


def _ranks_text(ranks: list[int]) -> str:
    """'0-11, 777': runs of consecutive ranks as ranges."""
    parts, start = [], ranks[0]
    for a, b in zip(ranks, ranks[1:] + [None]):
        if b != a + 1:
            parts.append(f"{start}-{a}" if a > start else str(a))
            start = b
    return ", ".join(parts)


def _bins(i: Input, edges_ns: np.ndarray) -> pd.DataFrame:
    """A shown rank's timeline.rank_bins on `edges_ns` (its own clock), from its "segments"
    digest (made where it was read, or here from its events): the rank is never read again."""
    return timeline.segment_bins(i.digest("segments"), edges_ns)


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
    data = [{"type": "bar", "name": name, "x": [axis_label(x) for x in tl["label"]], "y": (v / 1e6).round(4).tolist(),
             "marker": {"color": c}} for (name, v), c in zip(parts.items(), colors)]
    return {"data": data, "layout": _layout("Span of each input (ms)", barmode="stack", height=420,
                                            xaxis=CATEGORY_AXIS)}


def compare_columns(c: Comparison) -> dict[str, str]:
    cols = {"kernel": "kernel"}
    for i, name in enumerate(c.labels):
        cols[f"time_ns[{name}]"] = f"{name} (ms)"
        if i:
            cols[f"ratio[{name}]"] = f"{name} / first ({c.table.attrs.get('basis_kind', 'totals')})"
    return {**cols, "spread": "spread", "slowest": "slowest"}


MANY_RANKS = 16  # above this many inputs, tables per input become distributions


def distribution(per_input: pd.DataFrame, measures: dict[str, str]) -> pd.DataFrame:
    """Per run (group) and measure, over its inputs: count, min, median, max, the input with
    the most, and the outliers (beyond 3 scaled median absolute deviations of the median,
    and at least 15% off it),
    so that 128 ranks read as one row per measure. per_input has label, group and the
    measure columns."""
    rows = []
    for group, g in per_input.groupby("group", sort=False):
        for col, name in measures.items():
            v = g[col].astype("float64")
            if v.isna().all():
                continue
            med = v.median()
            far = g.loc[outliers(v), "label"]
            rows.append({"group": group or "-", "measure": name, "inputs": int(v.notna().sum()), "min": v.min(),
                         "median": med, "max": v.max(), "largest": str(g.loc[v.idxmax(), "label"]) if v.max() > v.min() else "-",
                         "outliers": ", ".join(map(str, far.head(8))) + (" ..." if len(far) > 8 else "")})
    return pd.DataFrame(rows, columns=["group", "measure", "inputs", "min", "median", "max", "largest", "outliers"])


DISTRIBUTION_COLUMNS = {"group": "run", "measure": "measure", "inputs": "inputs", "min": "min", "median": "median",
                        "max": "max", "largest": "largest", "outliers": "outliers"}
