"""tracelab roofline: was the GPU time well spent?"""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from tracelab.cli.commands.shared import DeviceOpt, FormatOpt, Paths, RankOpt, _check_choice, _top
from tracelab.cli.commands.topic import Command


def options(
    paths: Paths,
    by: Annotated[str, typer.Option(help="Group by kernel, scope or op_class.")] = "kernel",
    top: Annotated[int, typer.Option(help="Show the N rows losing most time (0: all).")] = 20,
    fmt: FormatOpt = "table",
    rank: RankOpt = None,
    device: DeviceOpt = None,
    peak_tflops: Annotated[Optional[float], typer.Option(help="Peak TFLOP/s (every dtype), with --peak-gb-s.")] = None,
    peak_gb_s: Annotated[Optional[float], typer.Option(help="Peak memory bandwidth in GB/s, with --peak-tflops.")] = None,
) -> None:
    """Was the GPU time well spent? Per kernel / scope / op class: time, FLOPs and bytes from
    the trace itself (torch.profiler with record_shapes: the shapes of the aten op that launched
    each kernel; proton: its flops8/16/32/64 and bytes metrics; copies and fills: their sizes),
    achieved TFLOP/s and GB/s, FLOP/byte, compute- or memory-bound against the device's ridge point,
    the share of the roofline reached and the time lost beyond it (lost_ns), sorted by lost time.
    Kernels whose work the trace does not give (most Inductor/Triton kernels without proton
    metadata; nsys without NVTX shapes) are unknown, never zero; the share of GPU time with known
    work is printed. The device comes from the trace (Kineto deviceProperties, nsys, proton's
    device info, a run folder's run.json), else --device; peaks are datasheet dense figures."""


def check(by: str, top: int, device: str | None, peak_tflops: float | None, peak_gb_s: float | None,
          **asked) -> dict:
    """The options checked; `given`: the device and its source from --device / --peak-*, else (None, ...)."""
    from tracelab.core.devices import given_device

    from .roofline import BY_CHOICES

    _check_choice("--by", by, BY_CHOICES)
    return {**asked, "by": by, "top": _top(top), "given": given_device(device, peak_tflops, peak_gb_s)}


def opening(**_) -> dict:
    return {"keep_events": True, "digests": ()}  # each kernel's shapes and metrics: the events themselves


def analyse(session, by: str, given: tuple, **_) -> list:
    """A Roofline per rank; `run` names its run where there are several."""
    from dataclasses import replace

    from tracelab.ingest.runfolder import meta_device

    from .roofline import roofline, with_scope_work

    runs = session.usable("roofline")
    results = []
    for r in runs:
        for p in r.profiles:
            found, source = given if given[0] is not None else meta_device(p.meta)
            # proton's scope metrics belong to scopes: spread over kernels they would give every kernel the same rate
            events = with_scope_work(p.events, p.meta.scope_metrics) if by == "scope" else p.events
            results.append(replace(roofline(events, found, by, source), run=r.name if len(runs) > 1 else None))
    return results


def render(rendered_as, results: list, by: str, top: int | None, **_):
    return rendered_as(results, by, top)


COMMAND = Command(options, analyse, render, "roofline.roofline_text:RENDERERS", check=check, opening=opening, findings="roofline")
