"""tracelab memory: where did the memory go?"""
from __future__ import annotations

from typing import Annotated

import typer

from tracelab.cli.commands.shared import FormatOpt, Paths, RankOpt, SchedulerOpt, StepOpt
from tracelab.cli.commands.topic import Command, checked_top, opening_own, own_digest

HELP = ("Where did the memory go? Per rank and step: allocated at the step's start and end, the peak and "
        "when it happened (the op and scope running then), reserved at the peak and what the caching allocator "
        "held back (reserved - allocated), the blocks live at the peak grouped by scope, op and module (top N "
        "by bytes; '(allocated before the trace)' is what was allocated before the profiler started: weights, "
        "optimizer state), and the allocator's own calls (cudaMalloc/cudaFree: count, CPU time, how many "
        "synchronised). Then the peak per rank, each input's peaks against the first input's, and what stands "
        "out (a rank >10% above the others, reserved >20% above allocated, allocator calls inside steps). "
        "torch.profiler(profile_memory=True) traces, nsys --cuda-memory-usage=true exports (CUDA's "
        "allocations: reserved only) and PyTorch memory snapshot pickles (read without running any code); "
        "proton records no memory. A trace without steps is one window.")


def options(
    paths: Paths,
    rank: RankOpt = None,
    step: StepOpt = None,
    top: Annotated[int, typer.Option(help="The N largest groups live at each peak, per scope, op and module (0: all).")] = 10,
    fmt: FormatOpt = "table",
    scheduler: SchedulerOpt = None,
) -> None:
    """The command's options (its help: HELP)."""


def opening(fmt: str, top: int | None, **_) -> dict:
    from .memory import RankMemoryDigest

    return opening_own("memory", RankMemoryDigest(top), fmt)


def analyse(session, top: int | None, **_):
    """The peaks of every traced run and memory snapshot, side by side."""
    from tracelab.ingest.session import SNAPSHOT, TRACES

    from .across import combine
    from .memory import RankMemoryDigest

    key = own_digest("memory", RankMemoryDigest(top))
    runs = session.usable("memory", (TRACES, SNAPSHOT))  # what it cannot read: one note each
    return combine([(r.name, {p.rank: p.summary[key] for p in r.profiles}) for r in runs])


def render(rendered_as, memory, top: int | None, **_):
    return rendered_as(memory, top)


COMMAND = Command(options, analyse, render, "memory.memory_text:MEMORY_RENDERERS",
                  check=checked_top, opening=opening, findings="memory", help=HELP)
