"""tracelab breakdown: per rank, where the GPU time went."""
from __future__ import annotations

from typing import Annotated

import typer

from tracelab.cli.commands.shared import (FormatOpt, Paths, RankOpt, SchedulerOpt, StepOpt, _check_choice, _top,
                                      findings_digests)
from tracelab.cli.commands.topic import Command

from .breakdown_text import BREAKDOWN_RENDERERS


def options(
    paths: Paths,
    by: Annotated[str, typer.Option(help="Group by kernel (canonical name), op_class, scope, step or "
                                         "module_type (a compiled run's modules, layer indices as *).")] = "kernel",
    top: Annotated[int, typer.Option(help="Show the N largest groups per rank, the rest as one row (0: all).")] = 15,
    fmt: FormatOpt = "table",
    rank: RankOpt = None,
    step: StepOpt = None,
    scheduler: SchedulerOpt = None,
) -> None:
    """Per rank: GPU time, share, count and mean per kernel / op class / scope,
    headed by the rank's kernel and memcpy time and, where timestamps exist, busy span and idle share."""


def check(by: str, top: int, **asked) -> dict:
    from .breakdown import BY_CHOICES

    _check_choice("--by", by, BY_CHOICES)
    return {**asked, "by": by, "top": _top(top)}


def opening(by: str, fmt: str, rank: int | None, **_) -> dict:
    """One rank picked out of each run: its events; else each rank's tables made where it was
    parsed (its events never reach this process)."""
    from .breakdown import per_rank

    if rank is not None:
        return {"keep_events": True, "digests": ()}
    return {"digests": {**per_rank(by), **findings_digests(fmt)}}


def analyse(session, by: str, top: int | None, rank: int | None, **_) -> list[tuple]:
    """(run name, summary, table) of each run: the top N over its ranks."""
    from tracelab.ingest.loading import events

    from .breakdown import breakdown, stacked, summary, top_rows

    runs = session.usable("breakdown")
    if rank is not None:
        return [(r.name, summary(df), breakdown(df, by=by, top=top)) for r in runs for df in [events(r.profiles)]]
    return [(r.name, stacked(r.profiles, "summary"), top_rows(stacked(r.profiles, "breakdown"), by, top)) for r in runs]


def render(frames: list[tuple], fmt: str, by: str, **_):
    return BREAKDOWN_RENDERERS[fmt](*_with_input(frames), by)


def _with_input(frames: list[tuple]) -> tuple:
    """(summary, table) of one job; of several runs, stacked with an `input` column first."""
    import pandas as pd

    if len(frames) == 1:
        return frames[0][1:]
    return tuple(pd.concat([f[k].assign(input=f[0])[["input", *f[k].columns]] for f in frames], ignore_index=True)
                 for k in (1, 2))


COMMAND = Command(options, analyse, render, tuple(BREAKDOWN_RENDERERS), check=check, opening=opening)
