"""Renderers of `tracelab steps` (reports/waits.Waits): terminal tables, CSV, JSON.
Units converted here only."""
from __future__ import annotations

import pandas as pd
from rich.console import Group
from rich.table import Table
from rich.text import Text

from .. import verdicts as V
from ..csvout import csv_text
from ..fmt import ms_cell, us
from ..jsonout import dumps, records
from ..many_steps import MAX_STEP_ROWS, largest, largest_steps
from ..timeline.waits import Waits, straggler_json


MANY_RANKS = 16  # above this many ranks, per-rank columns and rows become spreads (median, most, which rank)
OFFSETS_SHOWN = 8  # ranks whose clock offset the clock line names


def _table(title: str, heads: list[str]) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False)
    for h in heads:
        t.add_column(h, justify="left" if h in ("cause", "scopes and kernels that differ") else "right")
    return t


def step_rank_table(steps: pd.DataFrame, device: str = "GPU") -> Table:
    """`device`: "CPU" in a CPU-only run, whose operators stand for kernels (steps.py)."""
    if steps["rank"].nunique() > MANY_RANKS:
        return step_spread_table(steps)
    work = "operators" if device == "CPU" else "kernels"
    t = _table(f"per step and rank (ms; step = first {device} start to last {device} end of the step; period = its "
               "first start to the next step's, host time between them included)",
               ["step", "rank", work, "step", "period", f"{device} busy", "compute", "comm", "exposed comm", "wait"])
    for _, r in steps.iterrows():
        t.add_row(str(r["step"]), str(r["rank"]), f"{int(r['kernels']):,}", ms_cell(r["span_ns"]),
                  ms_cell(r["period_ns"]), ms_cell(r["busy_ns"]),
                  ms_cell(r["compute_ns"]), ms_cell(r["comm_ns"]), ms_cell(r["exposed_comm_ns"]), ms_cell(r["wait_ns"]))
    return t


def unprofiled_line(steps: pd.DataFrame) -> str:
    """The run's step without the profiler where it was measured (the idle topic's columns), and
    how many host-bound step rows the profiler alone made host-bound; "" where not measured."""
    if "unprofiled_step_ns" not in steps.columns or not steps["unprofiled_step_ns"].notna().any():
        return ""
    line = f"step without the profiler (measured): {ms_cell(steps['unprofiled_step_ns'].dropna().iloc[0])} ms"
    verdicts = steps["host_bound_without_profiler"].dropna()
    made = int((verdicts == False).sum())  # noqa: E712  False, not a missing verdict
    if not len(verdicts):
        return line
    return (f"{line}; {made} of the {len(verdicts)} host-bound step rows host-bound under the profiler only "
            "(without it the device paces the step: tracelab idle)")


def _most(g: pd.DataFrame, column: str) -> str:
    top = g.loc[g[column].idxmax()]
    return f"{ms_cell(top[column])} (rank {int(top['rank'])})"


def step_spread_table(steps: pd.DataFrame) -> Table:
    """Many ranks: per step, the ranks' median and largest step time, compute and wait."""
    t = _table("per step over ranks (ms; median, and the largest with its rank)",
               ["step", "ranks", "step median", "step most", "compute median", "compute most", "wait median",
                "wait most"])
    for step, g in steps.groupby("step", sort=True):
        t.add_row(str(step), f"{len(g):,}", ms_cell(g["span_ns"].median()), _most(g, "span_ns"),
                  ms_cell(g["compute_ns"].median()), _most(g, "compute_ns"), ms_cell(g["wait_ns"].median()),
                  _most(g, "wait_ns"))
    return t


def who_waits_table(doc: dict) -> Table:
    unit = "step" if doc["basis"] == "steps" else "collective"
    ranks = sorted({r for s in doc["steps"] for r in s["wait_ns"]}, key=int)
    many = len(ranks) > MANY_RANKS
    waits = ["wait median", "wait most"] if many else [f"wait r{r}" for r in ranks]
    t = _table(f"who waits on whom, per {unit} (ms)",
               [unit, "gating rank", "skew", *waits, "cause", "scopes and kernels that differ"])
    for s in _largest_skews(doc["steps"]):
        kernels = ", ".join(f"{k} +{ms_cell(v)}" for what in ("scopes", "kernels") for k, v in (s.get(what) or {}).items())
        cause = "" if "cause" not in s else (f"{s['cause']} (+{ms_cell(s['extra_work_ns'])} busy, "
                                             f"+{ms_cell(s['extra_idle_ns'])} idle)")
        w = s["wait_ns"]
        cells = ([ms_cell(pd.Series(w, dtype="float64").median()) if w else "-",
                  f"{ms_cell(max(w.values()))} (rank {max(w, key=w.get)})" if w else "-"] if many
                 else [ms_cell(w.get(r, 0)) for r in ranks])
        t.add_row(str(s[unit]), "-" if s["gating_rank"] is None else str(s["gating_rank"]), ms_cell(s["skew_ns"]),
                  *cells, cause, Text(kernels))
    return t


def _largest_skews(rows: list[dict]) -> list[dict]:
    """At most MAX_STEP_ROWS of who-waits' rows, those of largest skew, in their order."""
    return [rows[i] for i in largest([r["skew_ns"] or 0 for r in rows])]


def skews_line(doc: dict) -> str:
    """What the who-waits table left out, "" when nothing."""
    rows = doc["steps"]
    if len(rows) <= MAX_STEP_ROWS:
        return ""
    unit = "steps" if doc["basis"] == "steps" else "collectives"
    skew = pd.Series([r["skew_ns"] for r in rows], dtype="float64")
    return (f"{len(rows):,} {unit} with a wait: the {MAX_STEP_ROWS} with the largest skew shown (median "
            f"{ms_cell(skew.median())} ms, 90th percentile {ms_cell(skew.quantile(0.9))} ms); --format json lists every one")


def bandwidth_table(bw: pd.DataFrame) -> Table:
    t = _table("bandwidth per collective type and message size (transfer = end - last arrival; medians)",
               ["type", "message (bytes)", "calls", "transfer (us)", "algbw (GB/s)", "busbw (GB/s)"])
    for _, r in bw.iterrows():
        t.add_row(r["type"], f"{int(r['msg_bytes']):,}", f"{int(r['calls']):,}", f"{r['transfer_ns'] / 1e3:,.1f}",
                  f"{r['algbw_gb_s']:,.1f}", f"{r['busbw_gb_s']:,.1f}")
    return t


def _clock_basis(basis: str) -> str:
    """Whether the ranks' offsets were measured (each trace's own wall-clock start) or estimated."""
    if basis == "epoch":
        return "measured: each trace's own wall-clock (epoch) start puts the ranks on one clock"
    if basis == "trace start":
        return "assumed: the traces give no common clock, each rank starts at its first event"
    return basis  # "estimated from collective ends: ..." (reports/waits.py)


def clock_line(clock: dict) -> str:
    if not clock.get("collectives"):
        return "clock: no collectives matched across ranks"
    shown = list(clock["offsets_ns"].items())
    offsets = ", ".join(f"rank {r} {o / 1e3:+,.1f} us" for r, o in shown[:OFFSETS_SHOWN])
    if len(shown) > OFFSETS_SHOWN:
        values = [o for _, o in shown]
        offsets += (f", ... {len(shown) - OFFSETS_SHOWN} more ranks; all within {min(values) / 1e3:+,.1f} to "
                    f"{max(values) / 1e3:+,.1f} us")
    return (f"clock: {_clock_basis(clock['basis'])} (offsets {offsets}); collective ends agree to "
            f"{us(clock['median_end_spread_ns'])} median, {us(clock['max_end_spread_ns'])} max")


UNTIMED_STEPS = ("no step instances: proton records no timeline (each kernel is summed per scope over the run), so "
                 "step times, which rank was late in which step and the step-to-step noise cannot be answered "
                 "from it; capture with --backend torch or nsys for them")


UNTIMED_WAITS = ("no timestamps (proton): which rank waited at which collective, and whether beyond the noise, "
                 "cannot be answered from it; give --steps N (or a run folder whose run.json says the steps) for "
                 "the waits from communication time per step, or capture with --backend torch or nsys")


def steps_tables(w: Waits, totals: pd.DataFrame | None = None, untimed: bool = False) -> Group:
    """`untimed`: no input has a timeline (proton): what cannot be answered is said, not "none"."""
    parts = []
    untimed = untimed or (totals is not None and len(totals) > 0)
    if len(w.steps):
        shown, line = largest_steps(w.steps, "span_ns", "step time", lambda ns: f"{ms_cell(ns)} ms")
        parts += [step_rank_table(shown, w.device), *(Text(t) for t in (line, unprofiled_line(w.steps)) if t)]
    elif untimed:  # untimed inputs: steps are summed away, not absent
        parts.append(Text(UNTIMED_STEPS))
    else:
        parts.append(Text("no steps in these traces (no range matches the step pattern, or none holds a GPU op's "
                          "launch; see --step)"))
    if totals is not None and len(totals):
        parts.append(Text("per step from totals (no instances: " + ", ".join(
            f"rank {int(r['rank'])}: {r['calls_per_step']:,.1f} calls, compute {ms_cell(r['compute_ns_per_step'])} ms, "
            f"comm {ms_cell(r['comm_ns_per_step'])} ms" for _, r in totals.iterrows()) + f", over {int(totals['steps'].iloc[0])} steps)"))
    doc = straggler_json(w)
    if doc["steps"]:
        parts.append(who_waits_table(doc))
        parts += [Text(line) for line in [skews_line(doc)] if line]
    if len(w.bandwidth):
        parts.append(bandwidth_table(w.bandwidth))
    if untimed and not w.clock.get("collectives"):
        lines = [V.waits_from_comm_time(totals)["line"] if totals is not None and len(totals) else UNTIMED_WAITS]
    else:
        lines = [clock_line(w.clock), w.line]
    return Group(*parts, *map(Text, lines if w.ranks > 1 else []))  # one rank: nobody to wait on


def steps_csv(w: Waits, totals: pd.DataFrame | None = None, untimed: bool = False) -> str:
    return csv_text(w.steps if len(w.steps) or totals is None else totals)


def steps_json(w: Waits, totals: pd.DataFrame | None = None, untimed: bool = False) -> str:
    """`untimed` (proton): no straggler verdict (null), as there is no timeline to make one from."""
    from_totals = V.waits_from_comm_time(totals) if totals is not None and len(totals) and w.ranks > 1 else None
    return dumps({"steps": records(w.steps), "per_step_totals": records(totals),
                  "straggler": straggler_json(w) if w.ranks > 1 and not untimed else None,
                  "waits_from_comm_time": from_totals,
                  "bandwidth": records(w.bandwidth)})


# format name -> renderer(waits, totals); the CLI's --format choices come from here
STEPS_RENDERERS = {"table": steps_tables, "csv": steps_csv, "json": steps_json}
