"""Commands of one analysis each: breakdown, roofline, idle, memory."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from .common import (FORMAT_HELP, Paths, RankOpt, StepOpt, SchedulerOpt, DeviceOpt, _options, _emit, _top, _check_choice,
                     end_on_findings, findings_digests, open_session)


def breakdown(
    paths: Paths,
    by: Annotated[str, typer.Option(help="Group by kernel (canonical name), op_class, scope, step or "
                                                    "module_type (a compiled run's modules, layer indices as *).")] = "kernel",
    top: Annotated[int, typer.Option(help="Show the N largest groups per rank, the rest as one row (0: all).")] = 15,
    fmt: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "table",
    rank: RankOpt = None,
    step: StepOpt = None,
    scheduler: SchedulerOpt = None,
) -> None:
    """Per rank: GPU time, share, count and mean per kernel / op class / scope,
    headed by the rank's kernel and memcpy time and, where timestamps exist, busy span and idle share."""
    from ..loading import events
    from ..reports.breakdown.breakdown import BY_CHOICES, breakdown as analyse, per_rank, stacked, summary, top_rows
    from ..reports.text import BREAKDOWN_RENDERERS

    _check_choice("--by", by, BY_CHOICES)
    _check_choice("--format", fmt, tuple(BREAKDOWN_RENDERERS))
    top = _top(top)
    options = _options(step, scheduler)
    if rank is not None:  # one rank picked out of each run: its events
        session = open_session(paths, options, rank=rank, keep_events=True, digests=())
        frames = [(r.name, summary(df), analyse(df, by=by, top=top)) for r in session.usable("breakdown")
                  for df in [events(r.profiles)]]
    else:  # each rank's tables made where it was parsed; its events never reach this process
        session = open_session(paths, options, digests={**per_rank(by), **findings_digests(fmt)})
        frames = [(r.name, stacked(r.profiles, "summary"), top_rows(stacked(r.profiles, "breakdown"), by, top))
                  for r in session.usable("breakdown")]  # top N over its ranks
    _emit(BREAKDOWN_RENDERERS[fmt](*_with_input(frames), by))
    end_on_findings(fmt, session)


def _with_input(frames: list[tuple]) -> tuple:
    """(summary, table) of one job; of several runs, stacked with an `input` column first."""
    import pandas as pd

    if len(frames) == 1:
        return frames[0][1:]
    return tuple(pd.concat([f[k].assign(input=f[0])[["input", *f[k].columns]] for f in frames], ignore_index=True)
                 for k in (1, 2))



def roofline(
    paths: Paths,
    by: Annotated[str, typer.Option(help="Group by kernel, scope or op_class.")] = "kernel",
    top: Annotated[int, typer.Option(help="Show the N rows losing most time (0: all).")] = 20,
    fmt: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "table",
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
    from dataclasses import replace

    from ..devices import given_device, meta_device
    from ..reports.roofline.roofline import BY_CHOICES, roofline as analyse, with_scope_work
    from ..reports.roofline.roofline_text import RENDERERS

    _check_choice("--by", by, BY_CHOICES)
    _check_choice("--format", fmt, tuple(RENDERERS))
    top = _top(top)
    given = given_device(device, peak_tflops, peak_gb_s)
    session = open_session(paths, rank=rank, keep_events=True, digests=())
    runs = session.usable("roofline")
    results = []
    for r in runs:
        for p in r.profiles:
            found, source = given if given[0] is not None else meta_device(p.meta)
            # proton's scope metrics belong to scopes: spread over kernels they would give every kernel the same rate
            events = with_scope_work(p.events, p.meta.scope_metrics) if by == "scope" else p.events
            results.append(replace(analyse(events, found, by, source), run=r.name if len(runs) > 1 else None))
    _emit(RENDERERS[fmt](results, by, top))
    end_on_findings(fmt, session, "roofline")



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
             "The causes add up to the idle time exactly. bound per step is what most of the step's critical path on "
             "the rank is made of (tracelab whatif): kernels (gpu), transfers and waits (communication), host time, "
             "launches and syncs (host); without a path, the largest of gpu (busy minus exposed communication), "
             "communication (exposed communication + dependency) and host (host + launch + sync). "
             "Then per rank: kernel launch statistics (kernels per step, launch-to-start delay median and p90, CPU "
             "time of the launch calls, kernels shorter than their own launch call), the CPU ops, ranges "
             "(record_function, NVTX) and OS calls covering the host-caused idle (top N), and a hint when steps "
             "are host-bound. torch.profiler and nsys traces; proton records no launches.")



def idle(
    paths: Paths,
    rank: RankOpt = None,
    step: StepOpt = None,
    top: Annotated[int, typer.Option(help="The N host ops covering the most host-caused idle, per rank (0: all).")] = 10,
    fmt: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "table",
    scheduler: SchedulerOpt = None,
) -> None:
    from ..reports.idle.idle import RankIdle, combine, labelled
    from ..reports.idle.idle_text import IDLE_RENDERERS
    from ..reports.session import digest_key, rank_digests

    _check_choice("--format", fmt, tuple(IDLE_RENDERERS))
    top = _top(top)
    key = digest_key("idle", RankIdle(top))
    session = open_session(paths, _options(step, scheduler), rank=rank,  # each step's bound: whatif's path_bounds
                           digests={key: RankIdle(top), **rank_digests(("path_bounds",)), **findings_digests(fmt)})
    parts = [(r.name, combine({p.rank: p.summary[key] for p in r.profiles},
                              {p.rank: p.summary["path_bounds"] for p in r.profiles})) for r in session.usable("idle")]
    _emit(IDLE_RENDERERS[fmt](labelled(parts), top))
    end_on_findings(fmt, session, "idle")


WHATIF_HELP = ("What should I fix first, and how much faster will the step be? Builds a dependency graph of every "
               "rank (launch calls, syncs, GPU ops per stream; CPU ops and gloo collectives in CPU-only traces; a "
               "collective's transfer starts when its last rank arrives), replays it, and prints per step the critical "
               "path's composition (compute, comm, launch, host, sync, wait, other) and the ranks it runs through; then "
               "per scenario the predicted step time and the saving, each scenario alone and all together (one joint "
               "replay, never a sum). Scenarios: no-host-gaps, remove:REGEX[@RANK], scale:REGEX=F, roofline, balance, "
               "overlap-comm, busbw:GBPS; without --scenario the ones that apply of no-host-gaps, roofline, balance "
               "and overlap-comm. A step the unchanged replay does not reproduce within 2% claims no saving. "
               "torch.profiler and nsys traces; proton has no timeline.")


def whatif(
    paths: Paths,
    rank: RankOpt = None,
    step: StepOpt = None,
    scenario: Annotated[Optional[list[str]], typer.Option("--scenario", help="A scenario (repeat for several).")] = None,
    fmt: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "table",
    scheduler: SchedulerOpt = None,
) -> None:
    from ..reports.session import digest_key
    from ..reports.whatif import whatif as replay_whatif
    from ..reports.whatif.nodes import RankGraphReduce
    from ..reports.whatif.render import WHATIF_RENDERERS
    from ..reports.whatif.scenarios import parse

    _check_choice("--format", fmt, tuple(WHATIF_RENDERERS))
    for spec in scenario or ():
        parse(spec)
    key = digest_key("whatif", RankGraphReduce())
    session = open_session(paths, _options(step, scheduler), rank=rank,
                           digests={key: RankGraphReduce(), **findings_digests(fmt)})
    parts = []
    for r in session.usable("whatif"):  # each run replayed on its own
        graphs = {}
        for p in r.profiles:
            graphs[p.rank] = p.summary[key]
            graphs[p.rank].rank = p.rank
        parts.append((r.name, replay_whatif(graphs, {p.rank: p.meta.trace_start_epoch_ns for p in r.profiles},
                                            scenario or None)))
    _emit(WHATIF_RENDERERS[fmt](parts))
    end_on_findings(fmt, session)  # every topic's: they are ranked by their what-if saving


MEMORY_HELP = ("Where did the memory go? Per rank and step: allocated at the step's start and end, the peak and "
               "when it happened (the op and scope running then), reserved at the peak and what the caching allocator "
               "held back (reserved - allocated), the blocks live at the peak grouped by scope, op and module (top N "
               "by bytes; '(allocated before the trace)' is what was allocated before the profiler started: weights, "
               "optimizer state), and the allocator's own calls (cudaMalloc/cudaFree: count, CPU time, how many "
               "synchronised). Then the peak per rank, each input's peaks against the first input's, and what stands "
               "out (a rank >10% above the others, reserved >20% above allocated, allocator calls inside steps). "
               "torch.profiler(profile_memory=True) traces, nsys --cuda-memory-usage=true exports (CUDA's "
               "allocations: reserved only) and PyTorch memory snapshot pickles (read without running any code); "
               "proton records no memory. A trace without steps is one window.")


def memory(
    paths: Paths,
    rank: RankOpt = None,
    step: StepOpt = None,
    top: Annotated[int, typer.Option(help="The N largest groups live at each peak, per scope, op and module (0: all).")] = 10,
    fmt: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "table",
    scheduler: SchedulerOpt = None,
) -> None:
    from ..reports.memory import RankMemoryDigest, combine
    from ..reports.memory.memory_text import MEMORY_RENDERERS
    from ..reports.session import digest_key
    from ..session import SNAPSHOT, TRACES

    _check_choice("--format", fmt, tuple(MEMORY_RENDERERS))
    top = _top(top)
    key = digest_key("memory", RankMemoryDigest(top))
    session = open_session(paths, _options(step, scheduler), rank=rank,
                           digests={key: RankMemoryDigest(top), **findings_digests(fmt)})
    parts = [(r.name, {p.rank: p.summary[key] for p in r.profiles}) for r in session.usable("memory", (TRACES, SNAPSHOT))]
    _emit(MEMORY_RENDERERS[fmt](combine(parts), top))
    end_on_findings(fmt, session, "memory")
