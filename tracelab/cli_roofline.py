"""`tracelab roofline`: registered on the app of tracelab/cli.py, which imports this module."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from .cli import Paths, RankOpt, _check_choice, _emit, _load, _top, app
from .errors import UsageError

DeviceOpt = Annotated[Optional[str], typer.Option(
    "--device", help="The device when the trace does not say or to override it: H100 (SXM), H100-PCIe, H100-NVL, "
                     "H200, A100, A100-40GB, A100-PCIe, B200.")]


@app.command()
def roofline(
    paths: Paths,
    by: Annotated[str, typer.Option(help="Group by kernel, scope or op_class.")] = "kernel",
    top: Annotated[int, typer.Option(help="Show the N rows losing most time (0: all).")] = 20,
    fmt: Annotated[str, typer.Option("--format", help="table, csv or json.")] = "table",
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
    from .reports.roofline import BY_CHOICES, roofline as analyse, with_scope_work
    from .reports.roofline_text import RENDERERS

    _check_choice("--by", by, BY_CHOICES)
    _check_choice("--format", fmt, tuple(RENDERERS))
    top = _top(top)
    given = _given_device(device, peak_tflops, peak_gb_s)
    results = []
    for p in _load(paths, rank):
        found, source = given if given[0] is not None else _trace_device(p.meta)
        events = with_scope_work(p.events, p.meta.get("scope_metrics"))
        results.append(analyse(events, found, by, source))
    _emit(RENDERERS[fmt](results, by, top))


def _given_device(name: str | None, tflops: float | None, gb_s: float | None):
    from .devices import by_option, custom

    if (tflops is None) != (gb_s is None):
        raise UsageError("--peak-tflops" if tflops is None else "--peak-gb-s",
                         "give --peak-tflops and --peak-gb-s together")
    for option, value in (("--peak-tflops", tflops), ("--peak-gb-s", gb_s)):
        if value is not None and not value > 0:
            raise UsageError(option, f"must be above 0, not {value}")
    base = by_option(name) if name else None
    if tflops is not None:
        return custom(tflops, gb_s, base), "option"
    return base, "option"


def _trace_device(meta: dict):
    """The device of the trace (its first GPU), else of the run.json beside it."""
    from .devices import detect

    for props in (meta.get("devices") or {}).values():
        if isinstance(props, dict) and (found := detect(props)):
            return found, "trace"
    run_json = Path(str(meta.get("path", ""))).parent / "run.json"
    try:
        devices = json.loads(run_json.read_text()).get("devices") or []
    except (OSError, ValueError, AttributeError):
        devices = []
    for props in devices if isinstance(devices, list) else []:
        if isinstance(props, dict) and (found := detect(props)):
            return found, "run.json"
    return None, "unknown"
