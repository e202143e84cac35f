"""The straggler verdict in words (reports/verdicts.straggler's dict and the block test's
evidence, reports/evidence.py): renderers only, the numbers formatted by reports/fmt.py."""
from __future__ import annotations

from typing import Any

import pandas as pd

from ..fmt import duration, ms
from ..stats import STRAGGLER_ALPHA


def evidence_phrase(e: dict[str, Any], unit: str = "steps") -> str:
    """'last at 39/39 all-reduces in 3/3 steps, 30.0 ms later per step, 1,700x the clock noise'."""
    text = (f"last at {e['last_at']}/{e['collectives']} {e['kind']} in {e['late_steps']}/{e['steps']} {unit}, "
            f"{ms(e['lateness_ns'], 1)} later per {unit[:-1]}")
    if e.get("x_clock"):
        text += f", {e['x_clock']:,.0f}x the clock noise"
    if e.get("x_step_noise"):
        text += f", {e['x_step_noise']:,.1f}x the step-to-step noise"
    return text


def _within(e: dict[str, Any], unit: str) -> str:
    """'45.6 us later per step on average, under the 76.0 us per step the clocks tell apart': a
    lateness the verdict did not call a straggler's (verdicts.straggler: under its clock floor)."""
    return (f"{duration(e['lateness_ns'])} later per {unit[:-1]} on average, under the {duration(e['floor_ns'])} "
            f"per {unit[:-1]} the clocks tell apart")


def not_enough(block: dict[str, Any] | None) -> str:
    """'; rank 1: last at 3/3 ... , but ...': what the block test saw of the likeliest rank and
    what it lacked, where that rank was late in every step (else the counts say enough)."""
    if not block or block["late_steps"] < block["steps"]:
        return ""
    lacking = (f"late beyond the noise in {block['steps_beyond_noise']} of them" if block["steps_beyond_noise"] <
               block["steps"] else "not last at most of the collectives" if block["last_at"] <= block["collectives"] / 2
               else f"too uneven over too few steps: block t-test p = {block['p_value']:.2g}")
    return f"; rank {block['rank']}: {evidence_phrase(block)}, but {lacking}"


def _summed(per_unit: pd.Series) -> str:
    """'name +x ms, ...': the names' extra ns (dicts, one per unit) summed, the 3 largest."""
    total = pd.Series(dtype="int64")
    for extra in per_unit:
        total = total.add(pd.Series(extra, dtype="int64"), fill_value=0)
    return ", ".join(f"{k} +{ms(n)}" for k, n in total.sort_values(ascending=False).head(3).items())

COUNTS_SHOWN = 8  # ranks a verdict line names with their counts


def _counted(by_rank: dict[int, int]) -> str:
    """'rank 3 at 6, rank 0 at 2': the ranks with the most, largest first; with many ranks the
    first COUNTS_SHOWN that have any, and how many others have none."""
    ordered = sorted(by_rank.items(), key=lambda kv: -kv[1])
    shown = ordered if len(ordered) <= COUNTS_SHOWN else [kv for kv in ordered[:COUNTS_SHOWN] if kv[1]]
    text = ", ".join(f"rank {r} at {n}" for r, n in shown)
    rest = len(ordered) - len(shown)
    if rest:
        text += f"{', ' if shown else ''}{rest:,} {'other ' if shown else ''}ranks at {'at most ' if ordered[len(shown)][1] else ''}{ordered[len(shown)][1]}"
    return text


def verdict_line(v: dict[str, Any], causes: pd.DataFrame | None = None) -> str:
    """One sentence with its numbers: the straggler and why, "alternating", or no single straggler."""
    unit = "steps" if v["basis"] == "steps" else "collectives"
    counts = _counted(v["gated_by_rank"])
    p = "" if v["p_value"] is None else f", p = {v['p_value']:.3g}"
    if v["pattern"] == "straggler":
        r = v["rank"]
        text = (f"straggler: rank {r}: {evidence_phrase(v['evidence'])} "
                if v.get("evidence") and unit == "steps" else
                f"straggler: rank {r} gates {v['gated_by_rank'][r]} of {v['gated_units']} {unit}, "
                f"{ms(v['lateness_ns'])} later than the others per {unit[:-1]} on average ")
        text += f"({v.get('test') or 'signed-rank test of its lateness'}{p})"
        if causes is not None and len(mine := causes[causes["gating_rank"] == r]):
            work, idle = int(mine["extra_work_ns"].sum()), int(mine["extra_idle_ns"].sum())
            device = "CPU" if "CPU" in mine["cause"].iloc[0] else "GPU"  # "more GPU work" or "idle GPU"
            kinds = (f"more {device} work before its collectives ({ms(work)} more busy over those {unit}"
                     if work >= idle else f"an idle {device} before its collectives ({ms(idle)} more idle: host or "
                                          f"launch delay over those {unit}")
            named = "; ".join(f"{what}: {_summed(mine[what])}" for what in ("kernels", "scopes") if _summed(mine[what]))
            text += f"; why: {kinds}" + (f"; {named})" if named and work >= idle else ")")
        return text
    if v["pattern"] == "alternating":
        return (f"alternating: the last rank switches between consecutive {unit} (gated: {counts}; "
                f"switches p = {v['alternation_p']:.3g} against chance)")
    if not v["gated_units"] and not v.get("collectives"):
        return ("no straggler verdict: no collective matched across the ranks (none in the traces, or none "
                "found on every rank), so who waits on whom cannot be told")
    if not v["gated_units"]:
        return f"no clear straggler: no {unit[:-1]} has a rank late beyond the noise (clocks, step-to-step variation)"
    last = _counted(v["last_at_collectives"])
    at_collectives = (f"; last beyond the noise at collectives: {last} of {v['collectives']}"
                      if unit == "steps" else "")
    if (v["p_value"] or 1) < v.get("alpha", STRAGGLER_ALPHA) and (v.get("lateness_ns") or 0) < 0:
        return (f"no clear straggler: the rank last most often is earlier than the others on average "
                f"({ms(v['lateness_ns'])} per {unit[:-1]}; gated: {counts} of {v['gated_units']}{p}): "
                f"the others lose no time to it in all{at_collectives}")
    if v.get("within_noise"):
        w = v["within_noise"]
        return (f"no clear straggler: rank {w['rank']} is late more often than chance (gated: {counts} of "
                f"{v['gated_units']}{p}) but by less than the noise: {_within(w, unit)}{at_collectives}")
    return (f"no clear straggler: no rank is significantly late in most {unit} "
            f"(gated: {counts} of {v['gated_units']}{p}{at_collectives}){not_enough(v.get('block'))}")
