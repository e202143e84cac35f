"""Renderers of `tracelab roofline` (reports/roofline/roofline.py): a rich table, CSV, strict JSON."""
from __future__ import annotations

import json
import math

import pandas as pd
from rich.console import Group
from rich.table import Table
from rich.text import Text

from tracelab.core.devices import class_label

from ..csvout import csv_text
from ..fmt import rate
from .roofline import GB_S_HEADER, GB_S_NOTE, Roofline, to_records


def _num(x: float, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _rate(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else rate(x)


def device_line(r: Roofline) -> str:
    if r.device is None:
        return ("device: unknown (the trace names none that tracelab knows): rates shown, no roofline; give --device H100|H200|A100|"
                "B200|... or --peak-tflops and --peak-gb-s")
    peaks = ", ".join(f"{class_label(k)} {v:,.1f}" for k, v in r.device.tflop_s.items())
    return (f"device: {r.device.name} (from the {r.device_from}), peak TFLOP/s {peaks}; HBM {r.device.hbm_gb_s:,.0f} GB/s"
            f" [{r.device.source}]\n{GB_S_NOTE}")


def coverage_line(r: Roofline) -> str:
    who = f"{r.run + ': ' if r.run else ''}rank {'-' if r.rank is None else r.rank}"
    if not r.gpu_ns:
        return f"{who}: no GPU kernel, memcpy or memset in this trace: nothing to place on a roofline"
    share = r.known_ns / r.gpu_ns
    return (f"{who}: work known for "
            f"{r.known_ns / 1e6:,.3f} ms of {r.gpu_ns / 1e6:,.3f} ms GPU time ({_num(100 * share, '.1f')}%); "
            "the rest (kernels whose shapes or metrics the trace lacks) is unknown, not zero"
            + (f"; {r.missing_hint}" if r.missing_hint and share < 0.95 else ""))


def tables(results: list[Roofline], by: str, top: int | None) -> Group:
    parts: list = []
    for r in results:
        t = Table(title=Text(device_line(r) + "\n" + coverage_line(r)), title_justify="left", show_edge=False)
        for col in ("time (ms)", "count", "TFLOP/s", GB_S_HEADER, "FLOP/B", "bound", "of roof", "lost (ms)"):
            t.add_column(col, justify="right")
        t.add_column(by)
        for row in to_records(r, top):
            t.add_row(_num(row["dur_ns"] / 1e6, ",.3f"), f"{row['count']:,}", _num(row["tflop_s"], ",.1f"),
                      _rate(row["gb_s"]), _num(row["intensity"], ",.1f"), row["bound"],
                      _num(None if row["roofline_frac"] is None else 100 * row["roofline_frac"], ".1f") +
                      ("%" if row["roofline_frac"] is not None else ""),
                      _num(None if row["lost_ns"] is None else row["lost_ns"] / 1e6, ",.3f"), Text(str(row["key"])))
        parts.append(t)
    return Group(*parts)


def csv(results: list[Roofline], by: str, top: int | None) -> str:
    frames = [pd.DataFrame(to_records(r, top)) for r in results]
    frames = [f.assign(input=r.run)[["input", *f.columns]] if r.run else f for f, r in zip(frames, results)]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return csv_text(frame.rename(columns={"key": by}))


def as_json(results: list[Roofline], by: str, top: int | None) -> str:
    devices = {}
    for r in results:
        devices[r.device.name if r.device else None] = r
    first = results[0] if results else None
    device = None if first is None or first.device is None else {**first.device.to_json(), "source": first.device_from}
    doc = {"by": by, "device": device if len(devices) == 1 else
           [{"rank": r.rank,
             **(r.device.to_json() if r.device else {"name": None}), "source": r.device_from} for r in results],
           "coverage": [{**({"input": r.run} if r.run else {}), "rank": r.rank, "gpu_ns": r.gpu_ns,
                         "known_ns": r.known_ns} for r in results],
           "rows": [{**({"input": r.run} if r.run else {}), **row, by: row.pop("key")}
                    for r in results for row in to_records(r, top)]}
    return json.dumps(doc, indent=1, allow_nan=False)


RENDERERS = {"table": tables, "csv": csv, "json": as_json}
