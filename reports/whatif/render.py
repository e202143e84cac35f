"""Renderers of `tracelab whatif` (analyse.WhatIf per input): terminal tables, CSV, JSON
(strict: null, never NaN; one object per input, its steps, path and scenarios). Units converted here only."""
from __future__ import annotations

import pandas as pd
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..csvout import csv_text
from ..fmt import ms_cell
from ..jsonout import dumps, strict
from ..many_steps import largest_steps
from .analyse import MAX_ERROR, SCALE_TOL, SCENARIO_COLUMNS, WhatIf
from .bands import band
from .path import CATEGORIES
from .scenarios import label_of

PATH_KEYS = {f"{c}_ns": f"{c}_ns" for c in CATEGORIES}
UNKNOWN_PATH = "not known: an edge is missing (see its note)"


def _step(step) -> str:
    return "whole trace" if step is None or pd.isna(step) or step < 0 else str(int(step))


def _steps_table(label: str, shown: pd.DataFrame) -> Table:
    """`shown`: the steps of a WhatIf the table holds (_shown)."""
    t = Table(title=f"{label}critical path per step (ms): measured, replayed, and what the path is made of",
              title_justify="left", show_edge=False)
    for h in ["step", "measured", "replayed", *CATEGORIES, "ranks", "top on the path"]:
        t.add_column(h, justify="left" if h in ("ranks", "top on the path") else "right")
    for r in shown.itertuples(index=False):
        top = r.top[0] if r.top else None
        cells = ([ms_cell(getattr(r, f"{c}_ns")) for c in CATEGORIES] if r.path_known else ["?"] * len(CATEGORIES))
        what = (f"{top['what']} {top['name']} (rank {top['rank']}, {ms_cell(top['ns'])})" if top else "") if r.path_known \
            else UNKNOWN_PATH
        t.add_row(_step(r.step) + ("" if r.claimed else " *"), ms_cell(r.step_ns), ms_cell(r.replayed_ns),
                  *cells, ",".join(str(x) for x in r.path_ranks) if r.path_known else "?", what)
    return t


def _shown(w: WhatIf) -> tuple[pd.DataFrame, str]:
    """The slowest steps where there are many (reports/many_steps.py); JSON has every step."""
    return largest_steps(w.steps, "step_ns", "measured step time", lambda ns: f"{ms_cell(ns)} ms", "--format json")


def _scenario_table(label: str, w: WhatIf) -> Table:
    """The scenarios; where the step without the profiler is known, the user's time leads (the step,
    the prediction and the saving without the profiler), the profiled replay's after it."""
    user = (w.unprofiled or {}).get("unprofiled_step_ns") is not None and w.scenarios["predicted_unprofiled_ns"].notna().any()
    what = "without the profiler first, then the profiled replay" if user else "under the profiler"
    t = Table(title=f"{label}what if (ms per step, mean over the steps that claim a saving; joint replays, never sums): "
                    f"{what}", title_justify="left", show_edge=False)
    columns = ["scenario", "steps", "step", "predicted", "saving", "saving %", "profiled step", "profiled predicted",
               "profiled saving", "profiled %"] if user else ["scenario", "steps", "measured", "predicted", "saving", "saving %", "without profiler"]
    for h in columns:
        t.add_column(h, justify="left" if h == "scenario" else "right")
    step_ns = (w.unprofiled or {}).get("unprofiled_step_ns")
    for r in w.scenarios.itertuples(index=False):
        name = f"{r.name} ({r.args})" if r.name == "together" else label_of(r.name, r.args)
        profiled = [ms_cell(r.step_ns), ms_cell(r.predicted_ns), ms_cell(r.saving_ns), _percent(r.saving_frac)]
        users = [ms_cell(step_ns), ms_cell(r.predicted_unprofiled_ns), ms_cell(r.saving_unprofiled_ns),
                 _percent(r.saving_unprofiled_frac)]
        t.add_row(name, str(r.steps), *(users + profiled if user else profiled + [ms_cell(r.predicted_unprofiled_ns)]))
    return t


def _percent(frac) -> str:
    return "-" if frac is None or pd.isna(frac) else f"{100 * frac:.1f}"


def unprofiled_line(u: dict) -> str | None:
    """What 'without profiler' is measured against: the run's step without the profiler, measured
    beside the trace or estimated (the replay less the profiler's cost per event, with its band)."""
    if not u or u.get("unprofiled_step_ns") is None:
        return None
    step = f"{ms_cell(u['unprofiled_step_ns'])} ms"
    replayed = u.get("replayed_unprofiled_ns")
    if u["unprofiled_source"] == "measured":
        model = f"; the replay less the profiler's cost gives {ms_cell(replayed)} ms" if replayed is not None else ""
        model += (_paced_text(u["region_factors"], u.get("calibrated_unprofiled_ns")) if u.get("region_factors")
                  else _scale_text(u.get("cost_scale"), u.get("calibrated_unprofiled_ns"), u.get("unprofiled_step_ns"),
                                   u.get("cost_floor")))
        where = (f"the median step of the same job under backend none ({u['unprofiled_run']})" if u.get("unprofiled_run")
                 else "measured beside the trace (the same steps, profiler off)")
        return f"step without the profiler: {step}, {where}{model}"
    b = u.get("error_band")
    costs = "; ".join(sorted(set((u.get("costs") or {}).values())))
    return (f"step without the profiler: {step}, estimated: the replay less the profiler's own host cost per event "
            f"({costs}){'; ' + b.short() if b else '; no error band'}")


def _paced_text(factors: dict, met_ns: float | None) -> str:
    """How the predictions without the profiler paced each phase (regions.py): its factor per rank."""
    def rank_text(f: dict) -> str:
        return ", ".join(f"{name or 'outside them'} {v:.2f}x" for name, v in f.items() if name != "step")
    per_rank = "; ".join(f"rank {r}: {rank_text(f)}" for r, f in factors.items())
    return (f"; predictions take each phase's operators at its own pace without the profiler (its time measured "
            f"beside the trace over its time in the trace: {per_rank}), at which the replay gives {ms_cell(met_ns)} ms")


def _scale_text(scale: float | None, met_ns: float | None, measured_ns: float | None = None,
                floor: dict | None = None) -> str:
    """How the predictions without the profiler met the measured step (analyse.calibrated_scale)."""
    if scale is None:
        return ""
    if floor:  # the device paces the step; a phase timed without the profiler set the host's pace
        name = floor["region"] or "outside the phases"
        return (f"; the device paces that step, so the host's pace comes from its phases timed without the "
                f"profiler: predictions take {scale:.3g}x that cost per event off, which brings rank "
                f"{floor['rank']}'s {name} from {ms_cell(floor['profiled_ns'])} ms a step in the trace to the "
                f"{ms_cell(floor['unprofiled_ns'])} ms measured without it (at most its host's time: it may also "
                f"have waited on the device); at that the replay gives {ms_cell(met_ns)} ms")
    if scale == 0:
        return ("; predictions scale each scenario's profiled replay by the measured step (no cost per event "
                "comes off: a CPU-only trace, or a run slower without the profiler than its replay)")
    paced = (scale == 1 and met_ns is not None and measured_ns is not None
             and met_ns < measured_ns * (1 - SCALE_TOL))  # calibrated_scale's floor: the device paces it
    return (f"; predictions take {scale:.3g}x that cost per event off, at which the replay gives "
            f"{ms_cell(met_ns)} ms" + (" (the device paces it there: scenarios are scaled by the measured step)"
                                       if paced else ""))


def to_table(parts: list[tuple[str, WhatIf]]) -> Group:
    items = []
    for path, w in parts:
        label = f"{path}: " if len(parts) > 1 else ""
        if len(w.steps):
            shown, line = _shown(w)
            items += [_steps_table(label, shown), *([Text(f"{label}{line}")] if line else []), Text(""),
                      _scenario_table(label, w)]
            items += [Text(f"{label}{name}: {b.text()}") for name, b in _bands(w.scenarios).items()]
            items += [Text(f"{label}{line}")] if (line := unprofiled_line(w.unprofiled)) else []
        items += [Text(f"{label}{n.text}") for n in w.notes]
        if not len(w.steps) and not w.notes:
            items.append(Text(f"{label}no GPU work inside a step or trace window: nothing to replay"))
        if len(w.steps) and not w.steps["claimed"].all():  # the step's note says which of the two
            items.append(Text("* no saving is claimed for this step: the unchanged replay misses it by more than "
                              f"{100 * MAX_ERROR:.0f}% or an edge is missing (starts it cannot explain; the notes say which)"))
    return Group(*items)


def _bands(scenarios: pd.DataFrame) -> dict:
    """Each scenario name's measured band, once per name, in the rows' order (a form of it that
    models another change has none: bands.band)."""
    out = {}
    for name, arg in zip(scenarios["name"], scenarios["args"]):
        if name not in out and (b := band(name, arg)):
            out[name] = b
    return out


def to_csv(parts: list[tuple[str, WhatIf]]) -> str:
    """The scenarios, one row per input and scenario (the steps are in the JSON)."""
    frames = [w.scenarios.assign(input=path)[["input", *SCENARIO_COLUMNS]] for path, w in parts if len(w.scenarios)]
    return csv_text(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["input", *SCENARIO_COLUMNS]))


def _doc(w: WhatIf) -> dict:
    steps = [{"step": None if s.step < 0 else int(s.step), "step_ns": s.step_ns, "replayed_ns": s.replayed_ns,
              "claimed": bool(s.claimed), "unexplained_ns": int(s.unexplained_ns), "path_known": bool(s.path_known),
              **(_path_doc(s) if s.path_known else dict.fromkeys(("path", "compute_by_class", "path_ranks", "path_chains",
                                                                   "top")))} for s in w.steps.itertuples(index=False)]
    scenarios = [{"name": r.name, "args": r.args, "steps": int(r.steps), "step_ns": r.step_ns,
                  "predicted_ns": r.predicted_ns, "saving_ns": r.saving_ns, "saving_frac": r.saving_frac,
                  "error_band": b.doc() if (b := band(r.name, r.args)) else None,
                  "predicted_unprofiled_ns": r.predicted_unprofiled_ns, "saving_unprofiled_ns": r.saving_unprofiled_ns,
                  "saving_unprofiled_frac": r.saving_unprofiled_frac}
                 for r in w.scenarios.itertuples(index=False)]
    u = w.unprofiled or {}
    b = u.get("error_band")
    return strict({"steps": steps, "scenarios": scenarios,
                   "unprofiled_step_ns": u.get("unprofiled_step_ns"), "unprofiled_source": u.get("unprofiled_source"),
                   "unprofiled": {"replayed_unprofiled_ns": u.get("replayed_unprofiled_ns"), "costs": u.get("costs"),
                                  "cost_scale": u.get("cost_scale"), "cost_floor": u.get("cost_floor"),
                                  "calibrated_unprofiled_ns": u.get("calibrated_unprofiled_ns"),
                                  "region_factors": u.get("region_factors"),
                                  "error_band": b.doc() if b else None},
                   "notes": [n.as_json() for n in w.notes]})


def _path_doc(s) -> dict:
    return {"path": {k: int(getattr(s, k)) for k in PATH_KEYS}, "compute_by_class": dict(s.compute_by_class),
            "path_ranks": list(s.path_ranks), "path_chains": list(s.path_chains), "top": s.top}


def to_json(parts: list[tuple[str, WhatIf]]) -> str:
    if len(parts) == 1:
        return dumps(_doc(parts[0][1]))
    return dumps({"inputs": [{"input": path, **_doc(w)} for path, w in parts]})


WHATIF_RENDERERS = {"table": to_table, "csv": to_csv, "json": to_json}
