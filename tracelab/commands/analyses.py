"""Commands of one analysis each: breakdown, roofline, idle."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from .common import Paths, RankOpt, StepOpt, SchedulerOpt, DeviceOpt, _options, _load, _emit, _findings, _top, _check_choice


def breakdown(
    paths: Paths,
    by: Annotated[str, typer.Option(help="Group by kernel (canonical name), op_class, scope, step or "
                                                    "module_type (a compiled run's modules, layer indices as *).")] = "kernel",
    top: Annotated[int, typer.Option(help="Show the N largest groups per rank, the rest as one row (0: all).")] = 15,
    fmt: Annotated[str, typer.Option("--format", help="table, csv or json.")] = "table",
    rank: RankOpt = None,
    step: StepOpt = None,
    scheduler: SchedulerOpt = None,
) -> None:
    """Per rank: GPU time, share, count and mean per kernel / op class / scope,
    headed by the rank's kernel and memcpy time and, where timestamps exist, busy span and idle share."""
    from ..loading import events
    from ..reports.breakdown.breakdown import BY_CHOICES, breakdown as analyse, per_rank, stacked, summary, top_rows
    from ..reports.session import FINDINGS, rank_digests
    from ..reports.text import BREAKDOWN_RENDERERS

    _check_choice("--by", by, BY_CHOICES)
    _check_choice("--format", fmt, tuple(BREAKDOWN_RENDERERS))
    top = _top(top)
    options = _options(step, scheduler)
    if rank is not None:  # one rank picked out of the inputs: its events
        profiles = _load(paths, rank, options=options)
        df = events(profiles)
        _emit(BREAKDOWN_RENDERERS[fmt](summary(df), analyse(df, by=by, top=top), by))
        return _findings(fmt, paths, profiles)
    # each rank's tables made where it was parsed; its events never reach this process
    findings = rank_digests(FINDINGS) if fmt == "table" else {}  # only the table ends on the findings
    profiles = _load(paths, reduce={**per_rank(by), **findings}, keep_events=False, options=options)
    table = top_rows(stacked(profiles, "breakdown"), by, top)  # the top N over all ranks' totals
    _emit(BREAKDOWN_RENDERERS[fmt](stacked(profiles, "summary"), table, by))
    _findings(fmt, paths, profiles)



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
    from ..devices import given_device, meta_device
    from ..reports.roofline.roofline import BY_CHOICES, roofline as analyse, with_scope_work
    from ..reports.roofline.roofline_text import RENDERERS

    _check_choice("--by", by, BY_CHOICES)
    _check_choice("--format", fmt, tuple(RENDERERS))
    top = _top(top)
    given = given_device(device, peak_tflops, peak_gb_s)
    results = []
    for p in _load(paths, rank):
        found, source = given if given[0] is not None else meta_device(p.meta)
        # proton's scope metrics belong to scopes: spread over kernels they would give every kernel the same rate
        events = with_scope_work(p.events, p.meta.get("scope_metrics")) if by == "scope" else p.events
        results.append(analyse(events, found, by, source))
    _emit(RENDERERS[fmt](results, by, top))



IDLE_HELP = ("Why was the GPU idle? Per step and rank: the GPU's idle time (gaps in the union of all streams' GPU "
             "work between the step's first GPU start and last GPU end, as in tracelab steps), split by cause. Each "
             "gap ends where the next GPU op starts; L is the start of that op's launch call. A trace without steps "
             "is one window, first GPU start to last GPU end.\n\n"
             "host: before L, the host had not yet begun to launch the op (and was in no sync call).\n\n"
             "sync: before L, the host was blocked in a synchronising call (cudaDeviceSynchronize, "
             "cudaStreamSynchronize, cudaEventSynchronize, a blocking cudaMemcpy, cudaFree).\n\n"
             "launch: from L, the launch call was still running when the GPU went idle (launch latency).\n\n"
             "dependency: from L, the op was queued before the GPU went idle and nothing on its own stream ran up "
             "to then: it waited on another stream, an event or a peer (waits at collectives are inside the "
             "collective kernels: see tracelab steps).\n\n"
             "other: from L, queued behind its own stream's op that ended the busy time (the GPU's own gap between "
             "queued ops); or the op has no launch call in the trace.\n\n"
             "The causes add up to the idle time exactly. bound per step is the largest of gpu (busy minus exposed "
             "communication), communication (exposed communication + dependency) and host (host + launch + sync). "
             "Then per rank: kernel launch statistics (kernels per step, launch-to-start delay median and p90, CPU "
             "time of the launch calls, kernels shorter than their own launch call), the CPU ops, ranges "
             "(record_function, NVTX) and OS calls covering the host-caused idle (top N), and a hint when steps "
             "are host-bound. torch.profiler and nsys traces; proton records no launches.")



def idle(
    paths: Paths,
    rank: RankOpt = None,
    step: StepOpt = None,
    top: Annotated[int, typer.Option(help="The N host ops covering the most host-caused idle, per rank (0: all).")] = 10,
    fmt: Annotated[str, typer.Option("--format", help="table, csv or json.")] = "table",
    scheduler: SchedulerOpt = None,
) -> None:
    from ..reports.idle.idle import RankIdle, combine, labelled
    from ..reports.idle.idle_text import IDLE_RENDERERS

    _check_choice("--format", fmt, tuple(IDLE_RENDERERS))
    top = _top(top)
    options = _options(step, scheduler)
    parts = []  # each input on its own: two runs may both hold rank 0
    for path in paths:
        profiles = _load([path], rank, reduce={"idle": RankIdle(top)}, keep_events=False,
                         options=options)  # reduced in the workers
        parts.append((path, combine({p.rank: p.summary["idle"] for p in profiles})))
    _emit(IDLE_RENDERERS[fmt](labelled(parts), top))

