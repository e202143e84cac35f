"""Host-bound steps made of kernels shorter than their own launch call: CUDA graphs or
torch.compile(mode="reduce-overhead"), which launch the whole step at once; not said of a trace
that is mostly capturing CUDA graphs (meta graph_capture_calls, launch calls inside captures, at
least the kernels launched one by one: vLLM's graph-capture traces) nor of one with fewer than
MIN_LAUNCHED_FOR_GRAPHS kernels launched one by one (its idle is warm-up, not launches). From the idle
topic's result (reports/topics.result_of: each step's idle by cause and bound, the launch statistics) and
`replays.rank_replays` (how many kernels already came from CUDA-graph replays). Pure.

The time at stake is the step's idle before the host began each launch and during the launch
calls (idle_host_ns + idle_launch_ns), less its one-off launch calls (replays.ONE_OFF_LAUNCH_NS:
a first call loading its module, which a capture pays too): what a graph replay, launched in one
call, could take off at most. It is an upper bound, said so: the replay still runs the kernels, and the host's own
work between steps stays. Host stalls (idle_stall_ns: untraced host time after a sync or between steps) are not in
it: no graph removes them, and the what-if's no-host-gaps keeps them, so its saving is a graph's; where they hold a
finding's share of the steps, the finding says so with their own fix (fixes/stall.py) beside the graph's. Where the
data loader does, no-host-gaps (which removes the loader's waits with the other host gaps) is no measure of a
graph's saving and the bound stands.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd

from ..findings.finding import SECTIONS, Finding, ms
from ..findings.findings_more import MIN_IDLE_SHARE_OF_STEP  # host and launch idle under it: no finding
from ..timeline.causes import MIN_LAUNCHED_FOR_GRAPHS, bound_words
from ..topics import result_of
from .loader import waits_on_loader
from ..timeline.stalls import BETWEEN_STEPS
from .stall import fix_of, stall_figures
from .stall_digest import stalls_matter

GRAPHS_FIX = ("capture the step in a CUDA graph (torch.cuda.graph) or compile it with "
              "torch.compile(mode=\"reduce-overhead\"), which launches it in one call")
MIN_SHORT_SHARE = 0.5  # kernels shorter than their launch call: at least this share of those launched
MAX_REPLAYED_SHARE = 0.5  # a step already replayed from CUDA graphs is not told to use them


def graphs_figures(ev, i) -> dict | None:
    idle = result_of("idle", i)
    steps, launches = idle.steps, idle.launches
    if not len(steps) or not len(launches):
        return None
    host = steps[steps["bound"] == "host"]
    launch = launches.iloc[0]
    replays = i.digest("replays")
    launched = replays["launched"] - replays["replayed"]  # one by one
    if 2 * len(host) <= len(steps) or launched < MIN_LAUNCHED_FOR_GRAPHS or replays["replayed"] > MAX_REPLAYED_SHARE * replays["launched"]:
        return None
    if i.meta.graph_capture_calls >= launched:  # a trace mostly of capturing: it uses graphs already
        return None
    in_host = [replays.get("by_step", {}).get(int(s)) for s in host["step"].dropna()]
    in_host = [n for n in in_host if n]
    if in_host and sum(r for _, r in in_host) > MAX_REPLAYED_SHARE * sum(n for n, _ in in_host):
        return None  # the host-bound steps already replay CUDA graphs (compiled decode steps): no advice to use them
    stake = (host["idle_host_ns"] + host["idle_launch_ns"]).to_numpy(dtype=np.int64)
    stake = np.maximum(0, stake - _one_off_ns(replays, host))  # first-call loading: no graph saves it
    return {"steps": len(steps), "host_bound": len(host), "launched": launched,
            "short_kernels": replays["short"], "short_gpu_ns": replays["short_gpu_ns"],
            "kernels_per_step": launch["kernels_per_step"],
            "stake_ns_per_step": float(stake.mean()), "stake_ns": int(stake.sum()),
            "span_ns_per_step": float(host["span_ns"].mean()), "replayed": replays["replayed"],
            "whole_trace": bool(steps["step"].isna().all())}  # no steps: the one window is the trace


def _one_off_ns(replays: dict, host: pd.DataFrame) -> np.ndarray:
    """Per host-bound step row, the time in its one-off launch calls (replays.ONE_OFF_LAUNCH_NS:
    module loading or compiling); the trace's all where it has no steps (one row)."""
    by_step = replays.get("one_off_launch_ns_by_step", {})
    steps = host["step"].to_numpy(dtype=np.float64, na_value=np.nan)
    return np.array([replays.get("one_off_launch_ns", 0) if s != s else by_step.get(int(s), 0) for s in steps.tolist()],
                    dtype=np.int64)


def graphs_findings(ev) -> list[Finding]:
    """Per run, the rank whose host-bound steps idle longest before and during launches, where
    most steps are host-bound, most kernels are shorter than their launch call, few came from
    graph replays, and that idle is at least MIN_IDLE_SHARE_OF_STEP of the step."""
    several = len({i.group for i in ev.inputs}) > 1
    best: dict[str, tuple] = {}
    for i in ev.inputs:
        f = graphs_figures(ev, i) if i.timed else None
        if (f and f["short_kernels"] >= MIN_SHORT_SHARE * f["launched"]
                and f["stake_ns_per_step"] >= MIN_IDLE_SHARE_OF_STEP * f["span_ns_per_step"]
                and (i.group not in best or f["stake_ns"] > best[i.group][1]["stake_ns"])):
            best[i.group] = (i, f)
    out = []
    for group, (i, f) in best.items():
        bound = (f"; at most {ms(f['stake_ns_per_step'])} per step of {ms(f['span_ns_per_step'])} to gain (the GPU's "
                 "idle before and during launches, an upper bound)")
        stalls = _stall_words(i.digest("stalls"))
        # the replay says later whether the profiler made these steps host-bound
        text_for = partial(graphs_sentence, f"{group + ': ' if several and group else ''}rank {i.rank}", f,
                           (stalls[0] if stalls else "") + bound)
        # bound_ns: the upper bound the sentence states, dropped with its words where the replay gives the saving
        values = {"run": group, "rank": i.rank, **f, "bound_ns": f["stake_ns_per_step"], **(stalls[1] if stalls else {})}
        evidence = {"rank": i.rank, **f, "bound_text": bound, "fix_text": GRAPHS_FIX}  # said where its what-if saves
        if stalls:  # no-host-gaps keeps them, as a graph does: say so beside its saving
            evidence["scenario_text"] = "the host issued work as fast as the GPU takes it (no host gaps; its stalls kept)"
        if _waits_on_its_loader(i):  # the host's gaps hold the loader's time, which no graph takes off: its bound stands
            evidence["scenario"] = None
        out.append(Finding(text_for(False), f["stake_ns"], SECTIONS["idle"], evidence, "host_bound", values, text_for))
    return out


def graphs_sentence(who: str, f: dict, tail: str, under_profiler_only: bool = False) -> str:
    """The CUDA-graph finding's sentence for rank `who` of figures `f` (graphs_figures), ending on
    `tail`; its steps said 'host-bound under the profiler' where `under_profiler_only` (bound_words)."""
    per_step = "" if f["kernels_per_step"] is None or pd.isna(f["kernels_per_step"]) else \
        f" ({f['kernels_per_step']:,.0f} kernels per step)"
    host = bound_words("host", under_profiler_only)
    where = (f" is {host} over the whole trace, which has no steps," if f["whole_trace"] else
             f"'s steps are {host} ({f['host_bound']} of {f['steps']})")
    return (f"{who}{where} and {f['short_kernels']:,} of the {f['launched']:,} kernels it launched one by one{per_step} "
            f"run shorter than their own launch call: {GRAPHS_FIX}{tail}")


def _stall_words(stalls: dict) -> tuple[str, dict] | None:
    """Where a rank's host stalls (stall_digest.rank_stalls) hold a finding's share of its steps: the
    clause that says they stay under a graph, with their own fix (fixes/stall.py), and its values."""
    if not stalls_matter(stalls):
        return None
    stall_ns, by_after = stall_figures(stalls)
    after = str(by_after.index[0])
    per_ns = stall_ns / max(stalls["steps"], 1)
    where = "between steps" if after == BETWEEN_STEPS else f"after {after}"
    return (f"; its host's stalls ({ms(per_ns)} per step, most {where}) stay under a graph: {fix_of(after)}",
            {"stall_ns_per_step": per_ns, "stall_after": after})


def _waits_on_its_loader(i) -> bool:
    """Whether the rank's host spends a finding's share of its steps in its data loader
    (fixes/loader.py): then removing every host gap (no-host-gaps) is no measure of what a CUDA
    graph saves."""
    return waits_on_loader(i.digest("loader"))
