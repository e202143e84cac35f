"""A step that waits on its host's stalls: untraced host time after a sync or between steps while
the device idles (reports/timeline/stalls.py). Their fix is the stall's, named by what precedes
it, never the launches' (a CUDA graph or torch.compile still waits for the host's batch or
`.item()`): prefetch the batch where the host stalls between steps, move the `.item()` or the
sync out of the step (or make it non-blocking) where it stalls after one. The finding's saving is
the what-if replay without that rank's stalls (`no-host-stalls@RANK`): across ranks, the others'
waits for it at the next collective shorten too. Pure.
"""
from __future__ import annotations

import pandas as pd

from ..findings.finding import SECTIONS, Finding, Said, fix_writer, ms
from ..timeline.stalls import BETWEEN_STEPS, READS
from .stall_digest import stall_in_most_steps, stall_ns_per_step, stalls_matter

SYNCS = ("Synchronize", "Memcpy", "memcpy")  # names of a sync call (CUDA, HIP): a wait for the device
FIXES = {
    "between": "prefetch the batch (DataLoader(num_workers=N, pin_memory=True), its copy to the device non_blocking=True) "
               "and keep other per-step host work (logging, checkpoints) off the step's path",
    "read": "move the `.item()` (or `.cpu()`, `.tolist()`) out of the step or make it non-blocking: copy into pinned "
            "memory with non_blocking=True and read it after the next step's work is launched",
    "sync": "move the synchronize out of the step, or wait on an event (torch.cuda.Event) only where the result is "
            "read, so that the host keeps launching",
    "host": "the host works outside every operator there (Python, I/O, a sleep) or was not scheduled (a CPU shared "
            "with other jobs): find it with a Python sampler (py-spy) or a record_function range, and move it off the "
            "step's path",
}


def fix_of(after: str) -> str:
    """The fix of a stall by what precedes it (timeline/stalls' `after`)."""
    if after == BETWEEN_STEPS:
        return FIXES["between"]
    if after.partition(" (")[0] in READS or "Memcpy" in after or "memcpy" in after:
        return FIXES["read"]
    return FIXES["sync"] if any(s in after for s in SYNCS) else FIXES["host"]


def stall_findings(ev) -> list[Finding]:
    """Per run, the rank whose host stalls longest, where that is at least MIN_STALL_SHARE of its
    steps' time."""
    several = len({i.group for i in ev.inputs}) > 1
    best: dict[str, tuple] = {}
    for i in ev.inputs:
        f = i.digest("stalls")
        if stalls_matter(f) and (i.group not in best or f["stalls"]["stall_ns"].sum() > best[i.group][1]["stalls"]["stall_ns"].sum()):
            best[i.group] = (i, f)
    return [_finding(group if several else "", i, f) for group, (i, f) in best.items()]


def stall_figures(f: dict) -> tuple[int, pd.Series]:
    """(the stalls' total ns, their ns by what precedes them, most first: its first index is what most
    of their time follows) of a stall digest (stall_digest.rank_stalls)."""
    stalls: pd.DataFrame = f["stalls"]
    by_after = stalls.groupby("after")["stall_ns"].sum().sort_values(ascending=False, kind="stable")
    return int(stalls["stall_ns"].sum()), by_after


def _finding(group: str, i, f: dict) -> Finding:
    stalls: pd.DataFrame = f["stalls"]
    total_ns, by_after = stall_figures(f)
    after = str(by_after.index[0])
    steps = f["steps"]
    # per step: medians over the steps (timeline/steps.median_per_step), the share theirs; where most
    # steps stall too little for that (a stall every N-th step), the total over the steps that stall
    median_ns = stall_ns_per_step(f) if steps else None
    per_step = stall_in_most_steps(f)
    stall_ns, span_ns = (median_ns, f["span_ns_per_step"]) if per_step else (total_ns, f["span_ns"])
    stalled = stalls.loc[stalls["step"] >= 0, "step"].nunique()
    per = (f"{ms(stall_ns)} per step of {ms(span_ns)}" if per_step else
           f"{ms(total_ns)} in {stalled} of its {steps} steps ({ms(span_ns)})" if steps else
           f"{ms(total_ns)} of the {ms(span_ns)} trace")
    where = "between steps" if after == BETWEEN_STEPS else f"after {after}"
    more = f" ({len(by_after) - 1} other kinds: {ms(total_ns - by_after.iloc[0])})" if len(by_after) > 1 else ""
    # the fix said only where its what-if saves time (whatif/findings.with_saving)
    write = fix_writer(f"{group + ': ' if group else ''}rank {i.rank}'s host stalls {per} ({100 * stall_ns / span_ns:.0f}%), "
                       f"most {where}{more}: {len(stalls)} stretch{'' if len(stalls) == 1 else 'es'} of untraced host time "
                       f"while {'no CPU operator ran' if f['cpu_only'] else 'its GPU idled, which faster launching does not remove'}: ",
                       fix_of(after))
    values = {"run": group, "rank": i.rank, "stall_ns": total_ns, "span_ns": f["span_ns"], "steps": steps,
              "share": total_ns / f["span_ns"], "stall_ns_per_step": median_ns,
              "span_ns_per_step": f["span_ns_per_step"] if steps else None, "after": after, "stalls": len(stalls)}
    evidence = {**values, "by_after_ns": {str(k): int(v) for k, v in by_after.items()},
                "scenario": f"no-host-stalls@{i.rank}", "scenario_text": "the host's stalls took no time",
                "fix": fix_of(after)}
    return Finding(write(Said()), total_ns, SECTIONS["idle"], evidence, "host_stall", values, write)
