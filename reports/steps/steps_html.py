"""The report's steps section (reports/html/html.py calls `sections`): per run of several timed
ranks, step x rank heatmaps of step time and wait, the who-waits table per step, the
clock and the verdict with its numbers (reports/timeline/waits.py). Rendering only."""
from __future__ import annotations

from html import escape

from typing import Callable

import pandas as pd

from ..fmt import ms
from ..many_steps import largest_steps
from ..html.side_by_side import ranks_drawn
from .steps_text import MANY_RANKS, clock_line
from ..timeline.waits import Waits, run_waits, straggler_json

WHO_WAITS_COLUMNS = {"unit": "step", "gating_rank": "gating rank", "skew_ns": "skew (ms)", "cause": "why",
                     "extra_work_ns": "more busy (ms)", "extra_idle_ns": "more idle (ms)",
                     "kernels": "scopes and kernels that differ"}


def _heatmap(steps: pd.DataFrame, column: str, title: str, always: tuple = ()) -> dict:
    """Rank x step heatmap of one step-table column, in ms: a row per rank and a column per step,
    so that its height grows with the ranks drawn (at most MANY_RANKS), never with the steps."""
    wide = steps.pivot(index="step", columns="rank", values=column).sort_index() / 1e6
    if len(wide.columns) > MANY_RANKS:  # the outlier ranks and the first ones, as rows tall enough to read
        drawn = ranks_drawn(wide.mean(), [r for r in always if r in wide.columns])
        title += (f" ({len(drawn)} of {len(wide.columns):,} ranks: {'the straggler, ' if always else ''}the outliers "
                  "by their mean, then the first)")
        wide = wide[drawn]
    data = [{"type": "heatmap", "z": _none(wide.T.round(4)), "x": [str(s) for s in wide.index],
             "y": [f"rank {r}" for r in wide.columns], "colorscale": "Viridis", "colorbar": {"title": {"text": "ms"}},
             "hovertemplate": "step %{x}, %{y}: %{z:,.3f} ms<extra></extra>"}]
    return {"data": data, "layout": {"title": {"text": title}, "height": 150 + 28 * len(wide.columns),
                                     "xaxis": {"title": {"text": "step"}, "type": "category", "nticks": 24}, "yaxis": {"type": "category", "autorange": "reversed"},
                                     "margin": {"l": 80, "r": 20, "t": 40, "b": 40}}}


def _none(df: pd.DataFrame) -> list[list]:
    """The frame's values as lists, None where missing (strict JSON, a gap in the heatmap)."""
    return df.astype(object).where(df.notna(), None).values.tolist()


MAX_HEATMAP_STEPS = 1024  # rank x step heatmaps show the first this many steps (a column each)


def _who_waits(w: Waits) -> pd.DataFrame:
    doc = straggler_json(w)
    unit = "step" if doc["basis"] == "steps" else "collective"
    many = len(w.waits.columns) > MANY_RANKS if len(w.waits) else False
    return pd.DataFrame([{"unit": s[unit], "gating_rank": "-" if s["gating_rank"] is None else str(s["gating_rank"]),
                          "skew_ns": s["skew_ns"], "cause": s.get("cause", ""), "extra_work_ns": s.get("extra_work_ns"),
                          "extra_idle_ns": s.get("extra_idle_ns"),
                          "kernels": ", ".join(f"{k} +{ms(v)}" for what in ("scopes", "kernels")
                                               for k, v in (s.get(what) or {}).items()),
                          **(_wait_spread(s["wait_ns"]) if many else {f"wait_r{r}": ns for r, ns in s["wait_ns"].items()})}
                         for s in doc["steps"]])


def _wait_spread(wait_ns: dict[str, int]) -> dict[str, object]:
    """A step's waits over many ranks: median, max and the rank that waited most."""
    if not wait_ns:
        return {"wait_median": None, "wait_max": None, "wait_most": "-"}
    most = max(wait_ns, key=wait_ns.get)
    return {"wait_median": float(pd.Series(wait_ns).median()), "wait_max": wait_ns[most], "wait_most": f"rank {most}"}


SPREAD_COLUMNS = {"wait_median": "median wait (ms)", "wait_max": "most wait (ms)", "wait_most": "waited most"}


def _run(name: str, w: Waits, figure: Callable[[dict, str], str], table: Callable) -> list[str]:
    out = [f"<h3>{escape(name)}</h3>"] if name else []
    if len(w.steps):
        shown = w.steps[w.steps["step"] < sorted(w.steps["step"].unique())[:MAX_HEATMAP_STEPS][-1] + 1]
        note = (f"the first {MAX_HEATMAP_STEPS} of {w.steps['step'].nunique()} steps"
                if len(shown) < len(w.steps) else "")
        late = (w.verdict["rank"],) if w.verdict.get("rank") is not None else ()
        out += [figure(_heatmap(shown, "span_ns", f"step time (first to last {w.device} activity of the step)", late), note),
                figure(_heatmap(shown, "wait_ns", "wait at collectives", late), note)]
    return out + _who_waits_table(w, table) + [f'<p class="note">{escape(clock_line(w.clock))}</p>',
                                               f"<p><b>{escape(w.line)}</b></p>"]


TABLE_STEPS = 50  # the who-waits table's steps: above, those of largest skew, in step order


def _who_waits_table(w: Waits, table: Callable) -> list[str]:
    """The who-waits table, a row per step (or collective); of many steps those of largest skew
    and a line saying how many there are (tracelab steps lists every one)."""
    ww = _who_waits(w)
    if not len(ww):
        return []
    line = ""
    if len(w.steps):
        kept, line = largest_steps(ww.rename(columns={"unit": "step"}), "skew_ns", "skew", ms, "tracelab steps",
                                   TABLE_STEPS)
        ww = ww.loc[kept.index]
    waits = {c: f"wait r{c[6:]} (ms)" for c in ww.columns if c.startswith("wait_r")}
    waits.update({c: name for c, name in SPREAD_COLUMNS.items() if c in ww.columns})
    first = ("unit", "gating_rank", "skew_ns")
    columns = {**{k: v for k, v in WHO_WAITS_COLUMNS.items() if k in first}, **waits,
               **{k: v for k, v in WHO_WAITS_COLUMNS.items() if k not in first}}
    return ([f'<p class="note">{escape(line)}</p>'] if line else []) + [table(ww, columns)]


def section(inputs: list, figure: Callable[[dict, str], str], table: Callable, comparison, runs=()) -> list[str]:
    """The report's steps section (reports/topics.py), each run's Waits from the Comparison."""
    return sections(inputs, figure, table, comparison.waits)


def sections(inputs: list, figure: Callable[[dict, str], str], table: Callable,
             analysed: dict[str, Waits] | None = None) -> list[str]:
    """The steps section for every run (group) of two or more timed ranks of one profiler;
    `analysed`: runs' Waits already computed (Comparison.waits), by group."""
    out = []
    for group in dict.fromkeys(i.group for i in inputs):
        members = [i for i in inputs if i.group == group]
        if len(members) < 2 or len({i.source for i in members}) > 1 or len({i.rank for i in members}) < len(members):
            continue
        w = (analysed or {}).get(group) or run_waits(members)
        if len(w.collectives) or len(w.steps):
            out += _run(group, w, figure, table)
    if out:
        out = ['<h2 id="steps">Steps: who waits on whom</h2>',
               '<p class="note">Per step and rank: step time and wait at collectives; per step the rank the others '
               "waited for and why; a straggler is named only when it gates a significant majority of steps.</p>"] + out
    return out
