"""The report's idle section (reports/html/html.py calls `sections`): per timed input, a stacked
bar per step (GPU busy, then each idle cause, reports/idle/idle.py), the launch statistics and
the host ops over host-caused idle, and the notes. Rendering only."""
from __future__ import annotations

from html import escape
from typing import Callable

import pandas as pd

from ..html import side_by_side
from ..html.notes import folded
from ..html.figures import CATEGORY_AXIS, axis_label, label
from .idle import HINT, Idle, for_the_user, graphs_may_help, of_input
from ..timeline.causes import bound_words
from ..unprofiled import unprofiled_of

SHOWN_INPUTS = 16  # inputs (ranks) that get bars; the rest are named in a note
MAX_STEPS = 64  # steps per input drawn
BARS = {"busy_ns": ("GPU busy", "#4c78a8"), "idle_host_ns": ("idle: host", "#e45756"),
        "idle_stall_ns": ("idle: host stall", "#9d755d"),
        "idle_launch_ns": ("idle: launch", "#f58518"), "idle_sync_ns": ("idle: sync", "#b279a2"),
        "idle_dependency_ns": ("idle: dependency", "#72b7b2"), "idle_other_ns": ("idle: other", "#bab0ac")}
LAUNCH_COLUMNS = {"label": "input", "kernels_per_step": "kernels / step",
                  "graph_launches": "graph launches (each counted once)", "delay_median_ns": "launch to start, median (us)",
                  "delay_p90_ns": "launch to start, p90 (us)", "launch_cpu_per_step_ns": "launch calls' CPU / step (ms)",
                  "short_kernels": "kernels shorter than their launch", "short_kernels_gpu_ns": "their GPU time (ms)"}
OP_COLUMNS = {"label": "input", "kind": "kind", "name": "host op or range", "covered_ns": "host-caused idle covered (ms)"}
TOP_OPS = 10


def _bars(steps: pd.DataFrame) -> dict:
    """Stacked bars, busy then each cause, in ms: one per step of one input; with several
    inputs one per input, the mean of its steps, so the ranks or runs stand side by side."""
    several = steps["label"].nunique() > 1
    if several:
        steps = steps.groupby("label", sort=False)[list(BARS)].mean().reset_index()
    x = [axis_label(lab if several else f"{lab} step {s}") for lab, s in
         zip(steps["label"], steps["label"] if several else steps["step"])]
    data = [{"type": "bar", "name": name, "x": x, "y": (steps[c] / 1e6).round(4).tolist(), "marker": {"color": color},
             "hovertemplate": "%{x}: %{y} ms<extra>" + name + "</extra>"} for c, (name, color) in BARS.items()]
    title = "per input, the mean of its steps" if several else "per step"
    return {"data": data, "layout": {"title": {"text": f"{title}: GPU busy, then idle by cause (ms)"},
                                     "barmode": "stack", "xaxis": CATEGORY_AXIS, "height": 440,
                                     "margin": {"l": 60, "r": 20, "t": 50, "b": 90}}}


def _result(inputs: list, runs=()) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[str]]:
    steps, launches, ops, notes = [], [], [], []
    measured = {g: unprofiled_of(runs, [i.path for i in inputs if i.group == g]) for g in {i.group for i in inputs}}
    for i in inputs:
        one: Idle = for_the_user(of_input(i), measured[i.group].ns if measured[i.group] else None)
        name = label(i.label)
        steps.append(one.steps[one.steps["step"] < sorted(one.steps["step"])[:MAX_STEPS][-1] + 1].assign(label=i.label)
                     if len(one.steps) else one.steps)
        launches.append(one.launches.assign(label=i.label))
        ops.append(one.ops.head(TOP_OPS).assign(label=i.label))
        notes += [f"{name}: {escape(n.text)}" for n in one.notes if n != HINT]
    notes += [escape(HINT.text)] if any(graphs_may_help(s, ln) for s, ln in zip(steps, launches)) else []
    return (*(_stacked(f) for f in (steps, launches, ops)), notes)


def _stacked(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The frames one below the other; empty frames and all-NA columns take no part in the
    dtypes (pandas deprecates it: a FutureWarning per report); all empty: the first."""
    full = [f for f in frames if len(f)]
    if not full:
        return frames[0]
    columns = list(dict.fromkeys(c for f in full for c in f.columns))
    return pd.concat([f.dropna(axis=1, how="all") for f in full], ignore_index=True).reindex(columns=columns)


def _bound_lines(steps: pd.DataFrame) -> list[str]:
    """'host-bound in 8 of 8 steps: rank0, rank1': one line per distinct count of bounds,
    naming the inputs that have it (one line per input where each differs); a step host-bound
    only under the profiler (idle.for_the_user) is said so."""
    said: dict[str, list[str]] = {}
    for lab, g in steps.groupby("label", sort=False):
        text = ", ".join(f"{words} in {n} of {len(g)} steps" for words, n in user_bound_words(g).value_counts().items())
        said.setdefault(text, []).append(str(lab))
    return [f"<p>{escape(', '.join(labels))}: {escape(text)}</p>" for text, labels in said.items()]


def user_bound_words(steps: pd.DataFrame) -> pd.Series:
    """Each step's bound in words: 'host-bound under the profiler only' where the run measured the
    step without the profiler and the device paces that one."""
    words = steps["bound"].map(bound_words)
    if "host_bound_without_profiler" not in steps.columns:
        return words
    made = steps["host_bound_without_profiler"].map(lambda v: v is False)
    return words.where(~made, "host-bound under the profiler only")


def sections(inputs: list, figure: Callable[[dict, str], str], table: Callable, comparison=None,
             runs=()) -> list[str]:
    """The idle section for the timed inputs (above SHOWN_INPUTS the outlier ranks and the
    first ones), or nothing when none is. `comparison`: unused (reports/topics.py's section signature)."""
    timed = [i for i in inputs if i.timed]
    untimed = [label(i.label) for i in inputs if not i.timed]
    if not timed:
        return ['<h2 id="idle">Why was the GPU idle?</h2>', f'<p class="note">{", ".join(untimed)}: no idle breakdown: '
                "proton records no launches and no timestamps</p>"] if untimed else []
    drawn, _ = side_by_side.drawn(timed)  # above SHOWN_INPUTS: the outlier ranks, then the first
    steps, launches, ops, notes = _result([i for i in timed if i.label in set(drawn)], runs)
    notes += [f'{", ".join(untimed)}: no idle breakdown: proton records no launches and no timestamps'] if untimed else []
    out = ['<h2 id="idle">Why was the GPU idle?</h2>',
           '<p class="note">Per step: GPU busy, then the idle time by cause. host: the host had not begun to launch '
           "the next op; sync: the host was blocked in a synchronising call; launch: launched onto an empty queue, "
           "not started; dependency: queued, waiting on another stream, an event or a peer after a stream-wait call; "
           "other: queued behind its own stream, queued with no wait call to explain it, or no launch call known "
           "(tracelab idle --help).</p>"]
    if len(timed) > SHOWN_INPUTS:
        out.append(f'<p class="note">{len(drawn)} of {len(timed)} timed inputs: per run the ranks whose compute time '
                   "is an outlier, then the first ranks; tracelab idle gives every rank</p>")
    if len(steps) and "label" in steps:
        out.append(figure(_bars(steps), ""))
        out += _bound_lines(steps)
    if len(launches):
        out.append(table(launches, {c: h for c, h in LAUNCH_COLUMNS.items() if c in launches}))
    if len(ops):  # several inputs: the host ops over the most idle of any of them, not ten per input
        out.append(table(ops.sort_values("covered_ns", ascending=False, kind="stable").head(2 * TOP_OPS)
                         if ops["label"].nunique() > 1 else ops, OP_COLUMNS))
    return out + [folded(notes)]

