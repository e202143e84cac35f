"""Findings ranked by what fixing them would save: the sources of reports/findings.py
keep their sentences; per run of at most MAX_RANKS ranks with timelines, each finding of that
run whose question a scenario answers gets that scenario's predicted saving (a joint replay of
the run's graph, whatif.analyse) appended, and is ranked by it: the saving per step times the
steps. Findings across runs, of runs without graphs, or without a scenario keep their time at
stake. A run's findings read the same alone or beside other runs.

A finding that names a fix may carry its own scenario in its evidence (`scenario`, with
`scenario_text`: the fp32 GEMMs scaled to the TF32 roof), and its upper-bound clause
(`bound_text`), dropped once the replay gives the saving. Where a fix and a diagnosis of one
run answer to the same scenario (CUDA graphs and the idle GPU: no-host-gaps; the DDP bucket and
the exposed communication: overlap-comm), the fix alone is kept, replayed or not: one finding
per cause and run, and one number (its saving, else its bound)."""
from __future__ import annotations

from dataclasses import replace

from .. import fmt
from ..findings.finding import Finding
from .analyse import WhatIf, prepare, whatif
from .bands import band
from ..unprofiled import MeasuredStep, profiler_made_it, unprofiled_of
from .replay import ReplayError
from .scenarios import label_of

MAX_RANKS = 16  # more ranks: no graphs are kept (nodes.RankGraphReduce), no replay here
NOTHING_FRAC = 0.005  # a replayed saving under 0.5% of the step: "nothing to gain now", no percentage
SCENARIO_OF = {"straggler_findings": "balance:share", "exposed_findings": "overlap-comm", "idle_or_share": "no-host-gaps",
               "idle_findings": "no-host-gaps", "idle_share_findings": "no-host-gaps", "roofline_findings": "roofline",
               "graphs_findings": "no-host-gaps", "ddp_findings": "overlap-comm"}
# a scenario whose finding also states another's saving, where the two differ by a saving's worth
# (NOTHING_FRAC of the step): moving the late rank's extra work onto the others (what ranks the
# finding) and removing it, which is right only where that work is waste
ALSO = {"balance:share": "balance"}
FIXES = frozenset({"graphs_findings", "ddp_findings", "tf32_findings", "alignment_findings",
                   "stall_findings"})  # name the change
# what a fix's finding says instead of the fix (its evidence's fix_text) where the replay of that fix
# gains nothing; a finding may carry its own (no_gain_text)
NO_GAIN = "it is not on the critical path (that runs through other work): this change gains nothing now"
TEXT = {"balance": "the late rank's extra work were removed (every rank's work in each step at the lower median rank's)",
        "balance:share": "the late rank's extra work were shared evenly (each rank's work between two collectives "
                         "at the ranks' mean)",
        "overlap-comm": "communication hidden behind compute",
        "no-host-gaps": "the host issued work as fast as the GPU takes it (no host gaps)",
        "no-host-stalls": "the host's stalls took no time (untraced host time after a sync or between steps)",
        "roofline": "every kernel whose work is known at its roofline time"}


def replay_inputs(inputs: list, names: list[str] | None, measured: MeasuredStep | None = None) -> WhatIf | None:
    """The replay of the scenarios `names` (None: the defaults) over the ranks of one run
    (session.Input), when there are at most MAX_RANKS and each has its graph; else None.
    `measured`: the run's step measured without the profiler (profiler_cost.measured_step), where it was."""
    if not inputs or len(inputs) > MAX_RANKS:
        return None
    graphs = {i.rank: i.digest("whatif") for i in inputs}
    if any(g is None or not len(g) for g in graphs.values()):
        return None
    for rank, g in graphs.items():
        g.rank = rank
    epochs = {i.rank: i.epoch_ns for i in inputs}
    key = (tuple((rank, id(g)) for rank, g in graphs.items()), tuple(sorted(epochs.items())),
           None if names is None else tuple(names), measured)
    for known, _, result in _LAST:  # the report's findings and section, then the terminal's: one replay each
        if known == key:
            return result
    runs = key[:2]  # the same ranks' graphs: the join, the unchanged replay and the step table made once
    prepared = next((b for known, _, b in _PREPARED if known == runs), None) or _prepared(graphs, epochs)
    _PREPARED[:] = [(runs, list(graphs.values()), prepared), *[e for e in _PREPARED if e[0] != runs][:KEPT - 1]]
    if isinstance(prepared, ReplayError):
        raise prepared
    result = whatif(graphs, epochs, names, prepared, measured.ns if measured else None,
                    measured.under_none if measured else None, measured.regions if measured else None)
    _LAST[:] = [(key, list(graphs.values()), result), *_LAST[:KEPT - 1]]  # the graphs held: their ids stay theirs
    return result


def _prepared(graphs: dict, epochs: dict):
    """prepare()'s result, or the ReplayError it raised: a graph it cannot replay (more cycles
    than break_cycles drops) is kept as such, so that the report's findings and its section
    find that out once."""
    try:
        return prepare(graphs, epochs)
    except ReplayError as e:
        return e


# the last KEPT replays of replay_inputs: (key, the graphs, its WhatIf). `tracelab run` prints the
# findings the report just found: the same graphs (the ranks' digests), so the same replays; and
# the last KEPT prepare()s by run (the findings' scenarios and the report section's defaults differ,
# their base does not). Each entry holds its graphs, so the ids in its key stay theirs.
KEPT = 2
_LAST: list[tuple] = []
_PREPARED: list[tuple] = []


def with_savings(ev, by_source: list[tuple[str, list[Finding]]]) -> list[Finding]:
    """The sources' findings, each with its scenario's saving where one applies (module docstring),
    replayed run by run: a run's findings say the same saving whichever other runs are beside it.
    Per run, a diagnosis whose scenario a fix of that run names is left out, replayed or not: one
    finding per cause and run."""
    found = [(source, f, _scenario(source, f)) for source, fs in by_source for f in fs]
    saved = {}
    for run in dict.fromkeys(f.run for _, f, _ in found):
        mine = [(k, f, name) for k, (_, f, name) in enumerate(found) if f.run == run]
        saved.update(_saved_in_run(ev, run, mine) if run is not None else {k: f for k, f, _ in mine})
    fixed = {(f.run, name) for source, f, name in found if source in FIXES and name}
    return [saved[k] for k, (source, f, name) in enumerate(found) if source in FIXES or (f.run, name) not in fixed]


def _saved_in_run(ev, run: str, found: list[tuple[int, Finding, str | None]]) -> dict[int, Finding]:
    """The findings of run `run` (by position), each with the saving of its scenario in that run's replay."""
    names = sorted({also for _, _, name in found if name for also in (name, ALSO.get(name)) if also})
    inputs = [i for i in ev.inputs if i.group == run]
    measured = unprofiled_of(ev.runs, [i.path for i in inputs])
    try:
        w = replay_inputs(inputs, names, measured) if names else None
    except ReplayError:  # a graph whose times contradict (a cycle): the findings stand without a saving
        w = None
    if w is None:
        return {k: f for k, f, _ in found}
    unmatched = {n.values["scenario"] for n in w.notes if n.code == "scenario_unmatched"}
    rows = {_label(r): r for r in w.scenarios.itertuples(index=False) if r.name != "together"}
    whole = bool(len(w.steps)) and bool((w.steps["step"].isna() | (w.steps["step"] < 0)).all())  # no steps: the whole trace
    one = len(w.steps) == 1  # a lone step: its window is a first one, as the whole trace's
    # the step without the profiler: measured (by the run, or by the same job under backend none
    # beside it), else estimated from the profiler's costs: the same figure whatif gives
    return {k: with_saving(f, None if name in unmatched else rows.get(name), whole, one, w.unprofiled,
                           rows.get(ALSO.get(name, "")))
            for k, f, name in found}


def _scenario(source: str, f: Finding) -> str | None:
    return f.evidence["scenario"] if "scenario" in f.evidence else SCENARIO_OF.get(source)  # None: no scenario fits


def _label(row) -> str:
    return label_of(row.name, row.args)


def with_saving(f: Finding, row, whole: bool = False, one: bool = False, unprofiled: dict | None = None,
                also=None) -> Finding:
    """`f` with the replay's saving of its scenario (`row`): in its values, then in its words;
    in the user's time first (without the profiler) where `unprofiled` (WhatIf.unprofiled) gives
    the step without it and the row its prediction. `also`: the row of the scenario ALSO names
    beside it, stated first where the two savings differ by a saving's worth (_differ)."""
    if not _replayed(row):
        return f
    label = _label(row)
    b = band(row.name, row.args)
    # the replay's saving replaces the sentence's upper bound (bound_ns): one number per cause and run
    values = {k: v for k, v in f.values.items() if k != "bound_ns"}
    user = _user_time(row, unprofiled or {})
    values.update(_row_values(row, whole, one, unprofiled or {}))
    # a step the profiler made host-bound is said so by the finding's own writer: of the trace, not the user's step
    under_profiler_only = row.name == "no-host-gaps" and _profiler_made_it(values)
    text = f.text_for(under_profiler_only) if f.text_for is not None and under_profiler_only else f.text
    text = text.removesuffix(f.evidence.get("bound_text", "")) if f.evidence.get("bound_text") else text
    if f.evidence.get("fix_text"):  # the fix its own what-if finds no gain in is not offered
        values["fix_offered"] = gains(values)
        if not values["fix_offered"]:
            text = text.replace(f.evidence["fix_text"], f.evidence.get("no_gain_text") or NO_GAIN, 1)
    words = f.evidence.get("scenario_text") or TEXT.get(label) or TEXT[row.name]
    what = saving_words(values, words, b)
    other = _row_values(also, whole, one, unprofiled or {}) if _replayed(also) else None
    if other is not None and _differ(values, other):  # the other first, then this one, which ranks the finding
        values["also"] = other
        what = (f"{saving_words(other, TEXT[other['scenario']], band(also.name, also.args))}; "
                f"{saving_words(values, words, b, lead='if')}")
    return replace(f, text=f"{text}; {what}", at_stake_ns=_at_stake_ns(row, user), text_for=None,
                   evidence={**f.evidence, "whatif": {"scenario": label, "saving_ns_per_step": row.saving_ns,
                                                      "step_ns": row.step_ns, "steps": int(row.steps),
                                                      "error_band": b.doc() if b else None, **user}}, values=values)


def _replayed(row) -> bool:
    """Whether a scenario's row (None: not replayed) claims a saving over some step."""
    return row is not None and row.saving_ns is not None and bool(row.steps) and row.saving_ns == row.saving_ns


def _row_values(row, whole: bool, one: bool, unprofiled: dict) -> dict:
    """A replayed scenario's figures as a finding's values: its saving per step as profiled, and
    without the profiler where the replay predicts it (_user_time)."""
    b = band(row.name, row.args)
    return {"scenario": _label(row), "saving_ns": float(row.saving_ns), "step_ns": float(row.step_ns),
            "steps": int(row.steps), "saving_share": float(row.saving_frac),
            "window": "trace" if whole else "one step" if one else "per step",
            "error_band": b.doc() if b else None, **_user_time(row, unprofiled)}


def _differ(a: dict, b: dict) -> bool:
    """Whether two scenarios' savings (_row_values) differ by NOTHING_FRAC of the step or more: in
    the user's time where both were predicted without the profiler, else as profiled."""
    if a.get("unprofiled_saving_ns") is not None and b.get("unprofiled_saving_ns") is not None:
        return abs(a["unprofiled_saving_ns"] - b["unprofiled_saving_ns"]) >= NOTHING_FRAC * a["unprofiled_step_ns"]
    return abs(a["saving_ns"] - b["saving_ns"]) >= NOTHING_FRAC * a["step_ns"]


def _profiler_made_it(v: dict) -> bool:
    """Whether most of what the host's gaps would save is the profiler's own (unprofiled.profiler_made_it
    on the replay's saving with and without it: the device paces the user's step, the profiler's
    host cost the traced one)."""
    return bool(profiler_made_it(v["saving_share"], v.get("unprofiled_saving_ns"), v.get("unprofiled_step_ns")))


def _at_stake_ns(row, user: dict) -> int:
    """What ranks the finding: its saving over the steps, in the user's time (without the profiler)
    where the replay predicts it, else as profiled. A step the profiler made host-bound can save
    much under it and little without it, and the user runs without it. But a step without the
    profiler that is only estimated lowers a saving, never raises one: above the profiled replay's,
    the estimated cost per event alone has moved the step's pacer from the host to the device (a
    cost fitted on other machines, often of another profiler setting), which only a step measured
    without the profiler shows; so such a finding ranks at the profiled saving."""
    saving_ns = user.get("unprofiled_saving_ns")
    if saving_ns is None:
        saving_ns = row.saving_ns
    elif _above_profiled(user, row.saving_ns):
        saving_ns = row.saving_ns
    return max(0, int(saving_ns * row.steps))


def _above_profiled(user: dict, profiled_saving_ns: float) -> bool:
    """Whether an estimated saving without the profiler exceeds the profiled replay's (by over
    NOTHING_FRAC of the step): a figure that rests on the cost model alone (_at_stake_ns)."""
    return (user.get("unprofiled_source") == "estimated" and user.get("unprofiled_saving_ns") is not None
            and user["unprofiled_saving_ns"] > profiled_saving_ns + NOTHING_FRAC * user["unprofiled_step_ns"])


def _user_time(row, unprofiled: dict) -> dict:
    """The saving per step without the profiler (unprofiled_saving_ns of unprofiled_step_ns, its
    source: measured or estimated), where the replay predicts the step without it; else {}."""
    step_ns, predicted = unprofiled.get("unprofiled_step_ns"), getattr(row, "predicted_unprofiled_ns", None)
    if step_ns is None or predicted is None or predicted != predicted:
        return {}
    return {"unprofiled_step_ns": float(step_ns), "unprofiled_source": unprofiled["unprofiled_source"],
            "unprofiled_run": unprofiled.get("unprofiled_run"), "unprofiled_saving_ns": float(step_ns) - float(predicted)}


def gains(v: dict) -> bool:
    """Whether a replayed saving (a finding's values) is one to act on: at least NOTHING_FRAC of the
    step, in the user's time (without the profiler) where the run has it, else as profiled."""
    if v.get("unprofiled_saving_ns") is not None and v.get("unprofiled_step_ns"):
        return v["unprofiled_saving_ns"] >= NOTHING_FRAC * v["unprofiled_step_ns"]
    return v["saving_share"] >= NOTHING_FRAC


def saving_words(v: dict, scenario: str, b=None, lead: str = "what if") -> str:
    """The what-if clause of a finding from its values (saving_ns, step_ns, saving_share, window) and
    its scenario's words; `b` its error band (bands.band), said beside a percentage; `lead` its first
    words ("if" for a second scenario after a first)."""
    of = _window_words(v["window"], v["step_ns"])
    if not gains(v):  # the step the user runs moves by nothing: say so, not "0%" with an error band
        user = _nothing_user_words(v)
        return (f"{lead} {scenario}: nothing to gain now ({fmt.ms(v['saving_ns'], 2)} of {of}{user}: the critical "
                "path runs through other work; tracelab whatif)")
    error = f"; {b.short()}" if b else ""
    profiled = f"saves {fmt.ms(v['saving_ns'], 2)} of {of} ({100 * v['saving_share']:.0f}%{error}; tracelab whatif)"
    if v.get("unprofiled_saving_ns") is None:
        return f"{lead} {scenario}: {profiled}"
    gain_ns, step_ns = v["unprofiled_saving_ns"], v["unprofiled_step_ns"]
    subject = "the trace" if v["window"] != "per step" else "the step"
    source = ("estimated with the profiler's own host cost taken out" if v["unprofiled_source"] != "measured"
              else f"{subject} as measured beside the trace" if not v.get("unprofiled_run")
              else f"the median step of the same job under backend none, {v['unprofiled_run']}")
    of = {"trace": f"the {fmt.ms(step_ns, 2)} trace", "one step": f"its one {fmt.ms(step_ns, 2)} step"}.get(
        v["window"], f"{fmt.ms(step_ns, 2)} per step")
    rests = ("; more than the profiled replay's, only because the estimated cost moves the step's pacer to the GPU: "
             "time the step without the profiler to confirm it" if _above_profiled(v, v["saving_ns"]) else "")
    return (f"{lead} {scenario}: saves {fmt.ms(gain_ns, 2)} of {of} without the profiler "
            f"({100 * gain_ns / step_ns:.0f}%; {source}{rests}); "
            f"under the profiler it {profiled}")


def _nothing_user_words(v: dict) -> str:
    """The step the user runs (without the profiler) beside a saving of nothing, where known: its
    predicted saving where the replay predicted one, which is what gains() judged."""
    if v.get("unprofiled_step_ns") is None:
        return ""
    step = fmt.ms(v["unprofiled_step_ns"], 2)
    if v.get("unprofiled_saving_ns") is None:
        return f", {step} without the profiler"
    return f"; {fmt.ms(v['unprofiled_saving_ns'], 2)} of {step} without the profiler"


def _window_words(window: str, step_ns: float) -> str:
    """What the replay's step is. It runs from the previous step's end to its own: the host's time
    between steps is in it, so it is longer than the steps' own (first to last GPU activity) the
    finding's text may give beside it. A first window (the whole trace's, or a lone step's) has no
    previous step's end: it runs from the first op's launch (a lone step's: its first traced
    call), so it is longer than idle's GPU span."""
    if window == "trace":
        return f"the {fmt.ms(step_ns, 2)} trace, its first op (or that op's launch) to its last op's end"
    if window == "one step":
        return f"its one {fmt.ms(step_ns, 2)} step, first traced call to last op's end"
    return f"{fmt.ms(step_ns, 2)} per step, step end to step end"
