"""Renderers of `tracelab memory` (reports/memory/across.Memory): terminal tables, CSV, JSON
(strict: null, never NaN). Units converted here only."""
from __future__ import annotations

import pandas as pd
from rich.console import Group
from rich.table import Table
from rich.text import Text

from tracelab.core.note import Note

from ..csvout import csv_text
from ..jsonout import dumps, strict
from ..fmt import binary_size, clipped, ms_cell
from ..many_steps import largest_steps
from .across import Memory

JSON_STEP_KEYS = ["rank", "step", "allocated_start_bytes", "allocated_end_bytes", "peak_allocated_bytes",
                  "peak_at_ns", "peak_during", "reserved_bytes", "held_back_bytes", "alloc_calls", "alloc_ns"]
MANY_RANKS = 16  # above this, the peak table shows the spread and the outliers


def _size(n) -> str:
    return "-" if n is None or pd.isna(n) else binary_size(float(n))


def _int(n) -> str:
    return "-" if n is None or pd.isna(n) else f"{int(n):,}"


def _step(s) -> str:
    return "whole trace" if s is None or pd.isna(s) else str(s)


def _table(title: str, heads: list[str]) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False)
    for h in heads:
        t.add_column(h, justify="left" if h in ("input", "peak during", "by", "name") else "right")
    return t


def steps_table(m: Memory, several: bool, shown: pd.DataFrame) -> Table:
    """`shown`: the steps of m.steps the table holds (_shown_steps)."""
    t = _table("memory per step and rank (allocated at start/end, the peak, reserved and held back at the peak; "
               "allocator calls inside the step)",
               [*(["input"] if several else []), "step", "rank", "start", "end", "peak", "peak at (ms)", "peak during",
                "reserved", "held back", "alloc calls", "alloc (ms)", "sync"])
    for _, r in shown.iterrows():
        t.add_row(*([str(r["input"])] if several else []), _step(r["step"]), str(r["rank"]),
                  _size(r["allocated_start_bytes"]), _size(r["allocated_end_bytes"]), _size(r["peak_allocated_bytes"]),
                  ms_cell(r["peak_at_ns"]), clipped(str(r["peak_during"]), 60), _size(r["reserved_bytes"]),
                  _size(r["held_back_bytes"]), _int(r["alloc_calls"]),
                  ms_cell(r["alloc_ns"]), _int(r["alloc_sync_calls"]))
    return t


def _shown_steps(m: Memory) -> tuple[pd.DataFrame, str]:
    """The steps of the highest peaks where there are many (reports/many_steps.py)."""
    return largest_steps(m.steps, "peak_allocated_bytes", "peak allocated", _size)


def top_table(m: Memory, several: bool) -> Table:
    """What was live at each rank's highest peak."""
    t = _table("live at each rank's highest peak, by scope, op and module (allocated in the trace and not yet freed)",
               [*(["input"] if several else []), "rank", "step", "by", "name", "size"])
    for _, p in m.peaks.iterrows():
        for _, r in _live(m, p).iterrows():
            t.add_row(*([str(r["input"])] if several else []), str(r["rank"]), _step(r["step"]), r["by"],
                      clipped(str(r["name"]), 80), _size(r["bytes"]))
    return t


def peaks_table(m: Memory, several: bool) -> Table:
    t = _table("peak per rank", [*(["input"] if several else []), "rank", "peak allocated", "reserved there", "step"])
    shown = m.peaks if m.peaks["rank"].nunique() <= MANY_RANKS else _outliers(m.peaks)
    for _, r in shown.iterrows():
        t.add_row(*([str(r["input"])] if several else []), str(r["rank"]), _size(r["peak_allocated_bytes"]),
                  _size(r["peak_reserved_bytes"]), _step(r["step"]))
    return t


def _outliers(peaks: pd.DataFrame) -> pd.DataFrame:
    level = peaks["peak_allocated_bytes"].astype("float64").fillna(peaks["peak_reserved_bytes"].astype("float64"))
    order = level.sort_values(ascending=False).index
    return peaks.loc[list(order[:8]) + list(order[-4:])].drop_duplicates()


def runs_table(m: Memory) -> Table:
    t = _table("peaks against the first input (same rank; allocated against allocated, reserved against reserved)",
               ["input", "rank", "of", "peak", "delta", "ratio"])
    for _, r in m.runs.iterrows():
        t.add_row(str(r["input"]), str(r["rank"]), r["of"] or "not comparable", _size(r["peak_bytes"]),
                  _size(r["delta_bytes"]),
                  "-" if pd.isna(r["ratio"]) else f"{r['ratio']:.3f}")
    return t


def render_table(m: Memory, top: int | None = None) -> Group:
    if not len(m.steps) and not len(m.peaks):  # no rank recorded memory: the notes say why, no empty tables
        return Group(*[Text(f"note: {n.text}") for n in m.notes or [Note("no_memory_in_inputs")]])
    several = m.steps["input"].nunique() > 1
    shown, line = _shown_steps(m)
    parts = [steps_table(m, several, shown), *([Text(line)] if line else []), Text(""), top_table(m, several),
             Text(""), peaks_table(m, several)]
    if len(m.runs):
        parts += [Text(""), runs_table(m)]
    parts += [Text(f"finding: {text}") for text, _, _ in m.found]
    parts += [Text(f"note: {n.text}") for n in m.notes]
    return Group(*parts)


def _live(m: Memory, r: pd.Series) -> pd.DataFrame:
    """The live-at-peak rows of one step row."""
    mine = m.top[(m.top["input"] == r["input"]) & (m.top["rank"] == r["rank"])]
    return mine[mine["step"].isna()] if pd.isna(r["step"]) else mine[mine["step"] == r["step"]]


def render_csv(m: Memory, top: int | None = None) -> str:
    """One CSV of the step rows, each with its live-at-peak groups as `by:name=bytes` joined by ';'."""
    out = m.steps.copy()
    out["top"] = [";".join(f"{b}:{n}={int(v)}" for b, n, v in zip(g["by"], g["name"], g["bytes"]))
                  for g in (_live(m, r) for _, r in m.steps.iterrows())]
    return csv_text(out)


def render_json(m: Memory, top: int | None = None) -> str:
    """{"steps": [{rank, step, ..., "top": [{by, name, bytes}]}], "notes": [...]} (notes only where
    there are some); with several inputs each row also names its `input`."""
    several = m.steps["input"].nunique() > 1
    rows = []
    for _, r in m.steps.iterrows():
        mine = _live(m, r)
        row = {**({"input": r["input"]} if several else {}), **{k: _value(k, r[k]) for k in JSON_STEP_KEYS}}
        row["top"] = [{"by": b, "name": n, "bytes": int(v)} for b, n, v in zip(mine["by"], mine["name"], mine["bytes"])]
        rows.append(row)
    return dumps({"steps": rows, **({"notes": [n.as_json() for n in m.notes]} if m.notes else {})})


def _value(key: str, value):
    """A step row's value as JSON: peak_during a string, every other one an integer or null."""
    value = strict(value)
    if key == "peak_during":
        return "" if value is None else str(value)
    return None if value is None else int(value)


MEMORY_RENDERERS = {"table": render_table, "csv": render_csv, "json": render_json}
