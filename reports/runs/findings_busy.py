"""How busy the GPU could at most have been, where the trace has no timeline (proton: kernel
time per scope, no timestamps): a run folder records its profiled window's step time
(`profiled_step_ns`, the same tokens timed while the profiler recorded them) and how many steps
the window held (`profiled_steps`); the kernels' summed time over that window bounds the GPU's
busy share from above (summed kernels on several streams only count overlap twice). A share
under MAX_BUSY_SHARE is a host that sets the pace: the step's own launches, which compiling or
capturing the step removes. Per run, the rank whose share is least. Pure."""
from __future__ import annotations

from ..fmt import duration
from ..findings.finding import SECTIONS, Finding

MAX_BUSY_SHARE = 0.5  # the GPU busy at most this share of each step: the host sets the pace


def busy_bound_findings(ev) -> list[Finding]:
    """Per run of untimed inputs in a run folder that timed its profiled steps: the rank with
    the lowest bound on its GPU's busy share, where that bound is under MAX_BUSY_SHARE."""
    several = len({i.group for i in ev.inputs}) > 1
    best: dict[str, tuple] = {}
    for i in ev.inputs:
        f = None if i.timed else _figures(ev, i)
        if f and f["busy_share_max"] < MAX_BUSY_SHARE and (
                i.group not in best or f["busy_share_max"] < best[i.group][1]["busy_share_max"]):
            best[i.group] = (i, f)
    return [_finding(group if several else "", i, f) for group, (i, f) in best.items()]


def _figures(ev, i) -> dict | None:
    info = ev.run_json(i.label)
    result = ((info or {}).get("results") or {}).get(str(i.rank)) or {}
    step_ns, steps = result.get("profiled_step_ns"), (info or {}).get("profiled_steps")
    if not isinstance(step_ns, (int, float)) or not isinstance(steps, int) or step_ns <= 0 or steps <= 0:
        return None
    sums = i.sums
    kernel_ns = int(sums.loc[sums["kind"].astype(str) == "kernel", "dur_ns"].sum())
    if not kernel_ns:
        return None
    unprofiled = result.get("unprofiled_step_ns")
    return {"kernel_ns": kernel_ns, "steps": steps, "profiled_step_ns": float(step_ns),
            "unprofiled_step_ns": float(unprofiled) if isinstance(unprofiled, (int, float)) else None,
            "kernel_ns_per_step": kernel_ns / steps, "busy_share_max": kernel_ns / (steps * step_ns)}


def _finding(group: str, i, f: dict) -> Finding:
    unprofiled = (f" ({duration(f['unprofiled_step_ns'])} without the profiler)"
                  if f["unprofiled_step_ns"] else "")
    gain_ns = f["profiled_step_ns"] - f["kernel_ns_per_step"]
    text = (f"{group + ': ' if group else ''}rank {i.rank}'s GPU was busy at most "
            f"{100 * f['busy_share_max']:.0f}% of each step: its kernels took {duration(f['kernel_ns_per_step'])} "
            f"per step of {duration(f['profiled_step_ns'])} measured over the profiled steps{unprofiled}, so the "
            "host sets the pace: compile the step (torch.compile(mode=\"reduce-overhead\"), CUDA graphs; "
            "`-- --compile` for tracelab's decode) or capture it in a CUDA graph; at most "
            f"{duration(gain_ns)} per step to gain (the step less its kernels, an upper bound)")
    values = {"run": group, "rank": i.rank, **f, "bound_ns": gain_ns}
    return Finding(text, int(gain_ns * f["steps"]), SECTIONS["totals"], {"rank": i.rank, **f}, "busy_bound", values)
