"""tracelab compare: ranks, runs or profilers side by side (and two proton trees' difference)."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from tracelab.cli.commands.shared import FormatOpt, RankOpt, SchedulerOpt, StepOpt, _check_choice, _top
from tracelab.cli.commands.topic import Command
from tracelab.core.errors import UsageError

from .compare_text import COMPARE_RENDERERS


def options(
    paths: Annotated[list[str], typer.Argument(help="Two or more trace files, run folders or folders of traces; "
                                                    "the first is the reference.")],
    by: Annotated[Optional[str], typer.Option(help="Align rows on scope,kernel (default for one profiler), "
                                                   "kernel (default across profilers), op_class or scope.")] = None,
    top: Annotated[int, typer.Option(help="Show the N largest rows (0: all).")] = 25,
    fmt: FormatOpt = "table",
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


def check(by: str | None, top: int, **asked) -> dict:
    from ..align.align import BY

    if by is not None:
        _check_choice("--by", by, tuple(BY))
    return {**asked, "by": by, "top": _top(top)}


def tree_diff(paths: list[str], tree: bool, **_):
    """--tree: the difference of two proton files' trees, read without a session; else None."""
    if not tree:
        return None
    from pathlib import Path

    from tracelab.ingest.loading import detect
    from tracelab.parsers.hatchet import tree as read_tree

    from ..html.treediff import tree_diff as diff
    from .compare_text import tree_diff_text

    if len(paths) != 2 or any(Path(p).is_dir() or detect(p) != "hatchet" for p in paths):
        raise UsageError("--tree", "needs exactly two proton .hatchet files")
    first, second = (Path(p).name for p in paths)
    return tree_diff_text(diff(read_tree(paths[0]), read_tree(paths[1]), names=(paths[0], paths[1])), first, second)


def opening(fmt: str, **_) -> dict:
    from ..ranks import COMPARISON, FINDINGS

    return {"digests": FINDINGS if fmt == "table" else COMPARISON}  # only the table ends on the findings


def analyse(session, by: str | None, n_steps: int | None, **_):
    """The Comparison of the session's inputs, aligned on --by (default: by their profilers)."""
    from ..align.align import comparison, default_by

    with_steps(session, n_steps)
    session.usable("compare")
    if len(session.inputs) < 2:
        raise UsageError("compare", "needs two or more traces or ranks (files, folders, or one file of several ranks)")
    return comparison(session.inputs, by or default_by(session.inputs))


def render(c, fmt: str, top: int | None, **_):
    from ..align.align import BY

    return COMPARE_RENDERERS[fmt](c, BY[c.by], top)


def with_steps(session, n_steps: int | None):
    """Ranks without step instances (proton) get meta.steps: --steps, else the steps their
    run folder's run.json records (reports/steps.recorded_steps), so compare can go per step."""
    from ..timeline.steps import recorded_steps

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
    from tracelab.core.schema import RankData

    from ..ranks import RANK_DIGESTS

    noise = p.summary["noise"] if "noise" in p.summary else RANK_DIGESTS["noise"](RankData(p.events, p.meta, p.host))
    return bool(noise["steps"])


COMMAND = Command(options, analyse, render, tuple(COMPARE_RENDERERS), check=check, opening=opening,
                  comparison=lambda c: c, instead=tree_diff)
