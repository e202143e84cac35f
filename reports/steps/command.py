"""tracelab steps: per step and rank of one run, who waits on whom."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from tracelab.cli.commands.shared import FormatOpt, Paths, RankOpt, SchedulerOpt, StepOpt, each_run, findings_digests
from tracelab.cli.commands.topic import Command
from tracelab.core.errors import UsageError
from tracelab.core.note import Note

from ..topics import step_columns



def options(
    paths: Paths,
    fmt: FormatOpt = "table",
    rank: RankOpt = None,
    step: StepOpt = None,
    scheduler: SchedulerOpt = None,
    n_steps: Annotated[Optional[int], typer.Option("--steps", help="Steps the traces cover, to divide totals "
                                                                   "by where they have no instances (proton); "
                                                                   "default: what the run folder's run.json records.")]
    = None,
) -> None:
    """Per step and rank of one run: step time (first to last GPU activity of the step), GPU busy,
    compute, communication, exposed communication and wait at collectives; per step the gating
    rank (the last to arrive for most of the step's collective skew), every rank's wait and why
    the gating rank was late (more GPU work before the collective, or an idle GPU); then the
    run's verdict: a straggler only when it gates a significant majority of steps."""


def check(n_steps: int | None, **asked) -> dict:
    if n_steps is not None and n_steps < 1:
        raise UsageError("--steps", f"must be at least 1, not {n_steps}")
    return {**asked, "n_steps": n_steps}


def opening(fmt: str, **_) -> dict:
    from ..ranks import rank_digests
    from ..timeline.waits import STEP_DIGESTS

    return {"digests": {**findings_digests(fmt), **STEP_DIGESTS,
                        **rank_digests(("idle", "path_bounds"))}}  # digested in its worker: the idle columns'


def analyse(session, n_steps: int | None, **_) -> list[tuple]:
    """(run name, the renderer's arguments) of each run of one job."""
    infos = session.run_infos
    return [(r.name, _steps_of(r, n_steps, infos)) for r in _one_job_runs(session)]


def render(rendered_as, parts: list[tuple], fmt: str, **_):
    return each_run(rendered_as, fmt, parts)


def _one_job_runs(session) -> list:
    """The runs steps weighs (ranks against each other on one clock): each run whose ranks are of
    one job; any other said in a note."""
    from ..ranks import not_one_job

    kept, why = [], None
    for r in session.usable("steps"):
        if why := not_one_job(r.profiles):
            session.note(Note("not_one_job", {"reason": why}, where=(r.name,)))
        else:
            kept.append(r)
    if not kept:
        raise UsageError("steps", f"{why}: it takes the ranks of one run (compare takes several runs)")
    return kept


def _steps_of(run, n_steps: int | None, infos: list[tuple[str, dict]]) -> tuple:
    """The steps renderer's arguments for one run: its who-waits, per-step totals of an untimed
    run (proton) where the steps are known, and whether it is untimed. `infos`: the session's run
    folders' (name, run.json), where the same job's run under backend none may have timed its step."""
    import pandas as pd

    from ..timeline.steps import per_step_totals, recorded_steps
    from ..timeline.waits import analyse_digests
    from ..unprofiled import measured_step

    profiles = run.profiles
    w = analyse_digests({p.rank: p.summary["waits"] for p in profiles},
                        {p.rank: p.meta.trace_start_epoch_ns for p in profiles})
    n_steps = n_steps or recorded_steps(run.info)
    untimed = not any(p.summary["timed"] for p in profiles)
    sums = pd.concat([p.summary["kernel_totals"].assign(rank=p.rank) for p in profiles], ignore_index=True)
    totals = per_step_totals(profiles[0].events, n_steps, sums) if untimed and n_steps else None
    if len(w.steps):  # the idle topic's columns beside each step row; the step without the profiler as idle says it
        measured = measured_step(run.info, infos)
        w.steps = step_columns("idle", w.steps, profiles, measured.ns if measured else None)
    return w, totals, untimed


COMMAND = Command(options, analyse, render, "steps.steps_text:STEPS_RENDERERS", check=check, opening=opening)
