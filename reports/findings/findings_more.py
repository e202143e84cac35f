"""Two more sources of findings (reports/findings/findings.py's SOURCES): why the GPU was idle
(reports/idle/idle.py) and the kernels losing most time to their roofline
(reports/roofline/roofline.py). Each reads the per-rank digests the report already made and
states only what they decided; below its threshold a source says nothing."""
from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd

from ..fmt import distinct_name, ms, rate_gb_s, tflops
from .finding import SECTIONS, Finding
from ..timeline.causes import CAUSES, UNCLEAR, UNCLEAR_CAUSES_WHY, UNCLEAR_WHY, bound_words
from ..topics import result_of

MIN_IDLE_SHARE_OF_STEP = 0.10  # idle under this share of the step is no finding
MIN_LOST_SHARE = 0.05  # time lost to the roofline under this share of the rank's GPU time is no finding
CAUSE_TEXT = {"idle_host_ns": "before the host began to launch the next op",
              "idle_stall_ns": "in host stalls (untraced host time after a sync or between steps)",
              "idle_launch_ns": "between launch calls and the kernels' start on an empty queue",
              "idle_sync_ns": "while the host was blocked in a synchronising call",
              "idle_dependency_ns": "waiting on another stream, an event or a peer",
              "idle_other_ns": "with the next op queued behind its own stream's work or launched by no call in "
                               "the trace"}


def _run(group: str, several: bool) -> str:
    return f"{group}: " if several and group else ""


def idle_findings(ev) -> list:
    """Per run, the rank idling most per step, its idle split by its largest cause, and how
    many steps were host-, GPU- or communication-bound."""
    groups = {i.group for i in ev.inputs}
    best: dict[str, tuple] = {}
    for i in ev.inputs:
        if not i.timed:
            continue
        result = result_of("idle", i)
        steps = result.steps
        if not len(steps) or not steps["span_ns"].sum():
            continue
        idle, span = steps["idle_ns"].mean(), steps["span_ns"].mean()
        if idle >= MIN_IDLE_SHARE_OF_STEP * span and (i.group not in best or idle > best[i.group][1]):
            best[i.group] = (i, idle, span, steps, result.waits)
    out = []
    for group, (i, idle, span, steps, waits) in best.items():
        cause = max(CAUSES, key=lambda c: steps[c].mean())
        stepless = not steps["step"].notna().any()  # the whole trace is one window: no "per step"
        head = (f"{_run(group, len(groups) > 1)}rank {i.rank}'s GPU idles {ms(idle)} "
                f"{'of its' if stepless else 'per step of'} {ms(span)}{' span' if stepless else ''} "
                f"({100 * idle / span:.0f}%), {ms(steps[cause].mean())} of it {CAUSE_TEXT[cause]}"
                f"{_waited_on(waits) if cause == 'idle_dependency_ns' else ''} ")
        text_for = partial(idle_sentence, head, steps)  # the replay says later whether the profiler made it host-bound
        evidence = {"rank": i.rank, "idle_ns_per_step": float(idle), "span_ns_per_step": float(span),
                    **{c: float(steps[c].mean()) for c in CAUSES}}
        values = {"run": group, **evidence, "share": float(idle / span), "cause": cause.removesuffix("_ns"),
                  "steps": len(steps), "stepless": bool(stepless),
                  "bound_steps": {str(b): int(n) for b, n in steps["bound"].value_counts().items()}}
        if cause == "idle_dependency_ns" and len(waits):
            values["waited_on"] = {k: _plain(waits.iloc[0][k]) for k in waits.columns if k != "input"}
        if cause == "idle_stall_ns":  # the host's stalls: their scenario, not the launches' (no-host-gaps)
            evidence.update(scenario=f"no-host-stalls@{i.rank}", scenario_text="the host's stalls took no time")
        out.append(Finding(text_for(False), int(steps["idle_ns"].sum()), "idle", evidence, "idle", values, text_for))
    return out


def idle_sentence(head: str, steps, under_profiler_only: bool = False) -> str:
    """The idle finding's sentence: its `head` (the idle and its largest cause), then what most of
    each step's path is, beside the idle; a host-bound step said 'host-bound under the profiler'
    where `under_profiler_only` (bound_words)."""
    words = (f"{bound_words(steps['bound'].iloc[0], under_profiler_only)} over the whole trace, which has no steps"
             if not steps["step"].notna().any() else
             ", ".join(f"{bound_words(b, under_profiler_only)} in {n} of {len(steps)}"
                       for b, n in steps["bound"].value_counts().items()) + " steps")
    basis, tail = bound_basis(steps)
    return f"{head}({basis}: {words}{_unclear_why(steps)}{tail})"


def _waited_on(waits) -> str:
    """' (most of it stream 8 waiting, by cudaStreamWaitEvent, on stream 7 after its k)': the waits
    table's first row (the most dependency idle), or nothing where the table is empty."""
    if not len(waits):
        return ""
    w = waits.iloc[0]
    return (f" (most of it stream {int(w['stream'])} waiting, by {w['wait_call']}, on stream "
            f"{int(w['waited_on_stream'])} after its {w['waited_on_kernel']}: {ms(w['dependency_ns'])} in "
            f"{int(w['gaps']):,} gap{'s' if w['gaps'] != 1 else ''})")


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def _by_path(steps) -> np.ndarray:
    return (steps["bound_from"] == "path").to_numpy() if "bound_from" in steps.columns else np.ones(len(steps), bool)


def bound_basis(steps) -> tuple[str, str]:
    """Whence the steps' bounds, and what to add after them: their critical paths, or (where an
    edge is missing, so the path is not known: whatif's path_known) the idle causes' rule."""
    by_path = _by_path(steps)
    if by_path.all():
        return "by its critical path", ""
    if not by_path.any():
        return "by its idle causes", "; its critical path is not known: an edge is missing (tracelab whatif)"
    return (f"by its critical path, or its idle causes in the {int((~by_path).sum())} steps whose path is not "
            "known (an edge is missing: tracelab whatif)"), ""


def _unclear_why(steps) -> str:
    """Why a step has no clear bound, by what decided it (its path, or its idle causes)."""
    unclear = (steps["bound"] == UNCLEAR).to_numpy()
    if not unclear.any():
        return ""
    return f": {UNCLEAR_WHY if _by_path(steps)[unclear].any() else UNCLEAR_CAUSES_WHY}"


def roofline_findings(ev) -> list:
    """Per run, the kernel losing most time to its roofline (lost_ns), where that is a
    material share of its rank's GPU time, the device is known and the kernel has a share
    of its roof (roofline.py gives none where rows with a roof cover under half its time)."""
    groups = {i.group for i in ev.inputs}
    best: dict[str, tuple] = {}
    for i in ev.inputs:
        d = i.digest("roofline")
        rows = d["rows"]
        lost = rows["lost_ns"].to_numpy(dtype=np.float64)
        judged = ~np.isnan(lost) & ~np.isnan(rows["roofline_frac"].to_numpy(dtype=np.float64))  # no roof share: not judged
        if d["device"] is None or not judged.any() or not d["gpu_ns"]:
            continue
        top = rows.iloc[int(np.argmax(np.where(judged, lost, -np.inf)))]  # the first of the most lost (idxmax's)
        if top["lost_ns"] >= MIN_LOST_SHARE * d["gpu_ns"] and (i.group not in best or
                                                              top["lost_ns"] > best[i.group][1]["lost_ns"]):
            best[i.group] = (i, top, d)
    out = []
    for group, (i, top, d) in best.items():
        rate = (tflops(top['tflop_s']) if not pd.isna(top["tflop_s"]) and top["bound"] == "compute"
                else rate_gb_s(top['gb_s']) + " read+written")
        frac = "" if pd.isna(top["roofline_frac"]) else f", {100 * top['roofline_frac']:.1f}% of its roof"
        name = distinct_name(str(top["key"]), d["rows"]["key"].astype(str), 70)
        text = (f"{_run(group, len(groups) > 1)}{name} loses {ms(top['lost_ns'])} to its roofline on "
                f"rank {i.rank} ({int(top['count']):,} calls, {ms(top['dur_ns'])} at {rate}{frac}, {top['bound']}-bound "
                f"on the {d['device'].name}; work known for {100 * d['known_ns'] / d['gpu_ns']:.0f}% of the GPU time)")
        evidence = {"rank": i.rank, "kernel": str(top["key"]), "lost_ns": int(top["lost_ns"]),
                    "roofline_frac": None if pd.isna(top["roofline_frac"]) else float(top["roofline_frac"]),
                    "device": d["device"].name}
        values = {"run": group, **evidence, "calls": int(top["count"]), "dur_ns": int(top["dur_ns"]),
                  "bound": str(top["bound"]), "known_share": float(d["known_ns"] / d["gpu_ns"])}
        out.append(Finding(text, int(top["lost_ns"]), "roofline", evidence, "roofline", values))
    return out




MIN_CPU_COMM_SHARE = 0.20  # communication under this share of a CPU-only rank's operator time is no finding


def cpu_comm_findings(ev) -> list:
    """Per run of CPU-only traces (gloo: no GPU, so neither idle nor exposure), the rank with a
    collective in flight for the largest share of its span, where that is over MIN_CPU_COMM_SHARE:
    the union of its communication operators' intervals over all its threads (the caller's
    blocking call and gloo's own threads overlap: never summed), the time it sits inside a
    collective (waiting for the others, then moving data), named with the operator that takes most."""
    groups = {i.group for i in ev.inputs}
    best: dict[str, tuple] = {}
    for i in ev.inputs:
        c = i.digest("cpu_comm")
        if c is None or not c["span_ns"]:
            continue
        share = c["in_flight_ns"] / c["span_ns"]
        if share >= MIN_CPU_COMM_SHARE and (i.group not in best or share > best[i.group][1]):
            best[i.group] = (i, share, c)
    out = []
    for group, (i, share, c) in best.items():
        threads = f" over {c['threads']} threads" if c["threads"] > 1 else ""
        text = (f"{_run(group, len(groups) > 1)}rank {i.rank} has a collective in flight {100 * share:.0f}% of its "
                f"{ms(c['span_ns'])} span ({ms(c['in_flight_ns'])}: the union of its communication operators"
                f"{threads}; {c['top_op']} {ms(c['top_op_ns'])} over {c['top_op_calls']:,} calls): its wait for "
                "the other ranks and the transfer together (who waits on whom splits them)")
        out.append(Finding(text, c["in_flight_ns"], SECTIONS["totals"], {"rank": i.rank, **c}, "cpu_comm",
                           {"run": group, "rank": i.rank, "share": float(share), **c}))
    return out
