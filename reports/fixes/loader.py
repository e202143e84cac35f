"""A step that waits on its data loader: the host's time in the DataLoader's `__next__`
(loader_digest.rank_loader) is time the GPU has no batch to work on, wherever it falls (inside a
step's GPU span or between steps). The fix is the loader's, not the launches': load batches in
worker processes, pinned, prefetched. The finding's saving is the what-if replay with those
ranges removed. Pure.
"""
from __future__ import annotations

import re

from ..findings.finding import SECTIONS, Finding, Said, fix_writer, ms

MIN_LOADER_SHARE = 0.10  # the loader's host time from this share of the steps' time: a finding


def waits_on_loader(f: dict) -> bool:
    """Whether a rank's loader digest (loader_digest.rank_loader) holds a finding's share of its steps."""
    return bool(f["span_ns"]) and f["loader_ns"] >= MIN_LOADER_SHARE * f["span_ns"]


def loader_findings(ev) -> list[Finding]:
    """Per run, the rank whose host spends most time in its data loader, where that is at least
    MIN_LOADER_SHARE of its steps' time."""
    several = len({i.group for i in ev.inputs}) > 1
    best: dict[str, tuple] = {}
    for i in ev.inputs:
        f = i.digest("loader")
        if waits_on_loader(f) and (i.group not in best or f["loader_ns"] > best[i.group][1]["loader_ns"]):
            best[i.group] = (i, f)
    return [_finding(group if several else "", i, f) for group, (i, f) in best.items()]


def _finding(group: str, i, f: dict) -> Finding:
    # per step: medians over the steps (loader_digest), the share theirs; totals are sums
    loader_ns, span_ns = (f["loader_ns_per_step"], f["span_ns_per_step"]) if f["steps"] else (f["loader_ns"], f["span_ns"])
    per = f"{ms(loader_ns)} per step of {ms(span_ns)}" if f["steps"] else f"{ms(loader_ns)} of the {ms(span_ns)} trace"
    fix = ("raise num_workers or prefetch_factor, or make the dataset's __getitem__ cheaper: its workers do not keep up"
           if f["multiprocess"] else
           "load batches in worker processes: DataLoader(num_workers=N, pin_memory=True, persistent_workers=True)")
    # the fix said only where its what-if saves time (whatif/findings.with_saving)
    write = fix_writer(f"{group + ': ' if group else ''}rank {i.rank}'s host spends {per} "
                       f"({100 * loader_ns / span_ns:.0f}%) in the data loader ({f['names'][0]}), time the GPU has no "
                       "batch to work on: ", fix)
    scenario = "remove:" + "|".join(re.escape(n) for n in f["names"]) + f"@{i.rank}"
    evidence = {"rank": i.rank, **f, "scenario": scenario, "scenario_text": "the data loader took no time", "fix": fix}
    return Finding(write(Said()), f["loader_ns"], SECTIONS["idle"], evidence, "data_loader",
                   {"run": group, "rank": i.rank, "loader_ns": f["loader_ns"], "span_ns": f["span_ns"],
                    "steps": f["steps"], "share": f["loader_ns"] / f["span_ns"], "multiprocess": f["multiprocess"]},
                   write)
