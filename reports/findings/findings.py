"""The answer first: a few sentences, each with its number, ranked by the time at stake.

Pure: the analyses tracelab already made (a Comparison with its per-run who-waits, the
inputs' digests, the run folders' run.json) in, a list of Finding out. The report puts
them on top (each linked to the section that proves it) and the CLI prints the same
text at the end of `run`, `breakdown`, `compare` and `steps`.

Each source is one function `(Evidence) -> list[Finding]` that its topic registers
(reports/topics.py: all_sources() gathers them in TOPICS order). A source states only
what its analysis already decided (the straggler verdict of reports/verdicts.py, the
`slowest` of compare, which is named only beyond the step-to-step noise, the profiler
cost of reports/results/runs.py); it re-decides nothing, and says nothing where the data cannot
support it: the finding is left out, not hedged.

    found = findings(Evidence(inputs, comparison(inputs, "kernel"), run_infos))
"""
from __future__ import annotations

from typing import Callable

import pandas as pd

from ..steps.collectives import collective_type
from ..fmt import duration
from .finding import SECTIONS, Evidence, Finding
from .findings_more import idle_findings
from ..topics import TOPICS
from ..whatif.findings import with_savings

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
            made = _verdict_finding(row["group"], w)
        elif row["pattern"] == "straggler":
            made = _totals_finding(row)
        else:
            made = None
        out += [made] if made else []
    return out


def _verdict_finding(group: str, w) -> Finding | None:
    v = w.verdict
    unit = _unit(v)
    gated = w.gating.dropna(subset=["gating_rank"])
    if v["pattern"] == "straggler":
        r = v["rank"]
        skew = int(gated.loc[gated["gating_rank"] == r, "gating_skew_ns"].sum())
        text = (f"{_run(group)}rank {r} is the straggler: the last to arrive in {v['gated_by_rank'][r]} of "
                f"{v['gated_units']} {unit}s, {duration(v['lateness_ns'])} later than the other ranks per {unit} on average"
                + _why(w.causes, r, unit))
        return Finding(text, skew, SECTIONS["steps"], {"verdict": v, "line": w.line, "gated_skew_ns": skew})
    if v["pattern"] == "alternating":
        skew = int(gated["gating_skew_ns"].sum())
        counts = ", ".join(f"rank {r} in {n}" for r, n in sorted(v["gated_by_rank"].items(), key=lambda kv: -kv[1])[:4]
                           if n)
        text = (f"{_run(group)}no single straggler: the last rank alternates between consecutive {unit}s "
                f"({counts} of {v['gated_units']}), {duration(skew)} of skew in all")
        return Finding(text, skew, SECTIONS["steps"], {"verdict": v, "line": w.line, "gated_skew_ns": skew})
    return None


def _why(causes: pd.DataFrame, rank: int, unit: str) -> str:
    """'; its GPU does 10.7 ms more work before them per step (extra_work)' from verdicts.why
    (the mean over the units it gates), or ''."""
    mine = causes[causes["gating_rank"] == rank] if len(causes) else causes
    if not len(mine):
        return ""
    work, idle = mine["extra_work_ns"].mean(), mine["extra_idle_ns"].mean()
    device = "CPU" if "CPU" in str(mine["cause"].iloc[0]) else "GPU"
    if work < idle:
        return f"; its {device} sits idle {duration(idle)} longer before them per {unit} (the host launched late)"
    names = pd.Series(dtype="float64")
    for extra in mine["scopes"].tolist() + mine["kernels"].tolist():
        names = names.add(pd.Series(extra, dtype="float64"), fill_value=0)
    top = f" ({names.idxmax()})" if len(names) else ""
    return f"; its {device} does {duration(work)} more work before them per {unit}{top}"


def _totals_finding(row: pd.Series) -> Finding:
    lead = int(row["compute_ns"] - row["next_compute_ns"])
    text = (f"{_run(row['group'])}{row['label']} computes {duration(lead)} more than any other rank and spends the least "
            f"in communication ({duration(row['comm_max_ns'] - row['comm_ns'])} less than the rank that waits most): "
            "the others wait for it (from totals; no timestamps to say in which steps)")
    return Finding(text, lead, SECTIONS["totals"], {"compute_ns": int(row["compute_ns"]),
                                                      "next_compute_ns": int(row["next_compute_ns"])})


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
        text = (f"{_run(group)}rank {int(top['rank'])} {wait}{share} of its communication is exposed, "
                f"{duration(top['exposed_ns'])} of its {duration(top['span_ns'])} span{median}")
        out.append(Finding(text, int(top["exposed_ns"]), SECTIONS["overlap"],
                           {"rank": int(top["rank"]), "exposed_ns": int(top["exposed_ns"]),
                            "comm_ns": int(top["comm_ns"]), "span_ns": int(top["span_ns"])}))
    return out


def _wait_text(w, rank: int) -> str:
    """'waits 3.0 ms per step at allreduce, ' (the collective type it waits at most), or ''."""
    if w is None or not len(w.collectives) or not len(w.steps):
        return ""
    mine = w.steps[w.steps["rank"] == rank]
    coll = w.collectives[w.collectives["rank"] == rank]
    if not len(mine) or not mine["wait_ns"].sum():
        return ""
    kind = coll.groupby("kernel")["wait_ns"].sum().idxmax()
    return f"waits {duration(mine['wait_ns'].mean())} per step at {collective_type(str(kind)) or kind}, "


def idle_share_findings(ev: Evidence) -> list[Finding]:
    """Per run, the rank whose GPU idles longest within its span (the timeline's union of
    busy intervals), where that is over MIN_IDLE_SHARE_OF_SPAN of the span; runs side by side in one
    sentence. Why it idled is issue 21's idle_findings (reports/idle/idle.py), which replaces
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
    return [Finding(text, int(most["idle_ns"]), SECTIONS["overlap"],
                    {"runs": {group: {"rank": int(top["rank"]), "idle_ns": int(top["idle_ns"]),
                                      "span_ns": int(top["span_ns"])} for group, top, _ in runs}})]


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%"


# Each source: (Evidence) -> list[Finding], here, in findings_more.py (idle by cause, issue 21;
# the roofline, issue 20) and findings_runs.py (between runs); a topic registers its own
# (reports/topics.py): a new one is one more function and one name in its Topic.
def idle_or_share(ev: Evidence) -> list[Finding]:
    """Idle by cause (issue 21) where the runs' steps give it, else the idle share alone."""
    return idle_findings(ev) or idle_share_findings(ev)


def all_sources() -> list[Callable[[Evidence], list[Finding]]]:
    """Every topic's findings sources, in TOPICS order (reports/topics.py)."""
    return [source for topic in TOPICS for source in topic.findings_sources()]


def findings(ev: Evidence, sources: list[Callable[[Evidence], list[Finding]]] | None = None) -> list[Finding]:
    """At most MAX_FINDINGS findings of every source (default: every topic's), the most time at stake first."""
    found = with_savings(ev, [(s.__name__, s(ev)) for s in (all_sources() if sources is None else sources)])
    return sorted(found, key=lambda f: -f.at_stake_ns)[:MAX_FINDINGS]  # issue 27: by what-if saving where known


NONE = "nothing in these inputs stands out beyond the noise and the thresholds of each finding"


def lines(found: list[Finding]) -> list[str]:
    """The findings as the terminal prints them (the report shows the same text)."""
    if not found:
        return [f"findings: none ({NONE})"]
    return ["findings:", *(f"  {n}. {f.text}" for n, f in enumerate(found, 1))]
