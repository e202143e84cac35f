"""tracelab whatif: per step, the measured and replayed time and the critical path's
composition; per scenario, the predicted step time and the saving. Pure: ranks' graphs
(nodes.RankGraph, made where each rank was parsed) in, a WhatIf out.

A step's time is its window (path.windows): from the previous step's end to its own, over
all ranks. A step claims a saving only where the unchanged replay reproduces it within
MAX_ERROR and its unexplained delays (edges.py) stay under edges.MAX_UNEXPLAINED of it;
a scenario's figures are the medians over those steps of the measured and predicted times, as
its figures without the profiler are (_without_profiler): one step far from the rest (the
first profiled one of a job whose ranks started their profilers apart waits for the last of
them at its first collective, up to seconds) moves a mean by its excess over the count of steps,
a median not at all.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pandas as pd

from tracelab.core.note import Note

from .edges import MAX_UNEXPLAINED
from .join import Graph, join
from .kinds import COLL
from .nodes import RankGraph
from .profiler_cost import NodeCosts, costs_for, deflate, graph_costs, steady_host
from .regions import CostFloor, cost_floor, pace, paces_of
from .path import CATEGORIES, composition, step_paths, top_items, wait_estimate, windows
from .replay import measured, replay
from .scenarios import DEFAULTS, Scenario, joint, parse

MAX_ERROR = 0.02
# The fitted cost per event (profiler_cost.COSTS) is that of the machines it was fitted on; a run
# that timed its steps without the profiler is a pair of the user's own machine. The cost per event
# scaled so that the replay of its trace less the cost meets that step (within SCALE_TOL of it, at
# most MAX_COST_SCALE times the fit: beyond, every recorded event has taken its node's whole time)
# is the cost taken off each scenario's replay too. Not in a CPU-only trace: there every node is a
# CPU operator, the host's own work, and the same job's profiled and unprofiled steps differ by no
# constant per event (on a loaded CPU the host's speed between the two phases moves more than the
# profiler's cost): the difference is taken as the host running that much slower throughout, the
# scenario's profiled replay scaled by the measured step (scale 0 and the anchor in _without_profiler);
# where the run timed its phases, each phase's operators first at the pace measured for it (regions.py).
# Nor where the replay at the fitted cost is at its floor, the device pacing it, below the measured
# step: what the replay misses there is the device side's, which the anchor takes (scale 1); the step
# then says nothing of the host's pace, and where the run timed its phases without the profiler the
# scale is at least what brings each phase's host time down to its measured time (regions.cost_floor):
# a scenario that shortens the device's work meets the host at its own pace, not the fit's.
MAX_COST_SCALE = 64.0
SCALE_TOL = 0.005
SCALE_STEPS = 16
STEP_COLUMNS = ["step", "step_ns", "replayed_ns", "error_frac", "unexplained_ns", "claimed", "path_known",
                *[f"{c}_ns" for c in CATEGORIES], "compute_by_class", "path_ranks", "path_chains", "top"]
SCENARIO_COLUMNS = ["name", "args", "steps", "step_ns", "predicted_ns", "saving_ns", "saving_frac",
                    "predicted_unprofiled_ns", "saving_unprofiled_ns", "saving_unprofiled_frac"]


@dataclass
class WhatIf:
    steps: pd.DataFrame  # STEP_COLUMNS
    scenarios: pd.DataFrame  # SCENARIO_COLUMNS, by saving
    per_step: pd.DataFrame  # step x scenario label: predicted ns
    notes: list[Note] = field(default_factory=list)
    rounds: int = 0
    # the step without the profiler (unprofiled_step_ns, unprofiled_source, replayed_unprofiled_ns, costs, error_band)
    unprofiled: dict = field(default_factory=dict)


def default_scenarios(g: Graph) -> list[Scenario]:
    """The defaults that apply to this graph (no-host-stalls where a rank has a host stall,
    roofline where some op's roof is known, balance with several ranks, overlap-comm with collectives)."""
    applies = {"no-host-gaps": True, "no-host-stalls": any(getattr(rg, "stalls", None) is not None and len(rg.stalls)
                                                           for rg in g.ranks.values()), "roofline": bool((~np.isnan(g.roof_ns)).any()),
               "balance": len(g.ranks) > 1, "overlap-comm": bool((g.kind == COLL).any())}
    return [parse(spec) for spec in DEFAULTS if applies[spec.partition(":")[0]]]


def path_steps(graphs: Mapping[int, RankGraph], epochs: Mapping[int, int | None]) -> pd.DataFrame:
    """The step table (STEP_COLUMNS) of the unchanged replay alone: no scenario."""
    g = join(graphs, epochs)
    if not len(g):
        return pd.DataFrame(columns=STEP_COLUMNS)
    base = measured(g)
    r = replay(g, base)
    return _step_table(g, base, r, windows(g, r.start_ns, r.end_ns), with_top=False)


@dataclass
class Base:
    """What every scenario of one run shares: the joined graph, its measured Params, their
    replay, the step windows and the step table (prepare)."""

    g: Graph
    base: object  # replay.Params
    r: object  # the unchanged replay
    win: pd.DataFrame
    steps: pd.DataFrame
    costs: NodeCosts | None = None  # the profiler's cost per node (profiler_cost.py), None unknown
    unprofiled: np.ndarray | None = None  # per step, the replay without the profiler's cost
    scales: dict = field(default_factory=dict)  # measured unprofiled step -> calibrated_scale, once per Base
    paced: object = None  # base with each host node at its steady pace (steady_host), made once per Base


def prepare(graphs: Mapping[int, RankGraph], epochs: Mapping[int, int | None]) -> Base | WhatIf:
    """The scenario-independent part of whatif(); a WhatIf saying so where nothing is timed."""
    g = join(graphs, epochs)
    if not len(g):
        return WhatIf(pd.DataFrame(columns=STEP_COLUMNS), pd.DataFrame(columns=SCENARIO_COLUMNS), pd.DataFrame(),
                      g.notes + [Note("nothing_to_replay")])
    base = measured(g)
    r = replay(g, base)
    win = windows(g, r.start_ns, r.end_ns)
    costs = graph_costs(g)
    return Base(g, base, r, win, _step_table(g, base, r, win), costs,
                _replayed(g, base, [], win, costs) if costs is not None else None)


def _replayed(g: Graph, base, group: list[Scenario], win: pd.DataFrame, costs: NodeCosts | None = None) -> np.ndarray:
    """Per step of `win`, the replay of `base` under the scenarios `group`, the profiler's cost
    taken out first where `costs` are given."""
    p = base.copy()
    if costs is not None:
        deflate(g, p, costs)
    for s in group:
        s.apply(g, p)
    rs = replay(g, p)
    return _step_ns(windows(g, rs.start_ns, rs.end_ns), win["step"])


def _replayed_less(b: Base, group: list[Scenario], costs: NodeCosts) -> np.ndarray:
    """_replayed of b less `costs`: calibrated costs come off a GPU trace's host at its steady pace
    (steady_host, made once per Base: every scenario and each step of the calibration replays it);
    a CPU-only trace's host nodes are its work, whose pace the measured step sets."""
    base = b.base
    if costs.steady and not b.g.cpu_only:
        if b.paced is None:
            b.paced = b.base.copy()
            steady_host(b.g, b.paced)
        base = b.paced
    return _replayed(b.g, base, group, b.win, costs)


def whatif(graphs: Mapping[int, RankGraph], epochs: Mapping[int, int | None], specs: list[str] | None = None,
           prepared: Base | WhatIf | None = None, unprofiled_ns: float | None = None,
           unprofiled_run: str | None = None, unprofiled_regions: dict | None = None) -> WhatIf:
    """The whole answer for one run's ranks (module docstring); `specs`: scenarios as given
    (each alone, and all together where several), else the defaults; `prepared`: prepare() of
    these graphs, where a caller already made it (two sets of scenarios over one run);
    `unprofiled_ns`: the step without the profiler as measured, where it was: by the run itself,
    or by the same job under backend none (`unprofiled_run`, that run's name); `unprofiled_regions`:
    per rank its step and phases without the profiler, where the run timed them (regions.py)."""
    chosen = [parse(s) for s in specs] if specs else None  # bad specs fail before any work
    b = prepared if prepared is not None else prepare(graphs, epochs)
    if isinstance(b, WhatIf):
        return b
    g, base, win, steps = b.g, b.base, b.win, b.steps
    chosen = chosen if chosen is not None else default_scenarios(g)
    for s in chosen:
        if s.check is not None:
            s.check(g)
    runs = [(s.label, s.name, s.arg, [s]) for s in chosen]
    if len(together := joint(chosen)) > 1:
        runs.append(("together", "together", "+".join(s.label for s in together), together))
    per_step = {label: _replayed(g, base, group, win) for label, _, _, group in runs}
    unprofiled = unprofiled_of(steps, b, unprofiled_ns, unprofiled_run)
    costs = b.costs
    if costs is not None and unprofiled["unprofiled_source"] == "measured":
        if unprofiled_ns not in b.scales:
            b.scales[unprofiled_ns] = (0.0, None) if g.cpu_only else calibrated_scale(b, unprofiled_ns, unprofiled_regions)
        unprofiled["cost_scale"], floor = b.scales[unprofiled_ns]
        if floor is not None:
            unprofiled["cost_floor"] = {"rank": floor.rank, "region": floor.region, "profiled_ns": floor.profiled_ns,
                                        "unprofiled_ns": floor.unprofiled_ns, "cost_ns": floor.cost_ns}
        costs = costs.scaled(unprofiled["cost_scale"])
    deflated = {label: _replayed_less(b, group, costs) for label, _, _, group in runs} if costs else {}
    base_deflated = _replayed_less(b, [], costs) if costs is not None and costs is not b.costs else b.unprofiled
    paces = paces_of(g, unprofiled_regions) if unprofiled["unprofiled_source"] == "measured" else {}
    if paces:  # a CPU-only trace whose run timed its phases: each phase's operators at its own pace
        paced = base.copy()
        pace(g, paced, paces)
        deflated = {label: _replayed(g, paced, group, win) for label, _, _, group in runs}
        base_deflated = _replayed(g, paced, [], win)
        unprofiled["region_factors"] = {str(r): {"step": rp.step, **rp.regions} for r, rp in paces.items()}
    if "cost_scale" in unprofiled or paces:  # the replay less the calibrated cost: the measured step, where a scale met it
        met = base_deflated[steps["claimed"].to_numpy()]
        met = met[~np.isnan(met)]
        unprofiled["calibrated_unprofiled_ns"] = float(np.median(met)) if len(met) else None
    table = _scenario_table(steps, runs, per_step, deflated, base_deflated, unprofiled.get("unprofiled_step_ns"))
    notes = g.notes + _notes(g, steps) + _pace_notes(g, unprofiled, paces)
    notes += [Note("scenario_unmatched", {"scenario": s.label, "what": s.what}) for s in chosen
              if s.matched is not None and not s.matched(g)]
    for s in chosen:
        made = s.note(g) if s.note is not None else None
        notes += made if isinstance(made, list) else [made] if made else []
    return WhatIf(steps, table, pd.DataFrame(per_step, index=win["step"].to_numpy()), notes, b.r.rounds, unprofiled)


def _pace_notes(g: Graph, unprofiled: dict, paces: dict) -> list[Note]:
    """On a CPU-only trace with a step without the profiler (measured or estimated) whose phases
    were not each paced: that the rule fell back to the whole step (regions.py), and why."""
    source = unprofiled.get("unprofiled_source")
    if not g.cpu_only or paces or source is None:
        return []
    return [Note("phases_not_paced", {"step_measured": source == "measured"})]


def unprofiled_of(steps: pd.DataFrame, b: Base, measured_ns: float | None, under_none: str | None = None) -> dict:
    """The run's step without the profiler: `measured_ns` where it was measured (`under_none`: the
    name of the same job's run under backend none that measured it; None: the run itself), else the
    replay without the profiler's cost (the median over the claimed steps, as the run's own is a
    median of its steps), "estimated" with its band; the replay's figure beside it either way (how
    far the cost model is off, where measured)."""
    claimed = steps["claimed"].to_numpy()
    replayed = b.unprofiled[claimed] if b.unprofiled is not None else np.empty(0)
    replayed = replayed[~np.isnan(replayed)]
    estimate = float(np.median(replayed)) if len(replayed) else None
    band = b.costs.band if b.costs is not None else None
    source = "measured" if measured_ns else "estimated" if estimate is not None else None
    return {"unprofiled_step_ns": measured_ns or estimate, "unprofiled_source": source,
            "unprofiled_run": under_none if measured_ns else None,
            "replayed_unprofiled_ns": estimate,
            "costs": dict(b.costs.source) if b.costs is not None else None,
            "error_band": band if source == "estimated" else None}


def calibrated_scale(b: Base, measured_ns: float, regions: dict | None = None) -> tuple[float, CostFloor | None]:
    """calibrated_step_scale, and where the device paces the step at the fitted cost, at least the
    scale the phases timed without the profiler set (`regions`: profiler_cost.measured_regions;
    regions.cost_floor): (scale, the CostFloor where it set the scale, else None)."""
    scale, device_paced = calibrated_step_scale(b, measured_ns)
    floor = cost_floor(b.g, regions, lambda config: costs_for(config)[0]) if device_paced else None
    if floor is None or floor.scale <= scale:
        return scale, None
    return min(floor.scale, MAX_COST_SCALE), floor


def calibrated_step_scale(b: Base, measured_ns: float) -> tuple[float, bool]:
    """The factor on the fitted cost per event (MAX_COST_SCALE's comment) at which the median over
    the claimed steps of the replay less the cost meets `measured_ns`: 0 where the profiled replay
    is already at or below it (the profiler's cost does not explain the difference: the anchor in
    _without_profiler takes it), MAX_COST_SCALE where even that leaves it above; 1 where the replay
    at the fitted cost is already at its floor (no more cost taken off shortens it: the host paces
    nothing) and below the measured step: there the step says nothing of the host's cost, and a
    smaller one would put the host on the path of a step the device paced. The replay is monotone
    in the factor (less cost, never a later node), so a bracketing search finds it. With it, whether
    the device paces the step at the fitted cost (the scale 1 that says nothing of the host)."""
    claimed = b.steps["claimed"].to_numpy()

    def at(k: float) -> float:
        ns = _replayed_less(b, [], b.costs.scaled(k))[claimed]
        return float(np.median(ns[~np.isnan(ns)])) if (~np.isnan(ns)).any() else np.nan

    lo, f_lo = 0.0, at(0.0)
    if not np.isfinite(f_lo) or f_lo <= measured_ns:
        return 0.0, False
    hi, f_hi = 1.0, at(1.0)
    if f_hi < measured_ns and f_hi <= at(MAX_COST_SCALE) * (1 + SCALE_TOL):
        return 1.0, True  # at the fitted cost the host is off the path: the step above it is the device side's
    while f_hi > measured_ns and hi < MAX_COST_SCALE:
        lo, f_lo, hi = hi, f_hi, min(4 * hi, MAX_COST_SCALE)
        f_hi = at(hi)
    if f_hi > measured_ns:
        return MAX_COST_SCALE, False
    return _bracketed(at, measured_ns, (lo, f_lo), (hi, f_hi)), False


def _bracketed(at, target: float, lo: tuple[float, float], hi: tuple[float, float]) -> float:
    """The x of decreasing `at` where it meets `target`, from lo (above it) and hi (at or below
    it): regula falsi, a side kept twice running halving the other's weight (Illinois), until
    within SCALE_TOL of the target or SCALE_STEPS replays; the nearest x tried."""
    (a, fa), (b, fb) = (lo[0], lo[1] - target), (hi[0], hi[1] - target)
    best, best_err, kept = b, abs(fb), 0
    for _ in range(SCALE_STEPS):
        if best_err <= SCALE_TOL * target or fa == fb:
            break
        x = b - fb * (b - a) / (fb - fa)
        fx = at(x) - target
        if abs(fx) < best_err:
            best, best_err = x, abs(fx)
        if fx > 0:
            a, fa = x, fx
            fb, kept = (fb / 2, kept) if kept == -1 else (fb, -1)
        else:
            b, fb = x, fx
            fa, kept = (fa / 2, kept) if kept == 1 else (fa, 1)
    return best


def _step_ns(win: pd.DataFrame, steps: pd.Series) -> np.ndarray:
    ns = (win["end_ns"] - win["begin_ns"]).to_numpy()
    return pd.Series(ns, index=win["step"].to_numpy()).reindex(steps.to_numpy()).to_numpy(dtype=np.float64)


def _step_table(g: Graph, base, r, win: pd.DataFrame, with_top: bool = True) -> pd.DataFrame:
    measured_win = windows(g, g.start_ns, g.end_ns)
    step_ns = _step_ns(measured_win, win["step"])
    replayed_ns = (win["end_ns"] - win["begin_ns"]).to_numpy(dtype=np.float64)
    path = step_paths(g, base, r, win, wait_estimate(g))
    comp = composition(path, win, g)
    top = top_items(path, win, g) if with_top else {}
    unexplained = unexplained_in(g, measured_win)
    error = np.abs(replayed_ns - step_ns) / np.where(step_ns > 0, step_ns, np.nan)
    out = pd.DataFrame({"step": win["step"].to_numpy(), "step_ns": step_ns, "replayed_ns": replayed_ns,
                        "error_frac": error, "unexplained_ns": unexplained})
    # an edge is missing (GPU starts nothing in the trace explains): the path runs through those
    # pinned starts, so what it is made of is not known (the renderers say so; the step time stands)
    out["path_known"] = out["unexplained_ns"] <= MAX_UNEXPLAINED * out["step_ns"]
    out["claimed"] = (out["error_frac"] <= MAX_ERROR) & out["path_known"]
    for c in CATEGORIES:
        out[f"{c}_ns"] = comp[c].to_numpy() if len(comp) else 0
    out["compute_by_class"] = comp["compute_by_class"].to_numpy() if len(comp) else [{}] * len(out)
    out["path_ranks"] = comp["ranks"].to_numpy() if len(comp) else [[]] * len(out)
    out["path_chains"] = [[g.chain_labels[c] for c in cs] for cs in comp["chains"]] if len(comp) else [[]] * len(out)
    out["top"] = [top.get(int(s), []) for s in out["step"]]
    return out[STEP_COLUMNS]


def unexplained_in(g: Graph, win: pd.DataFrame) -> np.ndarray:
    """Per window, the unexplained delays (edges.unexplained_ns) of the device ops that start in it."""
    ns = g.edges.unexplained_ns
    idx = np.flatnonzero(ns > 0)
    out = np.zeros(len(win), np.int64)
    for k, (b, e) in enumerate(zip(win["begin_ns"], win["end_ns"])):
        inside = (g.start_ns[idx] > b) & (g.start_ns[idx] <= e)
        out[k] = int(ns[idx][inside].sum())
    return out


def _scenario_table(steps: pd.DataFrame, runs: list, per_step: dict[str, np.ndarray], deflated: dict[str, np.ndarray],
                    base_deflated: np.ndarray | None, unprofiled_ns: float | None) -> pd.DataFrame:
    claimed = steps["claimed"].to_numpy()
    rows = []
    for label, name, arg, group in runs:
        pred = per_step[label][claimed]
        meas = steps["step_ns"].to_numpy()[claimed]
        ok = ~np.isnan(pred)
        if not ok.any():
            rows.append({"name": name, "args": arg, "steps": 0, "step_ns": None, "predicted_ns": None,
                         "saving_ns": None, "saving_frac": None, "predicted_unprofiled_ns": None,
                         "saving_unprofiled_ns": None, "saving_unprofiled_frac": None})
            continue
        step_ns, predicted = float(np.median(meas[ok])), float(np.median(pred[ok]))
        user = (predicted if all(s.host_free for s in group) and unprofiled_ns
                else _without_profiler(deflated.get(label), base_deflated, claimed, unprofiled_ns))
        rows.append({"name": name, "args": arg, "steps": int(ok.sum()), "step_ns": step_ns, "predicted_ns": predicted,
                     "saving_ns": step_ns - predicted, "saving_frac": (step_ns - predicted) / step_ns if step_ns else None,
                     "predicted_unprofiled_ns": user, **_user_saving(unprofiled_ns, user)})
    out = pd.DataFrame(rows, columns=SCENARIO_COLUMNS)
    return out.sort_values("saving_ns", ascending=False, na_position="last", kind="stable").reset_index(drop=True)


def _user_saving(unprofiled_ns: float | None, predicted_ns: float | None) -> dict:
    """The saving in the user's time: the step without the profiler less the scenario's prediction of it."""
    if unprofiled_ns is None or predicted_ns is None or not unprofiled_ns > 0:
        return {"saving_unprofiled_ns": None, "saving_unprofiled_frac": None}
    return {"saving_unprofiled_ns": unprofiled_ns - predicted_ns,
            "saving_unprofiled_frac": (unprofiled_ns - predicted_ns) / unprofiled_ns}


def _without_profiler(deflated: np.ndarray | None, base: np.ndarray | None, claimed: np.ndarray,
                      unprofiled_ns: float | None) -> float | None:
    """A scenario's predicted step without the profiler: the run's unprofiled step times what the
    scenario leaves of the step in the replays without the profiler's cost (a measured step the
    model misses by some share, it misses the scenario's step by the same share); their medians
    over the claimed steps both replay, as the measured step is its steps' median: a step no
    scenario shortens (the first profiled one, where a rank starts its profiler late and the
    others wait for it at the first collective) weighs no more than any other, as it does there;
    None where the cost is not known."""
    if deflated is None or base is None or unprofiled_ns is None:
        return None
    ok = claimed & ~np.isnan(deflated) & ~np.isnan(base)
    if not ok.any() or np.median(base[ok]) <= 0:
        return None
    return unprofiled_ns * float(np.median(deflated[ok]) / np.median(base[ok]))


def _unclaimed_notes(bad: pd.DataFrame, n_steps: int, cpu_only: bool) -> list[Note]:
    """One note per reason a step claims no saving, naming its steps (their figures are in the
    step table): the unchanged replay misses them, or an edge is missing (starts nothing in the
    trace explains: GPU ops' without a launch, stream order or other stream; in a CPU-only trace
    the operators' and collectives')."""
    notes = []
    missed = bad[~(bad["error_frac"] <= MAX_ERROR)]
    if len(missed):
        notes.append(Note("replay_misses_steps", {"steps": missed["step"].tolist(), "steps_total": n_steps,
                                                  "max_error_frac": MAX_ERROR,
                                                  "error_frac": float(missed["error_frac"].abs().max())}))
    unexplained = bad[bad["error_frac"] <= MAX_ERROR]
    if len(unexplained):
        notes.append(Note("edge_missing", {"steps": unexplained["step"].tolist(), "steps_total": n_steps,
                                           "unexplained_ns": int(unexplained["unexplained_ns"].sum()),
                                           "cpu_only": cpu_only, "path_known": bool(unexplained["path_known"].all())}))
    return notes


def _notes(g: Graph, steps: pd.DataFrame) -> list[Note]:
    notes = []
    if g.cpu_only:  # the columns keep their names: say what they hold here
        notes.append(Note("cpu_only_path"))
    if len(g.ranks) > 1:
        notes.append(Note("ranks_on_one_clock", {"clock": g.clock}))
    notes += _unclaimed_notes(steps[~steps["claimed"]], len(steps), g.cpu_only)
    if len(g.ranks) == 1 and (g.kind == COLL).any():
        notes.append(Note("one_rank_collectives"))
    return notes
