"""The report's roofline section (reports/html/html.py calls `sections`): per input, a log-log
roofline plot (one point per kernel with known FLOPs and bytes, sized by its time, the device's
roofs drawn, the numbers on hover) and the kernels losing most time to their roofline.
Rendering only: the rows come from reports/roofline.rank_roofline, made per rank."""
from __future__ import annotations

import math
from html import escape
from typing import Callable

import numpy as np
import pandas as pd

from ..html import side_by_side
from ..html.figures import MANY_RANKS
from .roofline import GB_S_HEADER, GB_S_NOTE, to_records, Roofline

PLOTTED_INPUTS = 4  # inputs with a plot of their own; the rest in the table only
TABLE_ROWS = 10
COLUMNS = {"input": "input", "key": "kernel", "dur_ns": "time (ms)", "tflop_s": "TFLOP/s", "gb_s": GB_S_HEADER,
           "intensity": "FLOP/B", "bound": "bound", "roofline_frac": "of roof %", "lost_ns": "lost (ms)"}


def _roofs(device, x_range: tuple[float, float]) -> list[dict]:
    """The memory roof (TFLOP/s = FLOP/B x GB/s / 1e3) up to each compute roof of the device."""
    lines = []
    xs = np.geomspace(*x_range, 64)
    for dtype_class, label in (("16", "bf16/fp16"), ("fp32", "fp32"), ("8", "fp8")):
        peak = device.tflop_s.get(dtype_class)
        if peak:
            ys = np.minimum(xs * device.hbm_gb_s / 1e3, peak)
            lines.append({"type": "scatter", "mode": "lines", "x": xs.tolist(), "y": ys.round(4).tolist(),
                          "name": f"roof {label}: {peak:,.0f} TFLOP/s, {device.hbm_gb_s:,.0f} GB/s",
                          "hoverinfo": "name", "line": {"dash": "dot", "width": 1}})
    return lines


def figure(label: str, digest: dict) -> dict | None:
    rows = digest["rows"]
    points = rows[rows["intensity"].notna() & rows["tflop_s"].notna() & (rows["tflop_s"] > 0)]
    if not len(points):
        return None
    size = 8 + 30 * np.sqrt(points["dur_ns"] / points["dur_ns"].max())
    text = [f"{escape(str(k))[:80]}<br>{d / 1e6:,.3f} ms, {t:,.1f} TFLOP/s, {g:,.0f} GB/s, {i:,.1f} FLOP/B, {b}"
            + ("" if pd.isna(f) else f", {100 * f:.1f}% of roof, lost {lost / 1e6:,.3f} ms")
            for k, d, t, g, i, b, f, lost in zip(points["key"], points["dur_ns"], points["tflop_s"], points["gb_s"],
                                                points["intensity"], points["bound"], points["roofline_frac"],
                                                points["lost_ns"])]
    data = [{"type": "scatter", "mode": "markers", "x": points["intensity"].round(4).tolist(),
             "y": points["tflop_s"].round(4).tolist(), "text": text, "hovertemplate": "%{text}<extra></extra>",
             "marker": {"size": size.round(1).tolist(), "opacity": 0.7}, "name": "kernels"}]
    device = digest["device"]
    if device is not None:
        low, high = float(points["intensity"].min()), float(points["intensity"].max())
        data += _roofs(device, (max(low / 4, 1e-3), max(high * 4, 10 * device.tflop_s.get("16", 1e3) * 1e3
                                                        / device.hbm_gb_s / 10)))
    # plotly reads tags in titles: a folder named <a href=...> must stay text
    title = f"{escape(str(label))}: {escape(device.name) if device else 'device unknown (no roofs)'}"
    return {"data": data, "layout": {"title": {"text": title}, "height": 420,
                                     "xaxis": {"type": "log", "title": {"text": "FLOP per byte"}},
                                     "yaxis": {"type": "log", "title": {"text": "achieved TFLOP/s"}},
                                     "margin": {"l": 70, "r": 20, "t": 40, "b": 50}}}


def _coverage(label: str, digest: dict) -> str:
    share = digest["known_ns"] / digest["gpu_ns"] if digest["gpu_ns"] else math.nan
    device = digest["device"]
    hint = digest.get("missing_hint") if share < 0.95 else ""
    found = f" (from the {digest['device_from']})" if device and digest.get("device_from") else ""
    return (f"{label}: work known for {digest['known_ns'] / 1e6:,.3f} of {digest['gpu_ns'] / 1e6:,.3f} ms GPU time "
            f"({100 * share:.1f}%){'; ' + hint if hint else ''}; device "
            f"{device.name + found + ' [' + device.source + ']' if device else 'unknown'}")


def _coverage_spread(digests: list[tuple[str, dict]]) -> str:
    """Many inputs: the share of GPU time with known work over them, in one line."""
    shares = pd.Series([d["known_ns"] / d["gpu_ns"] for _, d in digests]) * 100
    devices = sorted({d["device"].name if d["device"] else "unknown" for _, d in digests})
    return (f"{len(digests):,} inputs: work known for {shares.min():.1f}% to {shares.max():.1f}% of their GPU time "
            f"(median {shares.median():.1f}%); device {', '.join(devices)}")


def sections(inputs, figure_html: Callable[[dict, str], str], table: Callable, comparison=None,
             runs=()) -> list[str]:
    """The roofline section; above MANY_RANKS inputs, the coverage as one line and the plots and
    table of the drawn ranks only (the outlier ranks, then the first: side_by_side.drawn).
    `comparison`: unused (reports/topics.py's section signature)."""
    kept = [i for i in inputs if i.digest("roofline")["gpu_ns"]]
    drawn, note = side_by_side.drawn(kept)
    digests = [(i.label, i.digest("roofline")) for i in kept]
    many = len(digests) > MANY_RANKS
    if not digests or not any(d["known_ns"] for _, d in digests):
        return ["<h2 id=\"roofline\">Roofline</h2>", '<p class="note">No FLOPs or bytes in these traces (torch.profiler '
                "needs record_shapes=True, proton flops/bytes metrics): no roofline.</p>"] if digests else []
    out = ['<h2 id="roofline">Roofline: was the GPU time well spent?</h2>',
           '<p class="note">FLOPs and bytes from the traces themselves (the shapes of the aten op that launched '
           "each kernel; proton's metrics; copies' sizes); kernels whose work the trace does not give are left out, "
           "never counted as zero. Lost time: kernel time beyond what the device's roofline allows. "
           f"{escape(GB_S_NOTE)}.</p>"]
    out += ([f'<p class="note">{escape(_coverage_spread(digests))}; {escape(note)}</p>'] if many else
            [f'<p class="note">{escape(_coverage(label, d))}</p>' for label, d in digests])
    digests = [(label, d) for label, d in digests if label in set(drawn)]
    for label, d in digests[:PLOTTED_INPUTS]:
        if (fig := figure(label, d)) is not None:
            out.append(figure_html(fig, ""))
    rows = [dict(r, input=label) for label, d in digests
            for r in to_records(Roofline(d["rows"], d["device"], "", d["gpu_ns"], d["known_ns"]), TABLE_ROWS)
            if r["lost_ns"] is not None]
    if rows:
        frame = pd.DataFrame(rows).sort_values("lost_ns", ascending=False, kind="stable")
        out.append(table(frame[list(COLUMNS)].head(3 * TABLE_ROWS if many else None), COLUMNS))
    return out
