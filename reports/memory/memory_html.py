"""The report's memory section (reports/html.py calls `sections`): a memory timeline per rank
(allocated and reserved over time, the steps shaded, each rank's peak marked with what was
live there), the peak per rank and what stood out. Rendering only; the numbers are the
per-rank digests (analysis.RankMemoryDigest, made where each rank was parsed)."""
from __future__ import annotations

from html import escape
from typing import Callable

import pandas as pd

from ..html import side_by_side
from ..html.notes import folded
from ..html.figures import label
from ..fmt import binary_size
from .across import SECTION, by_run, combine, with_memory
from .memory import RankMemory

LIVE_SHOWN = 6  # groups named in a peak's hover text
PEAK_COLUMNS = {"input": "run", "rank": "rank", "peak_allocated_bytes": "peak allocated",
                "peak_reserved_bytes": "reserved there", "step": "step", "peak_during": "peak during"}
COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d")


def _peak_bytes(d: RankMemory) -> float:
    """The rank's highest peak: allocated, else (nsys) reserved."""
    return float(d.steps["peak_allocated_bytes"].astype("float64").fillna(d.steps["reserved_bytes"].astype("float64"))
                 .max())


def _drawn(inputs: list) -> list:
    """At most side_by_side.MANY_RANKS inputs: the highest peaks' outliers, then the first."""
    keep = set(side_by_side.ranks_drawn(pd.Series({i.label: _peak_bytes(i.digest("memory")) for i in inputs})))
    return [i for i in inputs if i.label in keep]


def _timeline(inputs: list) -> dict:
    """One line of allocated (solid) and reserved (dotted) per input, MiB over ms; the first
    input's steps shaded; each input's highest peak a marker whose hover names what was live."""
    data, shapes = [], []
    for n, i in enumerate(inputs):
        d: RankMemory = i.digest("memory")
        color, x = COLORS[n % len(COLORS)], (d.timeline["time_ns"] / 1e6).round(4).tolist()
        for column, dash in (("allocated_bytes", "solid"), ("reserved_bytes", "dot")):
            if d.timeline[column].notna().any():
                data.append({"type": "scatter", "mode": "lines", "name": f"{label(i.label)} {column[:-6]}", "x": x,
                             "y": (d.timeline[column].astype("float64") / 2**20).round(3).tolist(),
                             "line": {"color": color, "dash": dash, "shape": "hv"}})
        data.append(_peak_marker(i.label, d, color))
    if inputs:
        spans = inputs[0].digest("memory").spans
        shapes = [{"type": "rect", "xref": "x", "yref": "paper", "x0": s / 1e6, "x1": e / 1e6, "y0": 0, "y1": 1,
                   "fillcolor": "#888", "opacity": 0.08 if k % 2 else 0.16, "line": {"width": 0}}
                  for k, (s, e) in enumerate(zip(spans["start_ns"], spans["end_ns"])) if pd.notna(s)]
    return {"data": data, "layout": {"title": {"text": "memory over time (MiB; solid: allocated, dotted: reserved; the first input's "
                                               "steps shaded; the marker: each input's peak)"},
                                     "xaxis": {"title": {"text": "ms since the trace's start"}},
                                     "yaxis": {"title": {"text": "MiB"}}, "shapes": shapes, "height": 460,
                                     "margin": {"l": 60, "r": 20, "t": 50, "b": 50}}}


def _peak_marker(name: str, d: RankMemory, color: str) -> dict:
    level = d.steps["peak_allocated_bytes"].astype("float64").fillna(d.steps["reserved_bytes"].astype("float64"))
    row = d.steps.loc[level.idxmax()]
    live = d.top if pd.isna(row["step"]) else d.top[d.top["step"] == row["step"]]
    lines = [f"{escape(str(b))} {label(n)}: {binary_size(v)}" for b, n, v in
             zip(live["by"], live["name"], live["bytes"]) if b in ("scope", "before_trace")][:LIVE_SHOWN]
    text = f"{label(name)} peak {binary_size(level.max())} during {label(row['peak_during'])}<br>" + "<br>".join(lines)
    return {"type": "scatter", "mode": "markers", "name": f"{label(name)} peak", "x": [None if pd.isna(row["peak_at_ns"]) else row["peak_at_ns"] / 1e6],  # no time: no marker
            "y": [round(level.max() / 2**20, 3)], "marker": {"color": color, "size": 11, "symbol": "diamond"},
            "text": [text], "hovertemplate": "%{text}<extra></extra>"}


def sections(inputs: list, figure: Callable[[dict, str], str], table: Callable, comparison=None,
             runs=()) -> list[str]:
    """The memory section, or nothing where no input could have memory events at all."""
    have, notes = with_memory(inputs)
    if not have:
        return [f'<h2 id="{SECTION}">Where did the memory go?</h2>',
                *(f'<p class="note">{escape(n.text)}</p>' for n in notes)] if inputs else []
    memory = combine(by_run(have))  # per run: a rank that holds more than its run's others
    drawn = _drawn(have)
    out = [f'<h2 id="{SECTION}">Where did the memory go?</h2>']
    if len(drawn) < len(have):
        out.append(f'<p class="note">{len(drawn)} of {len(have)} inputs drawn: the highest peaks, then the first; '
                   "the table covers every input</p>")
    out.append(figure(_timeline(drawn), ""))
    out.append(table(memory.peaks, PEAK_COLUMNS))
    out += [f"<p>{escape(text)}</p>" for text, _, _ in memory.found]
    return out + [folded([escape(n.text) for n in notes + memory.notes])]
