"""tracelab whatif: what should I fix first, and how much faster will the step be?"""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from tracelab.cli.commands.shared import FormatOpt, Paths, RankOpt, SchedulerOpt, StepOpt
from tracelab.cli.commands.topic import Command, opening_own, own_digest

HELP = ("What should I fix first, and how much faster will the step be? Builds a dependency graph of every "
        "rank (launch calls, syncs, GPU ops per stream; CPU ops and gloo collectives in CPU-only traces; a "
        "collective's transfer starts when its last rank arrives), replays it, and prints per step the critical "
        "path's composition (compute, comm, launch, host, sync, wait, other) and the ranks it runs through; then "
        "per scenario the predicted step time and the saving, each scenario alone and all together (one joint "
        "replay, never a sum). Scenarios: no-host-gaps, cuda-graph, no-host-stalls[@RANK], remove:REGEX[@RANK], "
        "scale:REGEX=F, autocast:bf16=F or =@FILE (per-shape factors: tracelab factors RUN --out FILE), compile (eager -> "
        "torch.compile: the ops between matrix products, attention and collectives fused) and compile:reduce-overhead "
        "(the same, the host off the path), roofline, balance (each rank's work per step at the lower median rank's: "
        "the late rank's extra work removed), balance:share (each rank's work between two collectives at the ranks' "
        "mean: that work moved onto the others), overlap-comm, busbw:GBPS; without --scenario the ones that apply of no-host-gaps, "
        "no-host-stalls, roofline, balance and overlap-comm. A step the unchanged replay does not reproduce within 2% claims no saving. "
        "torch.profiler and nsys traces; proton has no timeline.")


def options(
    paths: Paths,
    rank: RankOpt = None,
    step: StepOpt = None,
    scenario: Annotated[Optional[list[str]], typer.Option("--scenario", help="A scenario (repeat for several).")] = None,
    fmt: FormatOpt = "table",
    scheduler: SchedulerOpt = None,
) -> None:
    """The command's options (its help: HELP)."""


def check(scenario: list[str] | None, **asked) -> dict:
    from .scenarios import parse

    for spec in scenario or ():
        parse(spec)
    return {**asked, "scenario": scenario or None}


def opening(fmt: str, **_) -> dict:
    from .nodes import RankGraphReduce

    return opening_own("whatif", RankGraphReduce(), fmt)


def analyse(session, scenario: list[str] | None, **_) -> list[tuple]:
    """(run name, WhatIf) of each run, replayed on its own."""
    from .analyse import whatif
    from .nodes import RankGraphReduce
    from ..unprofiled import measured_step

    key = own_digest("whatif", RankGraphReduce())
    parts = []
    infos = session.run_infos
    for r in session.usable("whatif"):
        graphs = {}
        for p in r.profiles:
            graphs[p.rank] = p.summary[key]
            graphs[p.rank].rank = p.rank
        measured = measured_step(r.info, infos)  # the run's own, else the same job's under backend none
        parts.append((r.name, whatif(graphs, {p.rank: p.meta.trace_start_epoch_ns for p in r.profiles}, scenario,
                                     unprofiled_ns=measured.ns if measured else None,
                                     unprofiled_run=measured.under_none if measured else None,
                                     unprofiled_regions=measured.regions if measured else None)))
    return parts


def render(rendered_as, parts: list[tuple], **_):
    return rendered_as(parts)


# it ends on every topic's findings: they are ranked by their what-if saving
COMMAND = Command(options, analyse, render, "whatif.render:WHATIF_RENDERERS", check=check, opening=opening, help=HELP)
