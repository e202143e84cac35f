"""The report's what-if section (reports/html/html.py calls `sections`, registered in
reports/topics.py): per run of timed ranks, each step's critical path by what it is made of
(stacked bars) with each scenario's predicted step time on it (markers), the scenarios ranked
by saving with the median step's figures and an evidence line, and the replay's notes; a line
for each input that cannot support it (proton: no timeline; a job too large to replay here).
Rendering only: the answer is analyse.whatif's, the same as `tracelab whatif`."""
from __future__ import annotations

from html import escape
from typing import Callable

import numpy as np
import pandas as pd

from tracelab.core.note import Note

from .. import fmt
from ..html import notes
from ..html.figures import CATEGORY_AXIS, label
from .analyse import MAX_ERROR, WhatIf
from .bands import band
from .cycles import ReplayError
from .findings import MAX_RANKS, TEXT, replay_inputs
from .path import CATEGORIES
from ..unprofiled import unprofiled_of
from .scenarios import label_of
from .render import UNKNOWN_PATH, unprofiled_line

MAX_STEPS = 64  # steps drawn and listed per run
COLORS = {"compute": "#4c78a8", "copy": "#9ecae9", "comm": "#72b7b2", "launch": "#f58518", "host": "#e45756", "sync": "#b279a2",
          "wait": "#eeca3b", "other": "#bab0ac"}
STEP_COLUMNS = {"step_text": "step", "step_ns": "measured (ms)", "replayed_ns": "replayed (ms)",
                **{f"{c}_ns": f"{c} (ms)" for c in CATEGORIES}, "ranks": "ranks on the path", "top_text": "top on the path"}
# the user's time first (the step without the profiler, where known: a column of no value is left out)
SCENARIO_COLUMNS = {"scenario": "scenario", "steps": "steps", "unprofiled_step_ns": "step without the profiler (ms)",
                    "predicted_unprofiled_ns": "predicted without the profiler (ms)",
                    "saving_unprofiled_ns": "saving without the profiler (ms)",
                    "saving_unprofiled_frac": "saving without the profiler %", "step_ns": "profiled: measured, mean (ms)",
                    "predicted_ns": "profiled: predicted, mean (ms)", "saving_ns": "profiled: saving (ms)",
                    "saving_frac": "profiled: saving %", "median_pred_ns": "median step, predicted (ms)",
                    "median_gain_ns": "median step, gain (ms)", "evidence": "evidence"}
HEAD = ('<h2 id="whatif">What should I fix first? The critical path and what-if replays</h2>'
        '<p class="note">Per step: what the critical path across host, streams and ranks is made of (bars), and '
        "each scenario's predicted step time (markers), from a replay of the dependency graph in which every op "
        "starts when what it depends on ends (tracelab whatif). Scenarios are replayed, never summed; a step whose "
        f"unchanged replay is more than {100 * MAX_ERROR:.0f}% off its measured time claims no saving.</p>")


def sections(inputs: list, figure: Callable[[dict, str], str], table: Callable, comparison=None,
             runs=()) -> list[str]:
    """The what-if section, one part per run (`Input.group`); nothing where no input is timed
    and none says why. `comparison`: unused (reports/topics.py's section signature)."""
    out = []
    for group in dict.fromkeys(i.group for i in inputs):
        run = [i for i in inputs if i.group == group]
        out += _run_part(run, figure, table, len({i.group for i in inputs}) > 1, runs)
    return [HEAD, *out] if out else []


def _run_part(run: list, figure: Callable, table: Callable, several: bool, runs=()) -> list[str]:
    title = f"<h3>{escape(run[0].group)}</h3>" if several and run[0].group else ""
    untimed = [i.label for i in run if not i.timed]
    if untimed:
        return [title, f'<p class="note">{escape(", ".join(untimed))}: no critical path or what-if: proton records '
                "no timeline (no start times, no launches)</p>"]
    if len(run) > MAX_RANKS:
        return [title, f'<p class="note">{len(run)} ranks: the report replays jobs of at most {MAX_RANKS} ranks; '
                "run tracelab whatif on this one</p>"]
    try:
        w = replay_inputs(run, None, unprofiled_of(runs, [i.path for i in run]))
    except ReplayError as e:
        return [title, f'<p class="note">no what-if: {escape(e.reason)}</p>']
    if w is None or not len(w.steps):
        why = w.notes if w is not None else [Note("nothing_to_replay")]
        return [title, *(f'<p class="note">{escape(n.text)}</p>' for n in why)]
    steps = w.steps.head(MAX_STEPS)
    out = [title, figure(_bars(steps, w.per_step), "")]
    out += [table(_scenario_rows(w), SCENARIO_COLUMNS), table(_step_rows(steps), STEP_COLUMNS)]
    line = unprofiled_line(w.unprofiled)
    return out + ([f'<p class="note">{escape(line)}</p>'] if line else []) + [notes.folded([escape(n.text) for n in w.notes])]


def _step_text(step) -> str:
    return "whole trace" if step is None or pd.isna(step) or step < 0 else str(int(step))


def _bars(steps: pd.DataFrame, per_step: pd.DataFrame) -> dict:
    """Stacked bars of the path per step (ms); a marker per scenario at its predicted step time."""
    x = [_step_text(s) + ("" if c else " *") for s, c in zip(steps["step"], steps["claimed"])]
    known = steps["path_known"].to_numpy(dtype=bool)  # a step whose path is not known: no bar, its scenario markers only
    data = [{"type": "bar", "name": c, "x": x,
             "y": [round(v / 1e6, 4) if k else None for v, k in zip(steps[f"{c}_ns"].tolist(), known)],
             "marker": {"color": COLORS[c]}, "hovertemplate": "step %{x}: %{y} ms<extra>" + c + "</extra>"}
            for c in CATEGORIES if steps[f"{c}_ns"].any()]
    for scenario in per_step.columns:
        y = per_step[scenario].reindex(steps["step"].to_numpy()).to_numpy(dtype=np.float64) / 1e6
        name = label(scenario)
        data.append({"type": "scatter", "mode": "markers", "name": name, "x": x, "marker": {"size": 10},
                     "y": [None if np.isnan(v) else round(float(v), 4) for v in y],
                     "hovertemplate": "step %{x}: %{y} ms<extra>" + name + "</extra>"})
    return {"data": data, "layout": {"title": {"text": "the critical path per step (ms), and each scenario's "
                                                        "predicted step time"},
                                     "barmode": "stack", "xaxis": CATEGORY_AXIS, "height": 440,
                                     "margin": {"l": 60, "r": 20, "t": 50, "b": 60}}}


def _median_step(w: WhatIf):
    """The claimed step whose measured time is the median's (the lower of two), None if none claims."""
    claimed = w.steps[w.steps["claimed"]].sort_values("step_ns", kind="stable")
    return None if not len(claimed) else claimed.iloc[(len(claimed) - 1) // 2]


def _scenario_rows(w: WhatIf) -> pd.DataFrame:
    median = _median_step(w)
    rows = []
    for r in w.scenarios.itertuples(index=False):
        key = "together" if r.name == "together" else label_of(r.name, r.args)
        pred = float(w.per_step.loc[median["step"], key]) if median is not None and key in w.per_step else np.nan
        gain = float(median["step_ns"]) - pred if median is not None else np.nan
        rows.append({"scenario": f"together ({r.args})" if r.name == "together" else key, "steps": r.steps,
                     "step_ns": r.step_ns, "predicted_ns": r.predicted_ns, "saving_ns": r.saving_ns,
                     "saving_frac": np.nan if r.saving_frac is None else r.saving_frac,
                     "median_pred_ns": pred, "median_gain_ns": gain,
                     **{k: _or_nan(getattr(r, k)) for k in ("predicted_unprofiled_ns", "saving_unprofiled_ns",
                                                              "saving_unprofiled_frac")},
                     "unprofiled_step_ns": _or_nan((w.unprofiled or {}).get("unprofiled_step_ns")),
                     "evidence": evidence_line(r, median, pred)})
    return pd.DataFrame(rows, columns=list(SCENARIO_COLUMNS))


def _or_nan(value) -> float:
    return np.nan if value is None else float(value)


def evidence_line(r, median, pred: float) -> str:
    """One line: what the scenario means, its saving over how many steps, the median step's."""
    together = "every other scenario of this table, replayed together"
    label = label_of(r.name, r.args)  # a form of its own (balance:share) has its own words
    what = TEXT.get(label, TEXT.get(r.name, together if r.name == "together" else label))
    if not r.steps or r.saving_ns is None or pd.isna(r.saving_ns):
        return f"what if {what}: no step claims a saving (the unchanged replay does not reproduce them)"
    whole = median is not None and _step_text(median["step"]) == "whole trace"
    of = f"the {fmt.ms(r.step_ns)} trace" if whole else f"{fmt.ms(r.step_ns)} per step"
    line = f"what if {what}: {fmt.ms(r.saving_ns)} of {of} ({100 * r.saving_frac:.0f}%)"
    if not whole:
        line += f", the mean over {r.steps} step{'s' if r.steps != 1 else ''} replayed within {100 * MAX_ERROR:.0f}%"
        if median is not None and not np.isnan(pred):
            line += f"; the median step ({_step_text(median['step'])}): {fmt.ms(median['step_ns'])} -> {fmt.ms(pred)}"
    if r.name == "together":
        return line + "; a joint replay: each scenario's measured error is on its own row"
    b = band(r.name, r.args)
    return line + (f"; {b.text()}" if b else "; not yet measured against a run without its cause")


def _step_rows(steps: pd.DataFrame) -> pd.DataFrame:
    out = steps.assign(step_text=[_step_text(s) + ("" if c else " (no saving claimed)")
                                  for s, c in zip(steps["step"], steps["claimed"])],
                       ranks=[", ".join(str(x) for x in r) for r in steps["path_ranks"]],
                       top_text=[_top(t) if k else UNKNOWN_PATH for t, k in zip(steps["top"], steps["path_known"])])
    unknown = ~steps["path_known"].to_numpy(dtype=bool)
    out.loc[unknown, [f"{c}_ns" for c in CATEGORIES]] = np.nan  # shown as '-': not known (the note says why)
    out.loc[unknown, "ranks"] = ""
    return out[list(STEP_COLUMNS)]


def _top(top: list) -> str:
    if not top:
        return ""
    t = top[0]
    return f"{t['what']} {t['name']} (rank {t['rank']}, {fmt.duration(t['ns'])})"
