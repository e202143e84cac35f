"""What a comparison may claim: inputs that cover different numbers of steps are compared
per step, and "slowest" is named only where the lead beats the step-to-step noise.
Pure DataFrame -> DataFrame helpers for reports/compare.py.

Step counts come from the events' `step` column (distinct steps with rows); an input
without steps (proton aggregates, unmarked traces) has none, and then totals are compared
as they are, which the note says.

Noise of a row: where an input has steps, the standard deviation of the row's per-step
time over the steps, as the uncertainty of its per-step mean (std / sqrt(steps)) or of its
total (std x sqrt(steps)). A lead under MIN_LEAD (1%) of the time or under MIN_LEAD_NS
names nothing either way; without steps that is the only test.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

MIN_LEAD = 0.01
MIN_LEAD_NS = 1_000
SIGMAS = 2.0


def step_count(events: pd.DataFrame) -> int | None:
    """Distinct steps with rows, None without any."""
    n = int(events["step"].nunique()) if "step" in events else 0
    return n or None


@dataclass
class Basis:
    """What compare's ratios, spread and slowest are computed on: `values` (columns = input
    labels), `kind` ("totals" or "per call"), the note the header shows, and the times per
    step where every input's steps are known (None otherwise): shown beside, never compared."""

    values: pd.DataFrame
    kind: str
    note: str
    per_step: pd.DataFrame | None = None


def basis(time: pd.DataFrame, count: pd.DataFrame, steps: dict[str, int | str | None]) -> Basis:
    """Totals where every input covers the same known number of steps; otherwise each row's
    mean per call (time / calls), which needs no step count and is right whether the counts
    differ or one is a guess (a run.json's tokens for a proton capture): the note says which
    and why. Where all the counts are known, the per-step times come along."""
    counts = {label: steps.get(label) for label in time.columns}
    if len(counts) < 2 or (all(counts.values()) and len(set(counts.values())) == 1):
        return Basis(time, "totals", "totals")
    per_call = time / count.where(count > 0)
    known = all(counts.values())
    shown = ", ".join(f"{label} {n or 'unknown'}" for label, n in counts.items())
    note = f"per call (mean_ns): the inputs' steps {'differ' if known else 'differ or are unknown'} ({shown})"
    per_step = time / pd.Series(counts, dtype="float64") if known else None
    return Basis(per_call, "per call", note, per_step)


def sigma(events: pd.DataFrame, keys: list[str], per_step: bool) -> pd.Series | None:
    """Per row key: the noise of the row's time (per-step mean, or total) from its step-to-step
    spread; None for an input without steps."""
    return sigma_of(step_std(events, keys), step_count(events), per_step)


def step_std(events: pd.DataFrame, keys: list[str]) -> pd.Series | None:
    """Per row key: the standard deviation over the input's steps of the row's time per step
    (a step without the row counts 0); None with fewer than 2 steps. What `sigma` needs of
    one input, small enough to make where the input is parsed."""
    n = step_count(events)
    if not n or n < 2:
        return None
    frame = pd.DataFrame({**{k: events[k].astype(str) for k in keys}, "step": events["step"],
                          "dur_ns": events["dur_ns"]}).dropna(subset=["step"])
    per = frame.groupby([*keys, "step"])["dur_ns"].sum().unstack("step", fill_value=0)
    return per.std(axis=1, ddof=1)


def sigma_of(std: pd.Series | None, n: int | None, per_step: bool) -> pd.Series | None:
    """sigma from step_std and the step count."""
    if std is None or not n or n < 2:
        return None
    return std / np.sqrt(n) if per_step else std * np.sqrt(n)


def slowest(time: pd.DataFrame, sigmas: dict[str, pd.Series | None]) -> pd.Series:
    """Per row the label of the largest time where its lead over the runner-up is real and
    material: more than MIN_LEAD of it and MIN_LEAD_NS always, and more than SIGMAS combined
    standard deviations where both have steps (a very steady kernel's 0.2% lead beats its
    noise but names nothing worth a look); "" otherwise (or with one input)."""
    if time.shape[1] < 2:
        return pd.Series("", index=time.index)
    values = time.to_numpy(dtype=np.float64)
    order = np.argsort(-values, axis=1, kind="stable")
    rows = np.arange(len(values))
    top, second = values[rows, order[:, 0]], values[rows, order[:, 1]]
    labels = np.array(time.columns)
    lead = top - second
    s = pd.DataFrame({L: sig.reindex(time.index) if sig is not None else np.nan for L, sig in sigmas.items()},
                     index=time.index).reindex(columns=time.columns).to_numpy(dtype=np.float64)
    noise = SIGMAS * np.sqrt(s[rows, order[:, 0]] ** 2 + s[rows, order[:, 1]] ** 2)
    fallback = np.maximum(MIN_LEAD * top, MIN_LEAD_NS)
    real = (lead > fallback) & (np.isnan(noise) | (lead > noise))  # beyond the noise, and material
    return pd.Series(np.where(real, labels[order[:, 0]], ""), index=time.index)
