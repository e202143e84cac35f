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

import numpy as np
import pandas as pd

from tracelab.core.schema import OnEvents, RankData

from . import collectives as C
from ..stats import MIN_LEAD_NS, MIN_LEAD_SHARE, noise
from . import steps as S
from ..fmt import us
from .straggler_text import verdict_line
from .. import verdicts as V
from .intervals import clock_offsets


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
    ranks: int = 0  # ranks analysed; with one, no question across ranks (clock, straggler) applies
    device: str = "GPU"  # whose activity the times are: "CPU" in a CPU-only run


@dataclass
class RankDigest:
    """What who-waits needs of one rank, made from its events alone (`rank_digest`, in the
    worker that parsed it: tracelab.load_many's reduce), so that only these meet across
    ranks: its communication rows (collectives.comm_rows, own clock, arrival order) with the
    busy and idle time of the window before each (verdicts.windows), its step rows
    (steps.step_rows), the ns of each kernel and scope in those windows (verdicts.time_in),
    whether its times are the GPU's or, in a CPU-only run, the CPU's, and its first
    activity's start (own clock; None without any)."""
    comm: pd.DataFrame
    steps: pd.DataFrame
    kernels: pd.DataFrame
    scopes: pd.DataFrame
    device: str
    first_ns: int | None = None


_DIGEST_COMM = ["process_group", "kernel", "msg_bytes", "step", "arrival_ns", "end_ns", "window_start_ns", "busy_ns",
                "idle_ns"]


def rank_digest(events: pd.DataFrame, step_rows: pd.DataFrame | None = None) -> RankDigest:
    """One rank's RankDigest (`events`: its rows only; its rank is set by the caller).
    `step_rows`: steps.step_rows(events) where the caller has it."""
    rows = C.activity(events)
    device = "CPU" if len(rows) and (rows["kind"] == "cpu_op").all() else "GPU"
    comm = _by_arrival(C.comm_rows(events))
    keep = (rows["op_class"] != "communication").to_numpy()
    # the columns read, each taken alone: a frame's selection, then its mask, copies it twice
    work = pd.DataFrame({c: rows[c].array[keep] for c in ("start_ns", "dur_ns", "kernel", "scope")})
    windows = V.windows(work, comm)[_DIGEST_COMM]
    first = int(rows["start_ns"].min()) if len(rows) else None
    steps = S.step_rows(events) if step_rows is None else step_rows
    return RankDigest(windows, steps.drop(columns="rank"), V.time_in(work, windows, "kernel"),
                      V.time_in(work, windows, "scope"), device, first)


def _by_arrival(comm: pd.DataFrame) -> pd.DataFrame:
    """comm_rows by arrival, then end (a stable sort); the frame itself where they are in that order
    already (a GPU's rows by start: the usual case)."""
    order = np.lexsort((comm["end_ns"].to_numpy(), comm["arrival_ns"].to_numpy()))
    if (order == np.arange(len(order))).all():
        return comm
    return comm.take(order).reset_index(drop=True)


def rank_waits(rank: RankData) -> RankDigest:
    """The who-waits digest of a rank (load_many's reduce), its step rows shared with idle's."""
    return rank_digest(rank.events, S.shared_step_rows(rank))


def _from_common_start(coll: pd.DataFrame, digests: Mapping[int, RankDigest], offsets: Mapping[int, int]
                       ) -> pd.DataFrame:
    """Each rank's first window starts where the run's first activity does (on the one clock),
    not at its own: a rank whose host launched its first work late was idle meanwhile.
    Its busy time is unchanged (nothing of its own ran before its first activity)."""
    firsts = [d.first_ns + offsets.get(r, 0) for r, d in digests.items() if d.first_ns is not None]
    first = (coll["window"] == 0).to_numpy() if len(coll) else None
    if not firsts or first is None or not first.any():
        return coll
    arrive = coll["arrival_ns"].to_numpy(dtype=np.int64)
    idle = arrive - np.minimum(min(firsts), arrive) - coll["busy_ns"].to_numpy(dtype=np.int64)
    return coll.assign(idle_ns=np.where(first, idle, coll["idle_ns"].to_numpy(dtype=np.int64)))


def _comm_of(digests: Mapping[int, RankDigest]) -> pd.DataFrame:
    kept = [(rank, d.comm) for rank, d in digests.items() if len(d.comm)]
    if not kept:
        return pd.DataFrame(columns=["rank", "window", *_DIGEST_COMM])
    sizes = [len(c) for _, c in kept]  # one concat, then the rank and window columns at once (not a frame per rank)
    return pd.concat([c for _, c in kept], ignore_index=True).assign(
        rank=np.repeat(np.array([r for r, _ in kept]), sizes),  # the keys' own type, as assign gives it
        window=np.concatenate([np.arange(n, dtype=np.int64) for n in sizes]))


_KEEP = ("window", "busy_ns", "idle_ns")  # each rank's window before the collective (verdicts.why reads them)


def _on_one_clock(rows: pd.DataFrame, epochs: Mapping[int, int | None]) -> tuple[pd.DataFrame, dict[str, Any]]:
    offsets = clock_offsets([{"rank": r, "trace_start_epoch_ns": e} for r, e in epochs.items()])
    coll = C.match(rows, offsets, _KEEP)
    check = C.clock_check(coll)
    basis = "epoch" if offsets is not None else "trace start"
    if len(coll) and (offsets is None or not check["agree"]):
        offsets = {r: (offsets or {}).get(r, 0) + d for r, d in C.end_offsets(coll).items()}
        coll = C.match(rows, offsets, _KEEP)
        basis = ("estimated from collective ends: " + ("the traces give no common clock" if basis != "epoch"
                 else f"their ends disagreed by {us(check['median_end_spread_ns'])} (median) on the epoch clock"))
        check = C.clock_check(coll)
    return coll, {**check, "basis": basis, "offsets_ns": offsets or {}}


def _steps_of(digests: Mapping[int, RankDigest]) -> pd.DataFrame:
    kept = [(rank, d.steps) for rank, d in digests.items() if len(d.steps)]
    if not kept:
        return pd.DataFrame(columns=S.COLUMNS[:-1])
    return pd.concat([s for _, s in kept], ignore_index=True).assign(
        rank=np.repeat(np.array([r for r, _ in kept]), [len(s) for _, s in kept]))


def analyse_digests(digests: Mapping[int, RankDigest], epochs: Mapping[int, int | None]) -> Waits:
    """`analyse` of one run from its ranks' digests (rank -> RankDigest): collectives matched
    across ranks, the step table, the gating rank per step and why, the verdict. Nothing
    here holds more than the ranks' communication rows and per-window name sums."""
    coll, clock = _on_one_clock(_comm_of(digests), epochs)
    coll = _from_common_start(coll, digests, clock["offsets_ns"])
    steps = S.with_waits(_steps_of(digests), coll)
    floor = noise.step_noise_ns(steps)  # arrivals closer than the work's own step-to-step noise: nobody late
    coll = coll.assign(noise_floor_ns=floor, span_noise_ns=noise.span_noise_ns(steps))
    clock["noise_ns"] = noise.noise_ns(coll)
    gate = V.gating(coll)
    with_time = [d for d in digests.values() if len(d.comm) or len(d.steps)]
    device = "CPU" if with_time and all(d.device == "CPU" for d in with_time) else "GPU"
    causes = V.why(coll, {r: d.kernels for r, d in digests.items()}, {r: d.scopes for r, d in digests.items()}, device)
    coll = coll.drop(columns=list(_KEEP))
    verdict = V.straggler(gate, coll)
    return Waits(coll, clock, steps, gate, V.waits(coll) if len(coll) else pd.DataFrame(),
                 causes, verdict, verdict_line(verdict, causes), C.bandwidth_by_size(coll), len(digests), device)


def analyse(events: pd.DataFrame, epochs: Mapping[int, int | None]) -> Waits:
    """All of it for the ranks in `events` (one run, one profiler); `epochs` maps rank to
    its trace's epoch start (None where unknown). The same as analyse_digests of each
    rank's rank_digest, which is how it is computed."""
    return analyse_digests({int(r): rank_digest(g) for r, g in events.groupby("rank", sort=True)}, epochs)


# per-rank tables `tracelab steps` needs, made in the worker that parses each rank (load_many's reduce)
STEP_DIGESTS = {"waits": rank_waits, "kernel_totals": OnEvents(S.kernel_totals), "timed": OnEvents(S.has_times)}


def straggler_json(w: Waits) -> dict[str, Any]:
    """The `straggler` object of `compare --format json`: rank (int or None), basis, pattern,
    the evidence numbers, the clock, and per step (or collective) the gating rank, each
    rank's wait and why."""
    v = w.verdict
    steps = _units_json(w, "step" if v["basis"] == "steps" else "collective")
    return {"rank": v["rank"], "pattern": v["pattern"], "basis": v["basis"], "line": w.line,
            "test": v.get("test", ""), "p_value": v["p_value"], "lateness_ns": v["lateness_ns"], "alternation_p": v["alternation_p"],
            "alpha": v["alpha"], "units": v["units"], "gated_units": v["gated_units"],
            "gated_by_rank": {str(r): n for r, n in v["gated_by_rank"].items()},
            "last_at_collectives": {str(r): n for r, n in v["last_at_collectives"].items()},
            "collectives": v["collectives"], "evidence": v.get("evidence"), "block_test": v.get("block"),
            "clock": {k: (val if not isinstance(val, dict) else {str(r): o for r, o in val.items()})
                      for k, val in w.clock.items()},
            "steps": steps}


def _units_json(w: Waits, unit_key: str) -> list[dict[str, Any]]:
    """straggler_json's `steps`: per unit of the gating table (`unit_key`: "step" or "collective"),
    its gating rank, skew, collectives, each rank's wait and, where gated, why (the tables read
    once as plain values, not a row at a time)."""
    causes = {int(c["unit"]): c for c in w.causes.to_dict("records")} if len(w.causes) else {}
    ranks = [str(r) for r in w.waits.columns]
    waits = {int(u): {r: int(ns) for r, ns in zip(ranks, row)} for u, row in zip(w.waits.index, w.waits.to_numpy())}
    out = []
    for unit, rank, skew, n in zip(w.gating["unit"], w.gating["gating_rank"], w.gating["skew_ns"], w.gating["collectives"]):
        unit = int(unit)
        row = {unit_key: unit, "gating_rank": None if pd.isna(rank) else int(rank), "skew_ns": int(skew),
               "collectives": int(n), "wait_ns": waits.get(unit, {})}
        if unit in causes:
            c = causes[unit]
            row.update(cause=c["cause"], extra_work_ns=int(c["extra_work_ns"]), extra_idle_ns=int(c["extra_idle_ns"]),
                       kernels=c["kernels"], scopes=c["scopes"])
        out.append(row)
    return out


def run_waits(members: list) -> Waits:
    """analyse_digests of one run's inputs (reports.session.Input): each input's digest as
    its worker made it (summary["waits"]), else made here from its events."""
    digests = {i.rank: i.digest("waits") for i in members}
    return analyse_digests(digests, {i.rank: i.epoch_ns for i in members})


def material_lead(totals_row) -> bool:
    """Whether the rank with the most compute leads the runner-up by what 'slowest' calls
    material (stats.MIN_LEAD_SHARE of it, and stats.MIN_LEAD_NS): totals have no steps to weigh noise
    with, so a 0.1% lead (two proton ranks of equal work) names nobody."""
    lead = totals_row["compute_ns"] - totals_row["next_compute_ns"]
    return bool(lead > max(MIN_LEAD_SHARE * totals_row["compute_ns"], MIN_LEAD_NS))


def run_verdicts(inputs: list, totals_rows: pd.DataFrame, analysed: dict[str, Waits] | None = None
                 ) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """Per run (inputs of one group, several distinct ranks) its straggler row with a `line`
    in words, and the first such run's straggler_json (None without one); `analysed`, when
    given, receives each run's Waits by group (the report's steps section reuses them). Runs whose ranks
    have timed collectives get the who-waits verdict (rank NA unless significant); the
    others (proton, CPU-only traces: no timeline) keep the totals row of align.stragglers,
    claimed only where the rank with the most compute leads materially (material_lead) and
    also has the least communication."""
    rows, first = [], None
    for group, totals_row in totals_rows.set_index("group", drop=False).iterrows():
        members = [i for i in inputs if i.group == group]
        w = run_waits(members)
        if analysed is not None:
            analysed[group] = w
        if len(w.collectives):
            rank = w.verdict["rank"]
            rows.append({**totals_row.to_dict(), "rank": rank, "label": "" if rank is None else f"rank{rank}",
                         "pattern": w.verdict["pattern"], "basis": "arrivals at collectives", "line": w.line})
            first = first or {"run": group, **straggler_json(w)}
        else:
            evident = (material_lead(totals_row) and totals_row["comm_rank_min"]
                       and totals_row["comm_max_ns"] > totals_row["comm_ns"])
            rows.append({**totals_row.to_dict(), "pattern": "straggler" if evident else "none",
                         "basis": "totals (no timeline)", "line": ""})
    cols = [*totals_rows.columns, "pattern", "basis", "line"]
    return pd.DataFrame(rows, columns=cols), first
