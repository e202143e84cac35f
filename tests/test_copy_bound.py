"""A GPU whose span is mostly copies is paced by the transfers: said first, with the copies' time
computed from the SQLite rows; a GPU its kernels fill, and a trace without timestamps, say nothing."""
from __future__ import annotations

import gzip
import json
import sqlite3

from tracelab.ingest.session import Session
from tracelab.reports.findings.findings_copy import COPY_BOUND_SHARE

from helpers import DATA

CUT = DATA / "public" / "nsys-ai" / "h100_2gpu_1s_first250ms.sqlite"


def _per_device_ns(path) -> dict[int, tuple[float, float, float]]:
    """Per device: (copies' summed time, kernels' summed time, span of all GPU activity), from the rows."""
    with sqlite3.connect(path) as db:
        rows = {t: db.execute(f"select deviceId, start, end from {t}").fetchall()
                for t in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMSET")}
    out = {}
    for dev in {d for r in rows.values() for d, _, _ in r}:
        mine = {t: [(s, e) for d, s, e in r if d == dev] for t, r in rows.items()}
        every = [x for r in mine.values() for x in r]
        out[dev] = (float(sum(e - s for s, e in mine["CUPTI_ACTIVITY_KIND_MEMCPY"])),
                    float(sum(e - s for s, e in mine["CUPTI_ACTIVITY_KIND_KERNEL"])),
                    float(max(e for _, e in every) - min(s for s, _ in every)))
    return out


def test_a_gpu_paced_by_its_copies_is_said_first() -> None:
    raw = _per_device_ns(CUT)
    copy_ns, kernel_ns, span_ns = max(raw.values())
    assert copy_ns > COPY_BOUND_SHARE * span_ns and copy_ns > kernel_ns
    found = Session.open([str(CUT)]).findings()
    assert found[0].code == "copy_bound"
    v = found[0].values
    assert abs(v["copy_ns"] - copy_ns) < 1e3 and abs(v["kernel_ns"] - kernel_ns) < 1e3
    assert abs(v["span_ns"] - span_ns) / span_ns < 0.01
    assert f"copies {100 * copy_ns / span_ns:.0f}% of its" in found[0].text


def test_a_gpu_its_kernels_fill_and_an_untimed_trace_say_nothing_of_copies() -> None:
    events = json.load(gzip.open(DATA / "decode-1gpu-torch" / "rank0.pt.trace.json.gz"))["traceEvents"]
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    copy_us = sum(e["dur"] for e in gpu if e["cat"] == "gpu_memcpy")
    span_us = max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)
    assert copy_us < COPY_BOUND_SHARE * span_us
    assert not [f for f in Session.open([str(DATA / "decode-1gpu-torch")]).findings() if f.code == "copy_bound"]
    assert not [f for f in Session.open([str(DATA / "decode-1gpu-proton")]).findings() if f.code == "copy_bound"]
