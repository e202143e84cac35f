"""Who waits on whom in one run: collectives matched across its ranks on one clock,
the step x rank table, the gating rank per step and why, and the run's verdict.
Pure: events and per-rank epoch starts in, a `Waits` out; text.py and json render it.

Clock: ranks are put on the epoch clock their traces give; where a rank gives none,
or the collectives' ends then disagree by more than half their transfer time (ranks on
different hosts, clocks apart), each rank's offset is estimated from the collective ends
(collectives.end_offsets) and `clock["basis"]` says so, with the offsets.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import pandas as pd

from . import collectives as C
from . import steps as S
from . import verdicts as V
from .timeline import clock_offsets


@dataclass
class Waits:
    collectives: pd.DataFrame
    clock: dict[str, Any]
    steps: pd.DataFrame
    gating: pd.DataFrame
    waits: pd.DataFrame
    causes: pd.DataFrame
    verdict: dict[str, Any]
    line: str = ""
    bandwidth: pd.DataFrame = field(default_factory=pd.DataFrame)


def _on_one_clock(events: pd.DataFrame, epochs: Mapping[int, int | None]) -> tuple[dict[int, int], pd.DataFrame,
                                                                                      dict[str, Any]]:
    offsets = clock_offsets([{"rank": r, "trace_start_epoch_ns": e} for r, e in epochs.items()])
    coll = C.collectives(events, offsets)
    check = C.clock_check(coll)
    basis = "epoch" if offsets is not None else "trace start"
    if len(coll) and (offsets is None or not check["agree"]):
        offsets = {r: (offsets or {}).get(r, 0) + d for r, d in C.end_offsets(coll).items()}
        coll = C.collectives(events, offsets)
        basis = ("estimated from collective ends: " + ("the traces give no common clock" if basis != "epoch"
                 else f"their ends disagreed by {check['median_end_spread_ns'] / 1e3:.1f} us (median) on the epoch clock"))
        check = C.clock_check(coll)
    return offsets or {}, coll, {**check, "basis": basis, "offsets_ns": offsets or {}}


def analyse(events: pd.DataFrame, epochs: Mapping[int, int | None]) -> Waits:
    """All of it for the ranks in `events` (one run, one profiler); `epochs` maps rank to
    its trace's epoch start (None where unknown)."""
    offsets, coll, clock = _on_one_clock(events, epochs)
    steps = S.step_table(events, coll)
    floor = V.step_noise_ns(steps)  # arrivals closer than the work's own step-to-step noise: nobody late
    coll = coll.assign(noise_floor_ns=floor)
    clock["noise_ns"] = V.noise_ns(coll)
    gate = V.gating(coll)
    causes = V.why(events, coll, offsets) if len(gate) else V.why(events.iloc[:0], coll)
    verdict = V.straggler(gate, coll)
    return Waits(coll, clock, steps, gate, V.waits(coll) if len(coll) else pd.DataFrame(),
                 causes, verdict, V.verdict_line(verdict, causes), C.bandwidth_by_size(coll))


def straggler_json(w: Waits) -> dict[str, Any]:
    """The `straggler` object of `compare --format json`: rank (int or None), basis, pattern,
    the evidence numbers, the clock, and per step (or collective) the gating rank, each
    rank's wait and why."""
    v = w.verdict
    causes = w.causes.set_index("unit") if len(w.causes) else pd.DataFrame()
    steps = []
    for _, g in w.gating.iterrows():
        unit = int(g["unit"])
        row = {"step" if v["basis"] == "steps" else "collective": unit,
               "gating_rank": None if pd.isna(g["gating_rank"]) else int(g["gating_rank"]),
               "skew_ns": int(g["skew_ns"]), "collectives": int(g["collectives"]),
               "wait_ns": {str(r): int(ns) for r, ns in w.waits.loc[unit].items()} if unit in w.waits.index else {}}
        if unit in causes.index:
            c = causes.loc[unit]
            row.update(cause=c["cause"], extra_work_ns=int(c["extra_work_ns"]), extra_idle_ns=int(c["extra_idle_ns"]),
                       kernels=c["kernels"], scopes=c["scopes"])
        steps.append(row)
    return {"rank": v["rank"], "pattern": v["pattern"], "basis": v["basis"], "line": w.line,
            "p_value": v["p_value"], "lateness_ns": v["lateness_ns"], "alternation_p": v["alternation_p"],
            "alpha": v["alpha"], "units": v["units"], "gated_units": v["gated_units"],
            "gated_by_rank": {str(r): n for r, n in v["gated_by_rank"].items()},
            "last_at_collectives": {str(r): n for r, n in v["last_at_collectives"].items()},
            "collectives": v["collectives"],
            "clock": {k: (val if not isinstance(val, dict) else {str(r): o for r, o in val.items()})
                      for k, val in w.clock.items()},
            "steps": steps}


# the events columns analyse() reads; a run's ranks are put together with these only (not
# source, device, stream, flops, bytes), so every copy its filters make of all ranks is smaller
COLUMNS = ["rank", "kind", "name", "kernel", "op_class", "scope", "process_group", "start_ns", "dur_ns", "count",
           "msg_bytes", "step"]


def run_events(members: list) -> pd.DataFrame:
    """The events of one run's inputs (reports.compare.Input) in one frame, COLUMNS only."""
    return pd.concat([i.events[[c for c in COLUMNS if c in i.events]] for i in members], ignore_index=True)


def run_verdicts(inputs: list, totals_rows: pd.DataFrame, analysed: dict[str, Waits] | None = None
                 ) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """Per run (inputs of one group, several distinct ranks) its straggler row with a `line`
    in words, and the first such run's straggler_json (None without one); `analysed`, when
    given, receives each run's Waits by group (the report's steps section reuses them). Runs whose ranks
    have timed collectives get the who-waits verdict (rank NA unless significant); the
    others (proton, CPU-only traces: no timeline) keep the totals row of compare.stragglers,
    claimed only where the rank with the most compute also has the least communication."""
    rows, first = [], None
    for group, totals_row in totals_rows.set_index("group", drop=False).iterrows():
        members = [i for i in inputs if i.group == group]
        w = analyse(run_events(members), {i.rank: i.epoch_ns for i in members})
        if analysed is not None:
            analysed[group] = w
        if len(w.collectives):
            rank = w.verdict["rank"]
            rows.append({**totals_row.to_dict(), "rank": rank, "label": "" if rank is None else f"rank{rank}",
                         "pattern": w.verdict["pattern"], "basis": "arrivals at collectives", "line": w.line})
            first = first or {"run": group, **straggler_json(w)}
        else:
            evident = totals_row["comm_rank_min"] and totals_row["comm_max_ns"] > totals_row["comm_ns"]
            rows.append({**totals_row.to_dict(), "pattern": "straggler" if evident else "none",
                         "basis": "totals (no timeline)", "line": ""})
    cols = [*totals_rows.columns, "pattern", "basis", "line"]
    return pd.DataFrame(rows, columns=cols), first
