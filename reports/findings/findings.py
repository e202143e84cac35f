"""The answer first: a few sentences, each with its number, ranked by the time at stake.

Pure: the analyses tracelab already made (a Comparison with its per-run who-waits, the
inputs' digests, the run folders' run.json) in, a list of Finding out. The report puts
them on top (each linked to the section that proves it) and the CLI prints the same
text at the end of `run`, `breakdown`, `compare` and `steps`.

Each source is one function `(Evidence) -> list[Finding]` that its topic registers
(reports/topics.py: all_sources() gathers them in TOPICS order). A source states only
what its analysis already decided (the straggler verdict of reports/verdicts.py, the
`slowest` of compare, which is named only beyond the step-to-step noise, the profiler
cost of reports/runtable.py); it re-decides nothing, and says nothing where the data cannot
support it: the finding is left out, not hedged.

    found = findings(Evidence(inputs, comparison(inputs, "kernel"), run_infos))
"""
from __future__ import annotations

from typing import Callable

import pandas as pd

from ..align.align import lead_and_wait, lead_explains_wait
from ..timeline.collectives import collective_type
from ..fmt import duration
from .finding import SECTIONS, Evidence, Finding
from .findings_more import CAUSE_TEXT, idle_findings
from ..timeline.causes import CAUSES, HOST_CAUSES
from ..topics import TOPICS, result_of, with_savings

MAX_FINDINGS = 8
MIN_EXPOSED_SHARE = 0.01  # exposed communication under this share of the rank's span is no finding
MIN_IDLE_SHARE_OF_SPAN = 0.10  # an idle GPU under this share of the rank's span is no finding

def _run(group: str) -> str:
    return f"{group}: " if group else ""


def _unit(verdict: dict) -> str:
    return "step" if verdict["basis"] == "steps" else "collective"


def straggler_findings(ev: Evidence) -> list[Finding]:
    """The run's who-waits verdict (reports/verdicts.straggler), stated only where it is a
    straggler or an alternation; for runs without timestamps (proton), the totals row's
    straggler where compare's rule claimed one."""
    out = []
    for _, row in ev.comparison.stragglers.iterrows():
        w = ev.comparison.waits.get(row["group"])
        if w is not None and len(w.collectives):
            made = _verdict_finding(row["group"], w, _idle_cause(ev, row["group"], w.verdict.get("rank")))
        elif row["pattern"] == "straggler":
            made = totals_finding(row)
        else:
            made = None
        out += [made] if made else []
    return out


def _idle_cause(ev: Evidence, group: str, rank) -> tuple[str, str] | None:
    """(the largest idle cause (timeline/causes.CAUSES), the bound of most steps) of `rank` of
    `group`, where its idle digest gives causes; None where it does not."""
    found = [i for i in ev.inputs if i.group == group and i.rank == rank and i.timed]
    steps = result_of("idle", found[0]).steps if found else None
    if steps is None or not len(steps) or not steps["idle_ns"].sum():
        return None
    return max(CAUSES, key=lambda c: steps[c].sum()), str(steps["bound"].mode().iloc[0])


def _verdict_finding(group: str, w, idle_cause: tuple[str, str] | None = None) -> Finding | None:
    v = w.verdict
    unit = _unit(v)
    gated = w.gating.dropna(subset=["gating_rank"])
    if v["pattern"] == "straggler":
        r = v["rank"]
        skew = int(gated.loc[gated["gating_rank"] == r, "gating_skew_ns"].sum())
        of_which = (f"the {v['gated_units']} {unit}s with a rank late beyond the noise"
                    if v.get("units") and v["gated_units"] < v["units"] else f"{v['gated_units']} {unit}s")
        evidence = {"verdict": v, "line": w.line, "gated_skew_ns": skew}
        values = {"run": group, "rank": int(r), "last_units": int(v["gated_by_rank"][r]),
                  "gated_units": int(v["gated_units"]), "unit": unit, "lateness_ns": float(v["lateness_ns"]),
                  "skew_ns": skew, "late_by_idle": _late_by_idle(w.causes, r)}
        # 'balance' evens the ranks' work: it cannot move a rank its host held back, which is said
        # before why (its idle); a rank late with more work gets balance's what-if after why instead
        move = f"; evening the ranks' {gating_device(w.causes, r)} work would not move it" if values["late_by_idle"] else ""
        if move:
            evidence["scenario"] = None
        # the number first, then one clause per fact: how often it was last, what would move it, why
        text = (f"{_run(group)}rank {r} is the straggler, {duration(v['lateness_ns'])} late per {unit} on average "
                f"(last in {v['gated_by_rank'][r]} of {of_which}){move}" + _why(w.causes, r, unit, idle_cause))
        return Finding(text, skew, SECTIONS["steps"], evidence, "straggler", values)
    if v["pattern"] == "alternating":
        skew = int(gated["gating_skew_ns"].sum())
        counts = ", ".join(f"rank {r} in {n}" for r, n in sorted(v["gated_by_rank"].items(), key=lambda kv: -kv[1])[:4]
                           if n)
        text = (f"{_run(group)}no single straggler: the last rank alternates between consecutive {unit}s "
                f"({counts} of {v['gated_units']}), {duration(skew)} of skew in all")
        return Finding(text, skew, SECTIONS["steps"], {"verdict": v, "line": w.line, "gated_skew_ns": skew},
                       "alternating", {"run": group, "gated_units": int(v["gated_units"]), "unit": unit,
                                       "last_units_by_rank": {int(r): int(n) for r, n in v["gated_by_rank"].items()},
                                       "skew_ns": skew})
    return None


def gating_device(causes: pd.DataFrame, rank: int) -> str:
    """'CPU' where the rank's gating causes are a CPU-only trace's (verdicts.why says so), else 'GPU'."""
    mine = causes[causes["gating_rank"] == rank] if len(causes) else causes
    return "CPU" if len(mine) and "CPU" in str(mine["cause"].iloc[0]) else "GPU"


def _why(causes: pd.DataFrame, rank: int, unit: str, idle_cause: tuple[str, str] | None = None) -> str:
    """': its GPU does 10.7 ms more work per step before its collectives (extra_work)' from verdicts.why
    (the median over the units it gates: the first unit's window opens at the run's first activity,
    so it holds the ranks' profiler start skew, which a mean spreads over the rest), or ''. More idle is said in the words of the rank's
    largest idle cause (`idle_cause`, reports/idle.py), so this never says "the host launched
    late" where the idle view blames something else."""
    mine = causes[causes["gating_rank"] == rank] if len(causes) else causes
    if not len(mine):
        return ""
    work, idle = mine["extra_work_ns"].median(), mine["extra_idle_ns"].median()
    device = gating_device(causes, rank)
    if work < idle:
        return f": its {device} idles {duration(idle)} more per {unit} before its collectives ({_idle_words(device, idle_cause)})"
    names = pd.Series(dtype="float64")
    for extra in mine["scopes"].tolist() + mine["kernels"].tolist():
        names = names.add(pd.Series(extra, dtype="float64"), fill_value=0)
    top = f" ({names.idxmax()})" if len(names) else ""
    return f": its {device} does {duration(work)} more work per {unit} before its collectives{top}"


def _late_by_idle(causes: pd.DataFrame, rank: int) -> bool:
    """Whether the straggler's units it gates show more idle than extra work before them (_why)."""
    mine = causes[causes["gating_rank"] == rank] if len(causes) else causes
    return bool(len(mine)) and mine["extra_work_ns"].median() < mine["extra_idle_ns"].median()


def _idle_words(device: str, idle_cause: tuple[str, str] | None) -> str:
    """Why a rank's device sat idle, as its idle causes say; where its steps are mostly bound by
    something else (reports/idle.step_bound), that is said too, so that the idle finding's
    "gpu-bound" and this sentence do not read as a contradiction."""
    if device == "CPU":
        return "time outside its CPU operators"
    if idle_cause is None:
        return "the trace does not say why"
    cause, bound = idle_cause
    if cause in HOST_CAUSES:
        return ("the host launched late" if bound == "host" else
                f"the host ran late there, though overall its {'GPU' if bound == 'gpu' else bound} is the bound")
    return f"its idle mostly {CAUSE_TEXT[cause]}"


def totals_finding(row: pd.Series) -> Finding:
    """The totals' straggler (no timestamps): the others' extra communication time is their wait
    for it. Where its compute lead does not explain that wait (align.lead_explains_wait: the
    eager decode of the README's command on 2 GPUs under proton), the sentence says the rest is
    outside its GPU kernels."""
    lead, wait = lead_and_wait(row)
    who = f"{_run(row['group'])}{row['label']}"
    evidence = {"compute_ns": int(row["compute_ns"]), "next_compute_ns": int(row["next_compute_ns"]),
                "comm_ns": int(row["comm_ns"]), "comm_max_ns": int(row["comm_max_ns"])}
    values = {"run": row["group"], "input": str(row["label"]), "lead_ns": int(lead), "wait_ns": int(wait)}
    if lead_explains_wait(row):
        text = (f"{who} computes {duration(lead)} more than any other rank and spends the least "
                f"in communication ({duration(wait)} less than the rank that waits most): "
                "the others wait for it (from totals; no timestamps to say in which steps)")
        return Finding(text, lead, SECTIONS["totals"], evidence, "straggler_totals", values)
    text = (f"the other ranks wait for {who} in collectives: up to {duration(wait)} more communication kernel "
            f"time than its own; its GPU computes only {duration(lead)} more than any other rank "
            f"({100 * lead / wait:.1f}% of that wait), so the rest of its lateness is outside its GPU kernels "
            "(its host launching late, or a wait of its own); the trace has no timestamps to say which, or in "
            "which steps: capture with --backend torch or nsys")
    return Finding(text, wait, SECTIONS["totals"], {**evidence, "unexplained_wait_ns": wait - lead}, "straggler_totals",
                   {**values, "unexplained_wait_ns": int(wait - lead)})


def exposed_findings(ev: Evidence) -> list[Finding]:
    """Per run, the rank with the most exposed communication (not overlapped by compute):
    its wait per step at its collectives (who-waits) and the exposed share of its
    communication (the timeline), where that is over MIN_EXPOSED_SHARE of its span."""
    df = ev.per_input
    if "exposed_ns" not in df:
        return []
    out = []
    for group, g in df.dropna(subset=["exposed_ns"]).groupby("group", sort=False):
        top = g.loc[g["exposed_ns"].idxmax()]
        if not top["comm_ns"] or top["exposed_ns"] < MIN_EXPOSED_SHARE * top["span_ns"]:
            continue
        share = f"{100 * top['exposed_ns'] / top['comm_ns']:.0f}%"
        wait = _wait_text(ev.comparison.waits.get(group), int(top["rank"]))
        median = (f" (median over its {len(g):,} ranks: {duration(g['exposed_ns'].median())})" if len(g) > 2 else "")
        text = (f"{_run(group)}rank {int(top['rank'])}{' ' + wait if wait else ': '}{share} of its communication is exposed, "
                f"{duration(top['exposed_ns'])} of its {duration(top['span_ns'])} span{median}")
        out.append(Finding(text, int(top["exposed_ns"]), SECTIONS["overlap"],
                           {"rank": int(top["rank"]), "exposed_ns": int(top["exposed_ns"]),
                            "comm_ns": int(top["comm_ns"]), "span_ns": int(top["span_ns"])}, "exposed_comm",
                           {"run": group, "rank": int(top["rank"]), "exposed_ns": int(top["exposed_ns"]),
                            "comm_ns": int(top["comm_ns"]), "span_ns": int(top["span_ns"]),
                            "share": float(top["exposed_ns"] / top["comm_ns"])}))
    return out


def _wait_text(w, rank: int) -> str:
    """'waits 3.0 ms per step at allreduce, ' (the collective type it waits at most); without
    steps, its wait in all and what of it the first collective holds (ranks whose traces start
    apart wait there for the others to begin); or ''."""
    if w is None or not len(w.collectives):
        return ""
    coll = w.collectives[w.collectives["rank"] == rank]
    if not len(w.steps):
        return _stepless_wait_text(coll)
    mine = w.steps[w.steps["rank"] == rank]
    if not len(mine) or not mine["wait_ns"].sum():
        return ""
    kind = coll.groupby("kernel")["wait_ns"].sum().idxmax()
    return f"waits {duration(mine['wait_ns'].median())} per step at {collective_type(str(kind)) or kind}, "


def _stepless_wait_text(coll: pd.DataFrame) -> str:
    total = int(coll["wait_ns"].sum()) if len(coll) else 0
    if not total:
        return ""
    kind = coll.groupby("kernel")["wait_ns"].sum().idxmax()
    first = int(coll.sort_values("arrival_ns")["wait_ns"].iloc[0])
    at_first = f" ({duration(first)} of it at its first)" if 2 * first >= total else ""
    named = collective_type(str(kind))
    return (f"waits {duration(total)} in all at its {len(coll):,} collectives, most at "
            f"{named if named and named != 'other' else kind}{at_first}; ")


def idle_share_findings(ev: Evidence) -> list[Finding]:
    """Per run, the rank whose GPU idles longest within its span (the timeline's union of
    busy intervals), where that is over MIN_IDLE_SHARE_OF_SPAN of the span; runs side by side in one
    sentence. Why it idled is idle_findings (reports/idle/idle.py), which replaces
    this one (idle_or_share)."""
    df = ev.per_input
    if "idle_ns" not in df:
        return []
    runs = []
    for group, g in df.dropna(subset=["idle_ns"]).groupby("group", sort=False):
        top = g.loc[g["idle_ns"].idxmax()]
        if top["span_ns"] and top["idle_ns"] >= MIN_IDLE_SHARE_OF_SPAN * top["span_ns"]:
            runs.append((group, top, g))
    if not runs:
        return []
    if len(runs) == 1:
        group, top, g = runs[0]
        median = f" (median over its {len(g):,} ranks: {duration(g['idle_ns'].median())})" if len(g) > 2 else ""
        text = (f"{_run(group)}rank {int(top['rank'])}'s GPU is idle {_pct(top['idle_ns'], top['span_ns'])} of its "
                f"{duration(top['span_ns'])} span ({duration(top['idle_ns'])}; busy {duration(top['busy_ns'])}){median}")
    else:
        timed_runs = int(df["idle_ns"].notna().groupby(df["group"]).any().sum())
        text = "the GPU sits idle in " + ("every timed run" if len(runs) == timed_runs else f"{len(runs)} runs") \
            + ": " + "; ".join(f"{group} rank {int(top['rank'])} {_pct(top['idle_ns'], top['span_ns'])} of "
                                   f"{duration(top['span_ns'])}" for group, top, _ in runs)
    most = max((top for _, top, _ in runs), key=lambda t: t["idle_ns"])
    by_run = {group: {"rank": int(top["rank"]), "idle_ns": int(top["idle_ns"]), "span_ns": int(top["span_ns"])}
              for group, top, _ in runs}
    values = {"run": runs[0][0], **by_run[runs[0][0]]} if len(runs) == 1 else {"run": None, "runs": by_run}
    return [Finding(text, int(most["idle_ns"]), SECTIONS["overlap"], {"runs": by_run}, "idle_share", values)]


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%"


# Each source: (Evidence) -> list[Finding], here, in findings_more.py (idle by cause;
# the roofline) and runs/findings_runs.py (between runs); a topic registers its own
# (reports/topics.py): a new one is one more function and one name in its Topic.
def idle_or_share(ev: Evidence) -> list[Finding]:
    """Idle by cause where the runs' steps give it, else the idle share alone."""
    return idle_findings(ev) or idle_share_findings(ev)


def all_sources() -> list[Callable[[Evidence], list[Finding]]]:
    """Every topic's findings sources, in TOPICS order (reports/topics.py)."""
    return [source for topic in TOPICS for source in topic.findings_sources()]


def findings(ev: Evidence, sources: list[Callable[[Evidence], list[Finding]]] | None = None,
             topic=None) -> list[Finding]:
    """At most MAX_FINDINGS findings of every source (default: every topic's), the most time at stake first.
    `topic` (topics.Topic): only those of its own sources and those proved in its report section (a
    fix that the fixes topic names, shown by the command whose section proves it), weighed beside
    every other source's as the report weighs them: a command says its topic's findings in the
    report's words, and a diagnosis that a fix replaces there is replaced here too."""
    made = [(s.__name__, s(ev)) for s in (all_sources() if sources is None else sources)]
    found = with_savings(ev, made)
    if topic is not None:
        own = {s.__name__ for s in topic.findings_sources()}
        codes = {f.code for name, fs in made if name in own for f in fs}  # one code per source (finding.CODES)
        found = [f for f in found if f.code in codes or f.section == SECTIONS.get(topic.name)]
    # by what-if saving where known; what the measurement itself cost (the profiler) after the job's
    return capped(sorted(found, key=lambda f: (bool(f.evidence.get("measurement")), -f.at_stake_ns)))


def capped(ranked: list[Finding], most: int = MAX_FINDINGS) -> list[Finding]:
    """The first `most` of the ranked findings, but each run's first (a finding across runs counts
    as a run of its own) before any run's second: the cap never drops a run's only finding while
    another run has two. Those kept stay in rank order."""
    first: dict[str | None, int] = {}
    for k, f in enumerate(ranked):
        first.setdefault(f.run, k)
    kept = set(sorted(first.values())[:most])
    kept.update([k for k in range(len(ranked)) if k not in kept][:most - len(kept)])
    return [f for k, f in enumerate(ranked) if k in kept]


NONE = "nothing in these inputs stands out beyond the noise and the thresholds of each finding"


UNTIMED = ("{sources} records no timeline: the idle GPU and its causes, the exposed communication, who waited "
           "in which step and the step-to-step noise cannot be answered from it; of what it records (kernel "
           "time per scope), nothing stands out beyond the thresholds of each finding")


def none_text(untimed_sources: set[str] | frozenset = frozenset(), timed: bool = True) -> str:
    """Why there is no finding: nothing stands out, or (inputs without a timeline only, proton)
    which questions those inputs cannot answer, never a bare "none"."""
    if untimed_sources and not timed:
        return UNTIMED.format(sources=" and ".join(sorted(untimed_sources)))
    return NONE


def as_json(found: list[Finding]) -> list[dict]:
    """The findings for JSON users: each one's code, values and text (Finding.as_json), in rank order."""
    return [f.as_json() for f in found]


def lines(found: list[Finding], untimed_sources: set[str] | frozenset = frozenset(), timed: bool = True) -> list[str]:
    """The findings as the terminal prints them (the report shows the same text); `untimed_sources`
    and `timed` (any input with a timeline) say why there are none (none_text)."""
    if not found:
        return [f"findings: none ({none_text(untimed_sources, timed)})"]
    return ["findings:", *(f"  {n}. {f.text}" for n, f in enumerate(found, 1))]
