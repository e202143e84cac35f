"""The per-rank digests every comparison reads (reports/session.Input.digest): one rank's
timeline row, its sums per kind/scope/kernel/op class, its step-to-step noise per --by
choice, its span. Made in the worker that parsed the rank (load_many's
`reduce`, registered in reports/topics.py), so a thousand ranks' events never meet."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracelab.core.schema import OnEvents

from ..stats import noise
from ..timeline import intervals as timeline
from ..timeline.steps import has_times

# --by choice -> alignment keys
BY: dict[str, list[str]] = {
    "scope,kernel": ["scope", "kernel"],
    "kernel": ["kernel"],
    "op_class": ["op_class"],
    "scope": ["scope"],
}


def rank_timeline(events: pd.DataFrame) -> pd.DataFrame:
    """The one-row timeline (busy, idle, overlap) of one rank's events, without its rank."""
    return timeline.rank_timeline(events).drop(columns="rank")


SUM_KEYS = ["kind", "scope", "kernel", "op_class"]


def rank_sums(events: pd.DataFrame) -> pd.DataFrame:
    """One rank's time (dur_ns) and calls (count) summed per kind, scope, kernel and op class:
    what the comparison, the figures' bars, heatmap and top table, the totals and the scope
    trees add up (a sum of sums is the sum). The groupby below, by integer codes where the
    columns are the schema's (categorical keys, text scope): a third of its time."""
    codes = _sum_codes(events)
    if codes is None:
        g = events.groupby(SUM_KEYS, observed=True, sort=False, dropna=False)[["dur_ns", "count"]].sum()
        return g.reset_index()
    key = np.zeros(len(events), np.int64)
    for code, labels in codes.values():
        key = key * len(labels) + code
    group = pd.factorize(key)[0]  # per (kind, scope, kernel, op class), in order of first appearance: sort=False
    first = np.unique(group, return_index=True)[1]  # a row of each group, in group order
    out = {k: labels.take(code[first]) for k, (code, labels) in codes.items()}
    for column in ("dur_ns", "count"):
        out[column] = np.zeros(len(first), np.int64)
        np.add.at(out[column], group, events[column].to_numpy(dtype=np.int64))  # integers: exact
    return pd.DataFrame(out)


def _sum_codes(events: pd.DataFrame) -> dict[str, tuple[np.ndarray, pd.api.extensions.ExtensionArray]] | None:
    """Per SUM_KEYS column, each row's code and the values the codes stand for, in the column's
    own type (a missing value one of them, as dropna=False groups it); None where a column is not
    the schema's type, the frame is empty or the codes combined could pass int64 (pandas' groupby then)."""
    if not len(events) or not all(isinstance(events[k].dtype, pd.StringDtype if k == "scope" else pd.CategoricalDtype)
                                  for k in SUM_KEYS):
        return None
    out, room = {}, 1
    for k in SUM_KEYS:
        column = events[k]
        if k == "scope":
            code, labels = pd.factorize(column, use_na_sentinel=False)
        else:  # a category's code, -1 (missing) the first label
            code = column.cat.codes.to_numpy() + 1
            labels = pd.Categorical.from_codes(np.arange(-1, len(column.cat.categories)), dtype=column.dtype)
        out[k], room = (code.astype(np.int64), labels), room * len(labels)
    return out if room < 1 << 62 else None


def rank_noise(events: pd.DataFrame) -> dict:
    """One rank's steps (distinct, None without) and, per `--by` choice, the standard deviation
    of each row's time over the steps (noise.step_std): what 'slowest' weighs leads against."""
    return {"steps": noise.step_count(events),
            "std": noise.step_stds(events, BY)}


def rank_span(events: pd.DataFrame) -> tuple[int, int] | None:
    """One rank's first GPU start and last GPU end (its own clock), None without timed rows:
    the timeline figure's shared bins are made from these (figures.timeline_edges)."""
    rows = timeline.timed(events)
    if rows.empty:
        return None
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    return int(start.min()), int((start + rows["dur_ns"].to_numpy(dtype=np.int64)).max())


# compare's per-rank digests (reports/topics.py); segments: the timeline figure's bins, exact
DIGESTS = {"timeline": OnEvents(rank_timeline), "comm_kernels": OnEvents(timeline.comm_kernels),
           "sums": OnEvents(rank_sums), "noise": OnEvents(rank_noise), "span": OnEvents(rank_span),
           "has_times": OnEvents(has_times), "segments": OnEvents(timeline.rank_segments)}
