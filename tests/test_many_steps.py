"""Terminal tables of many steps (reports/many_steps.py): above MAX_STEP_ROWS steps a table keeps
the steps of largest value, in step order, and says how many there were and their spread; the
selection checked against a plain sort, the line's median and 90th percentile against numpy."""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
from rich.console import Console

from tracelab.reports.many_steps import MAX_STEP_ROWS, largest_steps
from tracelab.reports.memory import across, memory_text


def _frame(steps: int, ranks: int = 2, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"step": np.repeat(np.arange(steps), ranks), "rank": np.tile(np.arange(ranks), steps),
                         "span_ns": rng.integers(1_000, 10_000_000, steps * ranks)})


def test_few_steps_are_all_shown_and_nothing_said():
    frame = _frame(MAX_STEP_ROWS)
    shown, line = largest_steps(frame, "span_ns", "step time", str)
    assert shown is frame and line == ""


def test_many_steps_keep_the_slowest_in_step_order():
    frame = _frame(995)
    shown, line = largest_steps(frame, "span_ns", "step time", lambda v: f"{v / 1e6:.3f} ms")
    worst = {}
    for step, value in zip(frame["step"], frame["span_ns"]):
        worst[step] = max(worst.get(step, 0), value)
    want = sorted(sorted(worst, key=lambda s: -worst[s])[:MAX_STEP_ROWS])
    assert sorted(set(shown["step"])) == want and len(shown) == 2 * MAX_STEP_ROWS
    assert list(shown["step"]) == sorted(shown["step"])  # step order kept
    values = np.array(list(worst.values()), dtype=float)
    assert line.startswith(f"995 steps: the {MAX_STEP_ROWS} with the largest step time shown")
    assert f"median {np.median(values) / 1e6:.3f} ms" in line
    assert f"90th percentile {np.quantile(values, 0.9) / 1e6:.3f} ms" in line


def _memory(steps: int) -> across.Memory:
    from helpers import memory_digest, memory_steps
    digests = {r: memory_digest(memory_steps(r, (r + 1) * 2**20, calls=(0,) * steps)) for r in range(2)}
    for r, d in digests.items():
        d.steps["peak_allocated_bytes"] = [(r + 1) * 2**20 + 4096 * s for s in range(steps)]  # later steps higher
    return across.combine([("run", digests)])


def test_memory_table_of_many_steps_shows_the_highest_peaks():
    m = _memory(100)
    out = io.StringIO()
    Console(file=out, width=250).print(memory_text.render_table(m))
    text = out.getvalue()
    assert f"100 steps: the {MAX_STEP_ROWS} with the largest peak allocated shown" in text
    body = text.split("memory per step and rank", 1)[1].split("100 steps:", 1)[0]
    rows = [line.split("│") for line in body.splitlines() if line.count("│") > 5]
    assert sorted({int(r[0]) for r in rows}) == list(range(100 - MAX_STEP_ROWS, 100))
    csv = memory_text.render_csv(m)  # CSV keeps every step
    assert set(pd.read_csv(io.StringIO(csv))["step"].dropna().astype(int)) >= set(range(100))


def _table_steps(doc: dict) -> list[int]:
    """The steps the who-waits table shows, in its order (its first column)."""
    from tracelab.reports.steps.steps_text import who_waits_table

    return [int(cell) for cell in who_waits_table(doc).columns[0].cells]


def test_who_waits_of_many_steps_keeps_the_largest_skews_in_order():
    from tracelab.reports.steps.steps_text import skews_line
    rng = np.random.default_rng(1)
    skews = [int(x) for x in rng.integers(0, 5_000_000, 300)]
    skews[7] = None  # a step without a skew sorts as none
    doc = {"basis": "steps", "steps": [{"step": s, "skew_ns": k, "gating_rank": 1, "wait_ns": {"0": k or 0}}
                                       for s, k in enumerate(skews)]}
    want = sorted(sorted(range(300), key=lambda i: -(skews[i] or 0))[:MAX_STEP_ROWS])
    assert _table_steps(doc) == want
    known = np.array([k for k in skews if k is not None], dtype=float)
    line = skews_line(doc)
    assert line.startswith(f"300 steps with a wait: the {MAX_STEP_ROWS} with the largest skew shown")
    assert f"median {np.median(known) / 1e6:,.3f} ms" in line
    few = {"basis": "steps", "steps": doc["steps"][:MAX_STEP_ROWS]}
    assert _table_steps(few) == list(range(MAX_STEP_ROWS)) and skews_line(few) == ""
