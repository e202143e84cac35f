"""tracelab idle: why was the GPU idle?"""
from __future__ import annotations

from typing import Annotated

import typer

from tracelab.cli.commands.shared import FormatOpt, Paths, RankOpt, SchedulerOpt, StepOpt
from tracelab.cli.commands.topic import Command, checked_top, opening_own, own_digest

HELP = ("Why was the GPU idle? Per step and rank: the GPU's idle time (gaps in the union of all streams' GPU "
        "work between the step's first GPU start and last GPU end, as in tracelab steps), split by cause. Each "
        "gap ends where the next GPU op starts; L is the start of that op's launch call. A trace without steps "
        "is one window, first GPU start to last GPU end.\n\n"
        "host: before L, the host had not yet begun to launch the op (and was in no sync call).\n\n"
        "sync: before L, the host was blocked in a synchronising call (cudaDeviceSynchronize, "
        "cudaStreamSynchronize, cudaEventSynchronize, a blocking cudaMemcpy, cudaFree).\n\n"
        "launch: from L, the launch call was still running when the GPU went idle (launch latency).\n\n"
        "dependency: from L, the op was queued before the GPU went idle, nothing on its own stream ran up "
        "to then, and the host had made its stream wait (cudaStreamWaitEvent, cuStreamWaitValue32, ...) since "
        "the stream's previous launch: it waited on another stream, an event or a peer; a table names the "
        "waiting stream, the stream and kernel that ended just before the gap, and the wait call (waits at "
        "collectives are inside the collective kernels: see tracelab steps).\n\n"
        "other: from L, queued behind its own stream's op that ended the busy time (the GPU's own gap between "
        "queued ops); queued on an idle GPU with no wait call in the trace (unexplained); or the op has no "
        "launch call in the trace.\n\n"
        "The causes add up to the idle time exactly. bound per step is what most of the step's critical path on "
        "the rank is made of (tracelab whatif): kernels (gpu), transfers and waits (communication), host time, "
        "launches and syncs (host); without a path, the largest of gpu (busy minus exposed communication), "
        "communication (exposed communication + dependency) and host (host + launch + sync). "
        "Then per rank: kernel launch statistics (kernels per step, launch-to-start delay median and p90, CPU "
        "time of the launch calls, kernels shorter than their own launch call), the CPU ops, ranges "
        "(record_function, NVTX) and OS calls covering the host-caused idle (top N), and a hint when steps "
        "are host-bound. torch.profiler and nsys traces; proton records no launches.")


def options(
    paths: Paths,
    rank: RankOpt = None,
    step: StepOpt = None,
    top: Annotated[int, typer.Option(help="The N host ops covering the most host-caused idle, per rank (0: all).")] = 10,
    fmt: FormatOpt = "table",
    scheduler: SchedulerOpt = None,
) -> None:
    """The command's options (its help: HELP)."""


def opening(fmt: str, top: int | None, **_) -> dict:
    from ..ranks import rank_digests
    from .idle import RankIdle

    opened = opening_own("idle", RankIdle(top), fmt)  # each step's bound: whatif's path_bounds
    return {**opened, "digests": {**opened["digests"], **rank_digests(("path_bounds",))}}


def analyse(session, top: int | None, **_) -> list:
    """Each run's ranks combined, labelled by run; its host-bound steps said for the user where the
    run measured its step without the profiler (idle.for_the_user)."""
    from ..unprofiled import measured_step
    from .idle import RankIdle, combine, for_the_user, labelled

    key = own_digest("idle", RankIdle(top))
    infos = session.run_infos
    parts = []
    for r in session.usable("idle"):
        measured = measured_step(r.info, infos)  # the run's own, else the same job's under backend none
        one = combine({p.rank: p.summary[key] for p in r.profiles}, {p.rank: p.summary["path_bounds"] for p in r.profiles})
        parts.append((r.name, for_the_user(one, measured.ns if measured else None)))
    return labelled(parts)


def render(rendered_as, parts: list, top: int | None, **_):
    return rendered_as(parts, top)


COMMAND = Command(options, analyse, render, "idle.idle_text:IDLE_RENDERERS",
                  check=checked_top, opening=opening, findings="idle", help=HELP)
