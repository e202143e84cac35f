"""Commands across ranks, runs and profilers: compare (and its tree diff) and steps."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..errors import UsageError
from .common import (FORMAT_HELP, Paths, RankOpt, StepOpt, SchedulerOpt, _options, _load, _emit, _findings, _top,
                     _check_choice, _load_groups, _load_runs, _picked)


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
    from ..inputs import label_inputs
    from ..reports.compare.compare import BY, comparison, default_by
    from ..reports.session import COMPARISON, FINDINGS
    from ..reports.text import COMPARE_RENDERERS

    if by is not None:
        _check_choice("--by", by, tuple(BY))
    _check_choice("--format", fmt, tuple(COMPARE_RENDERERS))
    top = _top(top)
    if tree:
        return _tree_diff(paths)
    options = _options(step, scheduler)
    digests = FINDINGS if fmt == "table" else COMPARISON  # only the table ends on the findings
    groups = _with_steps(paths, _picked(paths, _load_groups(paths, keep_events=False, options=options,
                                                            digests=digests), rank), n_steps)
    if sum(len(g) for g in groups) < 2:
        raise UsageError("compare", "needs two or more traces or ranks (files, folders, or one file of several ranks)")
    inputs = label_inputs(paths, groups)
    by = by or default_by(inputs)
    c = comparison(inputs, by)
    _emit(COMPARE_RENDERERS[fmt](c, BY[by], top))
    _findings(fmt, paths, groups=groups, comparison=c)



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



def _with_steps(paths: list[str], groups: list[list], n_steps: int | None) -> list[list]:
    """Profiles without step instances (proton) get meta["steps"]: --steps, else the steps their
    run folder's run.json records (reports/steps.recorded_steps), so compare can go per step."""
    from ..inputs import run_info
    from ..reports.steps.steps import recorded_steps

    if n_steps is not None and n_steps < 1:
        raise UsageError("--steps", f"must be at least 1, not {n_steps}")
    for path, group in zip(paths, groups):
        steps = n_steps or recorded_steps(run_info([path]))
        for p in group:
            if steps and not _has_steps(p):
                p.meta["steps"] = steps
    return groups



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
    import pandas as pd

    from ..inputs import run_info
    from ..reports.steps.steps import per_step_totals, recorded_steps
    from ..reports.steps.steps_text import STEPS_RENDERERS
    from ..reports.idle.idle import RankIdle, idle_columns
    from ..reports.steps.waits import STEP_DIGESTS, analyse_digests

    _check_choice("--format", fmt, tuple(STEPS_RENDERERS))
    if n_steps is not None and n_steps < 1:
        raise UsageError("--steps", f"must be at least 1, not {n_steps}")
    options = _options(step, scheduler)
    from ..reports.session import FINDINGS, not_one_job, rank_digests

    findings = rank_digests(FINDINGS) if fmt == "table" else {}  # only the table ends on the findings
    runs = _load_runs(paths, rank, reduce={**findings, **STEP_DIGESTS, "idle": RankIdle(0)},
                      keep_events=False, options=options)  # digested in its worker
    profiles = [p for _, ps in runs for p in ps]
    if len(runs) > 1:  # ranks repeat across the inputs: several runs
        raise UsageError("steps", f"a rank repeats across {', '.join(str(r) for r, _ in runs)}: they are "
                                  "several runs; it takes the ranks of one run (compare takes several runs)")
    if why := not_one_job(profiles):  # steps weighs ranks against each other on one clock
        raise UsageError("steps", f"{why}: it takes the ranks of one run (compare takes several runs)")
    w = analyse_digests({p.rank: p.summary["waits"] for p in profiles},
                        {p.rank: p.meta.get("trace_start_epoch_ns") for p in profiles})
    n_steps = n_steps or recorded_steps(run_info(paths))
    untimed = not any(p.summary["timed"] for p in profiles)
    sums = pd.concat([p.summary["kernel_totals"].assign(rank=p.rank) for p in profiles], ignore_index=True)
    totals = per_step_totals(profiles[0].events, n_steps, sums) if untimed and n_steps else None
    if len(w.steps):  # issue 21: the idle columns beside each step row
        w.steps = idle_columns(w.steps, {p.rank: p.summary["idle"] for p in profiles})
    _emit(STEPS_RENDERERS[fmt](w, totals, untimed=untimed))
    _findings(fmt, paths, profiles)

