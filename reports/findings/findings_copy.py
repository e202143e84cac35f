"""A source of findings (reports/findings/findings.py's SOURCES): a GPU whose span is mostly copies.

Copies (memcpy: host to device, device to host, device to device) take the GPU's copy engines, not
its SMs: a rank whose copies take most of its span while its kernels take less is paced by the
transfers, which no kernel, launch or communication fix shortens. Read from the rank's kernel sums
(compare's `sums` digest: time per kind and name) and its timeline's span (Evidence.per_input);
below its threshold it says nothing."""
from __future__ import annotations

import pandas as pd

from ..fmt import duration
from .finding import SECTIONS, Finding, Said, fix_writer

COPY_BOUND_SHARE = 0.5  # copies over this share of the GPU's span, and more than its kernels: paced by the copies
FIX_TEXT = ("move less data per step (keep it on the GPU, a smaller dtype) or overlap the copies with compute "
            "(pinned memory and non_blocking=True on a side stream)")


def copy_findings(ev) -> list:
    """Per run, the rank whose copies take the most time, where they exceed COPY_BOUND_SHARE of its
    span and its kernels' time: the copies by name (their time and count) against its span."""
    df = ev.per_input
    if "span_ns" not in df:
        return []
    spans = dict(zip(df["label"], df["span_ns"]))
    found = []
    for group in dict.fromkeys(i.group for i in ev.inputs):
        ranks = [c for i in ev.inputs if i.group == group and (c := _copies(i, spans.get(i.label))) is not None]
        bound = [c for c in ranks if c["copy_ns"] > COPY_BOUND_SHARE * c["span_ns"] and c["copy_ns"] > c["kernel_ns"]]
        if bound:
            found.append(_finding(group, max(bound, key=lambda c: c["copy_ns"]), len({i.group for i in ev.inputs}) > 1))
    return found


def _copies(i, span_ns: float | None) -> dict | None:
    """One input's copy time by name, kernel time and span (ns); None where it has no span."""
    sums = i.digest("sums")
    if sums is None or not len(sums) or span_ns is None or not span_ns > 0:
        return None
    by_kind = sums.groupby("kind", observed=True)["dur_ns"].sum()
    copies = sums[sums["kind"] == "memcpy"].groupby("kernel", observed=True)[["dur_ns", "count"]].sum()
    copies = copies[copies["dur_ns"] > 0].sort_values("dur_ns", ascending=False)
    return {"rank": i.rank, "span_ns": float(span_ns), "copy_ns": float(by_kind.get("memcpy", 0.0)),
            "kernel_ns": float(by_kind.get("kernel", 0.0)), "copies": copies}


def _finding(group: str, c: dict, several: bool) -> Finding:
    copies: pd.DataFrame = c["copies"]
    named = ", ".join(f"{name} {duration(r['dur_ns'])} over {int(r['count']):,} copies"
                      for name, r in copies.head(2).iterrows())
    write = fix_writer(f"{group + ': ' if several and group else ''}rank {c['rank']}'s GPU copies "
                       f"{100 * c['copy_ns'] / c['span_ns']:.0f}% of its {duration(c['span_ns'])} span ({named}) and "
                       f"runs kernels {duration(c['kernel_ns'])}: the transfers pace it; ", FIX_TEXT)
    values = {"run": group or None, "rank": int(c["rank"]), "copy_ns": c["copy_ns"], "kernel_ns": c["kernel_ns"],
              "span_ns": c["span_ns"], "copies": {str(k): float(v) for k, v in copies["dur_ns"].head(4).items()}}
    return Finding(write(Said()), int(c["copy_ns"]), SECTIONS["totals"], {"fix": FIX_TEXT}, "copy_bound", values, write)
