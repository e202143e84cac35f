"""Findings between runs (reports/findings/findings.py's SOURCES): the kernel that differs most
between runs or profilers beyond the noise, and what each profiler cost against a run under
backend none. Each states what compare and reports/runtable.py decided, nothing more.

Runs of one config under one profiler (repeats: `tracelab run --repeat`, or the same command run
twice) differ by the machine's drift, not by a change the user made: a kernel differing between
them is said as the spread between repeats, only beyond the gate's floor of how far two runs of one
job move by chance (RUN_NOISE per run, NOISE_SIGMAS of their difference), and ranked with the
findings about the measurement, after those about the job."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from tracelab.core.classify import classify_one

from ..ranks import Input
from ..fmt import duration
from ..findings.finding import SECTIONS, Finding
from ..runtable import cost_of, same_config
from ..stats import NOISE_SIGMAS, RUN_NOISE

MIN_DIFF_SHARE = 0.01  # a kernel's difference under this share of that input's GPU time is no finding
NAME_CHARS = 80
# how far a kernel's time may move between two runs of one job by chance, as |log ratio|: each run's
# level has a relative sd of RUN_NOISE (the gate's floor), their difference sqrt(2) of it
REPEAT_FLOOR_LOG = NOISE_SIGMAS * math.sqrt(2) * RUN_NOISE


def difference_findings(ev) -> list:
    """Between runs or profilers (inputs of several groups or sources): the kernel whose
    difference costs most time between the first input and an input of another run (of the
    same rank where there is one), where compare names one of the two the slowest (its lead
    beyond the step-to-step noise) and the time is material (MIN_DIFF_SHARE of that input's
    GPU time); compared as compare compares them: totals, or per call where the inputs' steps
    differ. Ranks of one run differing are the straggler's finding, not this one."""
    first, others = _across_runs(ev.inputs)
    others = [o for o in others if _same_work(ev, first, o)]
    t = ev.kernels
    if not others or t.empty:
        return []
    rows = t[t["slowest"].astype(str).isin([first, *others])]
    # a collective kernel's time holds the ranks' waits, which each profiler's pace moves: that is the
    # straggler's and exposure's finding, not a difference of the kernel between runs
    collective = rows["kernel"].astype(str).map(classify_one).eq("communication")
    rows = rows[~collective].set_index("kernel")
    per_call = t.attrs.get("basis_kind") == "per call"
    best = None
    for other in others:
        stake = _stake_ns(rows, first, other, per_call)
        stake = stake[stake >= MIN_DIFF_SHARE * float(t[f"time_ns[{other}]"].sum())]
        if _repeats(ev, first, other):  # drift between repeats: only beyond the floor between runs
            stake = stake[_beyond_floor(rows.loc[stake.index, f"ratio[{other}]"])]
        if len(stake) and (best is None or stake.max() > best[2]):
            best = (stake.idxmax(), other, float(stake.max()))
    if best is None:
        return []
    kernel, other, stake_ns = best
    row = rows.loc[kernel]
    noise = _has_noise(ev, first) and _has_noise(ev, other)
    repeats = _repeats(ev, first, other)
    evidence = {"kernel": kernel, "against": first, "input": other, "delta_ns": float(row[f"delta_ns[{other}]"]),
                "stake_ns": stake_ns, "basis": str(t.attrs.get("basis", "")), "measurement": repeats}
    values = {"run": None, **evidence, "ratio": _number(row[f"ratio[{other}]"]), "per_call": per_call,
              "beyond_noise": noise, "repeats": repeats, "repeat_floor_share": _floor_share() if repeats else None}
    text = _difference_text(kernel, row, first, other, per_call, stake_ns, noise)
    return [Finding(_repeats_text(text) if repeats else text, int(stake_ns), SECTIONS["comparison"], evidence,
                    "difference", values)]


def _repeats(ev, a: str, b: str) -> bool:
    """Whether inputs `a` and `b` are repeats: runs of one config (_same_work) under one profiler."""
    ra, rb = ev.run_json(a), ev.run_json(b)
    return _same_work(ev, a, b) and ra.get("backend") == rb.get("backend")


def _beyond_floor(ratio: pd.Series) -> pd.Series:
    """Per kernel, whether its ratio between two repeats is beyond REPEAT_FLOOR_LOG (a kernel in one
    of them only: beyond)."""
    r = pd.to_numeric(ratio, errors="coerce").to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        far = np.abs(np.log(r)) > REPEAT_FLOOR_LOG
    return pd.Series(far | ~np.isfinite(r) | (r <= 0), index=ratio.index)


def _floor_share() -> float:
    """REPEAT_FLOOR_LOG as a share (0.33: one run 33% above the other)."""
    return math.exp(REPEAT_FLOOR_LOG) - 1


def _repeats_text(text: str) -> str:
    return (f"between repeats of one config, no change made: {text}; run-to-run drift beyond the "
            f"{100 * _floor_share():.0f}% two runs of one job may differ by (tracelab gate weighs the repeats)")


def _number(x) -> float | None:
    return None if pd.isna(x) else float(x)


def _stake_ns(rows: pd.DataFrame, first: str, other: str, per_call: bool) -> pd.Series:
    """Per kernel, the time its difference is worth in `other`: the difference of totals, or
    per call times its calls there; a kernel only one of the two runs, its time."""
    mine, theirs = rows[f"time_ns[{first}]"], rows[f"time_ns[{other}]"]
    delta = rows[f"delta_ns[{other}]"].abs()
    stake = delta * rows[f"count[{other}]"] if per_call else delta
    return stake.where((mine > 0) == (theirs > 0), (theirs - mine).abs()).fillna(0.0)


def _same_work(ev, a: str, b: str) -> bool:
    """Whether inputs `a` and `b` ran the same workload and config (backend aside), as their
    run folders' run.json say (runs.same_config); unknown (a bare trace) is not the same: a
    difference between two programs is no finding about either."""
    ra, rb = ev.run_json(a), ev.run_json(b)
    return ra is not None and rb is not None and same_config(ra, rb)


def _has_noise(ev, label: str) -> bool:
    """Whether input `label` has steps, so that a noise could be weighed against."""
    return any(bool(i.digest("noise")["steps"]) for i in ev.inputs if i.label == label)


def _difference_text(kernel: str, row: pd.Series, first: str, other: str, per_call: bool, stake_ns: float,
                     noise: bool = True) -> str:
    mine, theirs = row[f"time_ns[{first}]"], row[f"time_ns[{other}]"]
    if (mine > 0) != (theirs > 0):
        there, absent = (first, other) if mine > 0 else (other, first)
        return f"{_short(kernel)} runs in {there} ({duration(stake_ns)}) and not in {absent}"
    delta, ratio = float(row[f"delta_ns[{other}]"]), row[f"ratio[{other}]"]
    more = "more" if delta > 0 else "less"
    if per_call:
        return (f"{_short(kernel)} takes {duration(abs(delta))} {more} per call in {other} than in {first} "
                f"(x{ratio:.2f}; {duration(stake_ns)} over its {int(row[f'count[{other}]']):,} calls there{_beyond(noise)})")
    return f"{_short(kernel)} takes {duration(abs(delta))} {more} in {other} than in {first} (x{ratio:.2f}{_beyond(noise)})"


def _beyond(noise: bool) -> str:
    """The noise claim, only where both inputs' steps give a noise."""
    return ", beyond the step-to-step noise" if noise else "; no steps to weigh it against a noise"


def _across_runs(inputs: list[Input]) -> tuple[str, list[str]]:
    """The first input's label, and the labels of the inputs of other runs (or sources) to set
    beside it: those of its rank where any has it, else all of them."""
    if not inputs or (len({i.group for i in inputs}) < 2 and len({i.source for i in inputs}) < 2):
        return "", []
    head = inputs[0]
    others = [i for i in inputs[1:] if i.group != head.group or i.source != head.source]
    same_rank = [i.label for i in others if i.rank == head.rank]
    return head.label, same_rank or [i.label for i in others]


def _short(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 1] + "\u2026"


def profiler_cost_findings(ev) -> list:
    """What each profiler cost against a run of the same config under backend none
    (reports/runs.cost_of, the run table's row), left out where it says within the noise;
    the runs against one baseline in one sentence, the largest cost first, ranked by that
    share of the runs' longest traced span among the findings about the measurement, which
    follow those about the job (`measurement` in the evidence: no change to the job fixes it)."""
    by_base: dict[str, list[tuple[str, dict, dict]]] = {}
    for name, info in ev.runs:
        cost = cost_of(info, ev.runs)
        if cost is not None and not cost.get("within_noise"):
            by_base.setdefault(cost["baseline"], []).append((name, info, cost))
    out = []
    for base, costs in by_base.items():
        costs.sort(key=lambda c: -abs(c[2]["change"]))
        unit = f" {costs[0][2]['unit']}" if costs[0][2].get("unit") else ""
        each = [f"{info.get('backend')} {100 * cost['change']:+.1f}% ({cost['mine']:,.4g}{unit}, {name})"
                for name, info, cost in costs]
        text = (f"profiling changes {costs[0][2]['measure']} against the same config under none "
                f"({costs[0][2]['theirs']:,.4g}{unit}, {base}): " + "; ".join(each))
        at_stake = max(abs(cost["change"]) * _run_span_ns(ev, name) for name, _, cost in costs)
        by_run = {name: cost for name, _, cost in costs}
        out.append(Finding(text, int(at_stake), SECTIONS["runs"], {"baseline": base, "measurement": True, "runs": by_run},
                           "profiler_cost", {"run": None, "baseline": base, "measure": costs[0][2]["measure"],
                                             "unit": costs[0][2].get("unit"),
                                             "change_share": {name: float(c["change"]) for name, c in by_run.items()}}))
    return out


def _run_span_ns(ev, folder: str) -> float:
    """The longest traced span of the inputs read from run folder `folder` (0 without)."""
    labels = {i.label for i in ev.inputs if i.path and Path(i.path).parent.name == folder}
    df = ev.per_input
    if "span_ns" not in df or not labels:
        return 0.0
    span = df.loc[df["label"].isin(labels), "span_ns"].max()
    return 0.0 if pd.isna(span) else float(span)
