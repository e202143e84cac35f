"""The report's what-if section (reports/topics.py's whatif Topic; reports/html calls
`section`): per run of timed ranks whose graphs their workers made (nodes.RankGraphReduce),
the default scenarios' predicted step and saving, and each step's critical path. Rendering
only; the numbers are analyse.whatif's."""
from __future__ import annotations

from html import escape
from typing import Callable

from .analyse import WhatIf, whatif
from .path import CATEGORIES

SCENARIO_COLUMNS = {"name": "scenario", "args": "args", "steps": "steps", "step_ns": "measured (ms)",
                    "predicted_ns": "predicted (ms)", "saving_ns": "saving (ms)", "saving_frac": "saving %"}
STEP_COLUMNS = {"step": "step", "step_ns": "measured (ms)", "replayed_ns": "replayed (ms)",
                **{f"{c}_ns": f"{c} (ms)" for c in CATEGORIES}}


def run_whatifs(inputs: list) -> list[tuple[str, WhatIf]]:
    """(run, its WhatIf) for every run whose ranks all have a graph (none for a job too big to keep them)."""
    out = []
    for group in dict.fromkeys(i.group for i in inputs):
        members = [i for i in inputs if i.group == group]
        graphs = {i.rank: i.digest("whatif") for i in members}
        if len(graphs) < len(members) or any(g is None or not len(g) for g in graphs.values()):
            continue
        for rank, g in graphs.items():
            g.rank = rank
        out.append((str(group), whatif(graphs, {i.rank: i.epoch_ns for i in members})))
    return out


def section(inputs: list, figure: Callable, table: Callable, comparison) -> list[str]:
    """The what-if section of every run with a timeline; nothing where none has one."""
    out = []
    for run, w in run_whatifs(inputs):
        if not len(w.steps):
            continue
        scenarios = w.scenarios.assign(args=w.scenarios["args"].fillna(""))
        out += [f"<h3>{escape(run)}</h3>", table(scenarios, SCENARIO_COLUMNS),
                table(w.steps, STEP_COLUMNS, sortable=True)]
        out += [f'<p class="note">{escape(n)}</p>' for n in w.notes]
    if out:
        out = ['<h2 id="whatif">What if: the critical path and what fixing each thing would save</h2>',
               '<p class="note">Per run: each scenario replayed on the run\'s dependency graph (tracelab whatif; '
               "several together in one joint replay, never summed), the mean over the steps the unchanged replay "
               "reproduces; per step, what its critical path is made of.</p>"] + out
    return out
