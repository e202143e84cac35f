"""Commands across ranks, runs and profilers: compare (and its tree diff) and steps."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..errors import UsageError
from .common import (FORMAT_HELP, Paths, RankOpt, StepOpt, SchedulerOpt, _options, _emit, _top, _check_choice, each_run,
                     end_on_findings, findings_digests, open_session)


def compare(
    paths: Annotated[list[str], typer.Argument(help="Two or more trace files, run folders or folders of traces; "
                                                    "the first is the reference.")],
    by: Annotated[Optional[str], typer.Option(help="Align rows on scope,kernel (default for one profiler), "
                                                   "kernel (default across profilers), op_class or scope.")] = None,
    top: Annotated[int, typer.Option(help="Show the N largest rows (0: all).")] = 25,
    fmt: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "table",
    tree: Annotated[bool, typer.Option("--tree", help="For two proton files: the tree of differences "
                                                       "(like proton-viewer --diff-profile).")] = False,
    rank: RankOpt = None,
    step: StepOpt = None,
    scheduler: SchedulerOpt = None,
    n_steps: Annotated[Optional[int], typer.Option("--steps", help="Steps covered by inputs without step "
                                                                   "instances (proton), to compare per step; "
                                                                   "default: what their run folder's run.json "
                                                                   "records.")] = None,
) -> None:
    """Ranks, runs or profilers side by side: time and count per input, delta and ratio
    against the first, spread and slowest input per row, and the straggler verdict
    (who waits on whom at the collectives; `tracelab steps` shows it per step)."""
    from ..reports.compare.compare import BY, comparison, default_by
    from ..reports.session import COMPARISON, FINDINGS
    from ..reports.text import COMPARE_RENDERERS

    if by is not None:
        _check_choice("--by", by, tuple(BY))
    _check_choice("--format", fmt, tuple(COMPARE_RENDERERS))
    top = _top(top)
    if tree:
        return _tree_diff(paths)
    digests = FINDINGS if fmt == "table" else COMPARISON  # only the table ends on the findings
    session = _with_steps(open_session(paths, _options(step, scheduler), digests=digests, rank=rank), n_steps)
    session.usable("compare")
    if len(session.inputs) < 2:
        raise UsageError("compare", "needs two or more traces or ranks (files, folders, or one file of several ranks)")
    by = by or default_by(session.inputs)
    c = comparison(session.inputs, by)
    _emit(COMPARE_RENDERERS[fmt](c, BY[by], top))
    end_on_findings(fmt, session, comparison=c)



def _tree_diff(paths: list[str]) -> None:
    from pathlib import Path

    from ..loading import detect
    from ..parsers.hatchet import tree
    from ..reports.text import tree_diff_text
    from ..reports.html.treediff import tree_diff

    if len(paths) != 2 or any(Path(p).is_dir() or detect(p) != "hatchet" for p in paths):
        raise UsageError("--tree", "needs exactly two proton .hatchet files")
    first, second = (Path(p).name for p in paths)
    _emit(tree_diff_text(tree_diff(tree(paths[0]), tree(paths[1]), names=(paths[0], paths[1])), first, second))



def _with_steps(session, n_steps: int | None):
    """Ranks without step instances (proton) get meta.steps: --steps, else the steps their
    run folder's run.json records (reports/steps.recorded_steps), so compare can go per step."""
    from ..reports.timeline.steps import recorded_steps

    if n_steps is not None and n_steps < 1:
        raise UsageError("--steps", f"must be at least 1, not {n_steps}")
    for run in session.runs:
        steps = n_steps or recorded_steps(run.info)
        for p in run.profiles:
            if steps and not _has_steps(p):
                p.meta.steps = steps
    return session



def _has_steps(p) -> bool:
    """Whether a profile has step instances: its worker's summary says, else its events."""
    from ..reports.session import RANK_DIGESTS
    from ..schema import RankData

    noise = p.summary["noise"] if "noise" in p.summary else RANK_DIGESTS["noise"](RankData(p.events, p.meta, p.host))
    return bool(noise["steps"])



def steps(
    paths: Paths,
    fmt: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "table",
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
    from ..reports.idle.idle import RankIdle
    from ..reports.session import digest_key, rank_digests
    from ..reports.steps.steps_text import STEPS_RENDERERS
    from ..reports.timeline.waits import STEP_DIGESTS

    _check_choice("--format", fmt, tuple(STEPS_RENDERERS))
    if n_steps is not None and n_steps < 1:
        raise UsageError("--steps", f"must be at least 1, not {n_steps}")
    idle = digest_key("idle", RankIdle(0))
    session = open_session(paths, _options(step, scheduler), rank=rank,
                           digests={**findings_digests(fmt), **STEP_DIGESTS, idle: RankIdle(0),
                                    **rank_digests(("path_bounds",))})  # digested in its worker
    parts = [(r.name, _steps_of(r, n_steps, idle)) for r in _one_job_runs(session)]
    _emit(each_run(STEPS_RENDERERS[fmt], fmt, parts))
    end_on_findings(fmt, session)


def _one_job_runs(session) -> list:
    """The runs steps weighs (ranks against each other on one clock): each run whose ranks are of
    one job; any other said in a note."""
    from ..reports.session import not_one_job

    kept, why = [], None
    for r in session.usable("steps"):
        if why := not_one_job(r.profiles):
            session.note(f"{r.name}: {why}: steps takes the ranks of one run (compare takes several runs)")
        else:
            kept.append(r)
    if not kept:
        raise UsageError("steps", f"{why}: it takes the ranks of one run (compare takes several runs)")
    return kept


def _steps_of(run, n_steps: int | None, idle: str) -> tuple:
    """The steps renderer's arguments for one run: its who-waits, per-step totals of an untimed
    run (proton) where the steps are known, and whether it is untimed."""
    import pandas as pd

    from ..reports.idle.idle import idle_columns
    from ..reports.timeline.steps import per_step_totals, recorded_steps
    from ..reports.timeline.waits import analyse_digests

    profiles = run.profiles
    w = analyse_digests({p.rank: p.summary["waits"] for p in profiles},
                        {p.rank: p.meta.trace_start_epoch_ns for p in profiles})
    n_steps = n_steps or recorded_steps(run.info)
    untimed = not any(p.summary["timed"] for p in profiles)
    sums = pd.concat([p.summary["kernel_totals"].assign(rank=p.rank) for p in profiles], ignore_index=True)
    totals = per_step_totals(profiles[0].events, n_steps, sums) if untimed and n_steps else None
    if len(w.steps):  # the idle columns beside each step row
        w.steps = idle_columns(w.steps, {p.rank: p.summary[idle] for p in profiles},
                               {p.rank: p.summary["path_bounds"] for p in profiles})
    return w, totals, untimed
