"""Terminal tables of many steps. A decode run has a step per token (1,000 in the README's
first command: 3,000 rows of `tracelab steps`, 4,000 of `tracelab memory`), and such a table
is not read. Above MAX_STEP_ROWS steps a terminal table keeps the steps whose value is largest
(the slowest, the highest peaks), in step order, and one line says how many steps there are,
their median and 90th percentile, and where every step is. Pure; JSON and CSV keep every step."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd

MAX_STEP_ROWS = 20


def largest(values: Sequence[float], limit: int = MAX_STEP_ROWS) -> list[int]:
    """The positions of the `limit` largest values (of equal ones, the first), in their order."""
    return sorted(np.argsort(-np.asarray(values, dtype="float64"), kind="stable")[:limit].tolist())


def largest_steps(frame: pd.DataFrame, value: str, what: str, shown: Callable[[float], str],
                  every: str = "--format json or csv", limit: int = MAX_STEP_ROWS) -> tuple[pd.DataFrame, str]:
    """(the rows of the `limit` steps whose largest `value` over their rows is largest, all rows
    when there are no more steps than that; the line saying so, "" when nothing is left out).
    `what` names the ordering ("step time"), `shown` formats a value, `every` says where all are."""
    if "step" not in frame.columns or not len(frame):
        return frame, ""
    per_step = frame.groupby("step", sort=True)[value].max().astype("float64").dropna()
    if len(per_step) <= limit:
        return frame, ""
    rows = frame[frame["step"].isin(per_step.index[largest(per_step.to_numpy(), limit)])]
    line = (f"{len(per_step):,} steps: the {limit} with the largest {what} shown (median {shown(per_step.median())}, "
            f"90th percentile {shown(per_step.quantile(0.9))} over steps); {every} lists every step")
    return rows, line
