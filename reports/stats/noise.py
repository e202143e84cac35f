"""The noise models: how much a time may differ by chance. Pure DataFrame -> number or
DataFrame helpers. Two users:

compare (what a comparison may claim): inputs that cover different numbers of steps are
compared per step, and "slowest" is named only where the lead beats the step-to-step noise.

Step counts come from the events' `step` column (distinct steps with rows); an input
without steps (proton aggregates, unmarked traces) has none, and then totals are compared
as they are, which the note says.

Noise of a row: where an input has steps, the standard deviation of the row's per-step
time over the steps, as the uncertainty of its per-step mean (std / sqrt(steps)) or of its
total (std x sqrt(steps)). A lead under MIN_LEAD_SHARE (1%) of the time or under MIN_LEAD_NS
names nothing either way; without steps that is the only test.

stragglers (reports/verdicts.py, evidence.py): the clocks' uncertainty (noise_ns,
clock_spread_ns), the work's and the step time's step-to-step noise (step_noise_ns,
span_noise_ns, floor_ns), and the per-step lateness threshold of the block rule.
"""
from __future__ import annotations

from dataclasses import dataclass

import math

import numpy as np
import pandas as pd

from tracelab.core.schema import str_array

from . import groups
from . import MAD_TO_SD, MIN_LEAD_NS, MIN_LEAD_SHARE, MIN_SKEW_NS, NOISE_SIGMAS


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
    return step_stds(events, {"": keys})[""]


def step_stds(events: pd.DataFrame, by: dict[str, list[str]]) -> dict[str, pd.Series | None]:
    """step_std of each of several key lists (name -> keys), the steps and each key column's
    codes found once for all."""
    n = step_count(events)
    if not n or n < 2:
        return {name: None for name in by}
    has = events["step"].notna().to_numpy()
    steps, step_at = np.unique(events["step"].to_numpy(dtype=np.float64, na_value=np.nan)[has], return_inverse=True)
    dur = events["dur_ns"].to_numpy(dtype=np.int64)[has]
    codes = {k: sorted_codes(events[k], has)  # in the strings' order
             for k in dict.fromkeys(k for keys in by.values() for k in keys)}
    columns = pd.Index(steps.astype(np.int64), name="step")
    return {name: _std([codes[k] for k in keys], keys, step_at.reshape(-1), dur, columns) for name, keys in by.items()}


def sorted_codes(column: pd.Series, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pd.factorize(column.astype(str)[mask], sort=True): a categorical's by its codes, each
    category's name made and sorted once (where two used names print alike: factorize itself)."""
    if not isinstance(column.dtype, pd.CategoricalDtype):
        return pd.factorize(str_array(column)[mask], sort=True)
    codes = column.cat.codes.to_numpy()[mask]
    names = np.array([str(c) for c in column.cat.categories] + [np.str_("nan")], dtype=object)  # -1: the last
    used = np.flatnonzero(np.bincount(codes + 1, minlength=len(names) + 1)[np.r_[1:len(names), 0]])
    uniques = np.unique(names[used]) if len(used) else np.empty(0, dtype=object)
    if len(uniques) < len(used):
        return pd.factorize(str_array(column)[mask], sort=True)
    position = np.zeros(len(names), np.int64)
    position[used] = np.searchsorted(uniques, names[used])
    return position[codes], uniques


def _std(names: list[tuple[np.ndarray, np.ndarray]], keys: list[str], step_at: np.ndarray, dur: np.ndarray,
         columns: pd.Index) -> pd.Series:
    """groupby(keys + step).sum().unstack(fill_value=0).std(axis=1, ddof=1), by integer codes:
    the combined code sorts as the key tuples do, the sums are integers (exact)."""
    key = np.zeros(len(dur), np.int64)
    for codes, uniques in names:
        key = key * len(uniques) + codes
    cell = key * len(columns) + step_at
    order = np.argsort(cell, kind="stable")
    first = np.flatnonzero(np.r_[True, cell[order][1:] != cell[order][:-1]])
    ns = np.add.reduceat(dur[order], first)
    rows, row_at = np.unique(key[order][first], return_inverse=True)
    per = np.zeros((len(rows), len(columns)), np.int64)  # [key, step]
    per[row_at, step_at[order][first]] = ns
    at = order[first][np.unique(row_at, return_index=True)[1]]  # a row of each key
    index = (pd.Index(names[0][1][names[0][0][at]], name=keys[0]) if len(keys) == 1 else
             pd.MultiIndex.from_arrays([u[c[at]] for c, u in names], names=keys))
    return pd.DataFrame(per, index=index, columns=columns).std(axis=1, ddof=1)


def sigma_of(std: pd.Series | None, n: int | None, per_step: bool) -> pd.Series | None:
    """sigma from step_std and the step count."""
    if std is None or not n or n < 2:
        return None
    return std / np.sqrt(n) if per_step else std * np.sqrt(n)


def slowest(time: pd.DataFrame, sigmas: dict[str, pd.Series | None]) -> pd.Series:
    """Per row the label of the largest time where its lead over the runner-up is real and
    material: more than MIN_LEAD_SHARE of it and MIN_LEAD_NS always, and more than NOISE_SIGMAS combined
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
    noise = NOISE_SIGMAS * np.sqrt(s[rows, order[:, 0]] ** 2 + s[rows, order[:, 1]] ** 2)
    fallback = np.maximum(MIN_LEAD_SHARE * top, MIN_LEAD_NS)
    real = (lead > fallback) & (np.isnan(noise) | (lead > noise))  # beyond the noise, and material
    return pd.Series(np.where(real, labels[order[:, 0]], ""), index=time.index)


def noise_ns(coll: pd.DataFrame) -> float:
    """Skew below which a collective has no last rank: twice the median end spread (how
    well the ranks' clocks agree), at least MIN_SKEW_NS, and at least the step-to-step
    noise of the work (step_noise_ns) where the caller put it in a `noise_floor_ns` column."""
    if coll.empty:
        return float(MIN_SKEW_NS)
    floor = float(coll["noise_floor_ns"].max()) if "noise_floor_ns" in coll else 0.0
    return float(max(2 * np.median(end_spread_ns(coll)), MIN_SKEW_NS, floor))


def end_spread_ns(coll: pd.DataFrame) -> np.ndarray:
    """Per collective (by id, ascending): its last end less its first, as float64 (the medians
    taken of it are a float's)."""
    g = groups.by(coll["collective"].to_numpy(dtype=np.int64))
    end = coll["end_ns"].to_numpy()
    return (g.max(end) - g.min(end)).astype(np.float64)


def step_noise_ns(steps: pd.DataFrame) -> float:
    """How much arrivals may differ by chance: NOISE_SIGMAS x the steadiest rank's step-to-step
    variation of its compute time (reports/steps.step_table), from differences of steps two
    apart (so that lateness alternating by design is not taken for noise), robustly (1.4826
    x the median absolute deviation, / sqrt 2 for a difference); 0 with too few steps."""
    if steps.empty:
        return 0.0
    wide = steps.pivot_table(index="step", columns="rank", values="compute_ns").sort_index()
    diff = (wide - wide.shift(2)).dropna()
    if len(diff) < 3:
        return 0.0
    robust = MAD_TO_SD * (diff - diff.median()).abs().median() / math.sqrt(2)
    return float(NOISE_SIGMAS * robust.min())


def span_noise_ns(steps: pd.DataFrame) -> float:
    """How much the step time itself varies from step to step: NOISE_SIGMAS x the median over ranks
    of a robust standard deviation (1.4826 x the median absolute difference of consecutive
    steps' spans, / sqrt 2 for a difference); 0 with fewer than 3 steps. The host's own pace
    shows here: a rank late by less than the steps' jitter may be late by chance."""
    if steps.empty:
        return 0.0
    wide = steps.pivot_table(index="step", columns="rank", values="span_ns").sort_index()
    diff = wide.diff().dropna()
    if len(diff) < 2:
        return 0.0
    return float(NOISE_SIGMAS * (MAD_TO_SD * diff.abs().median() / math.sqrt(2)).median())


def step_threshold_ns(pc: pd.DataFrame, clock_ns: float, floor_ns: float, min_ns: float) -> pd.Series:
    """Per step (unit): the lateness below which a rank is within the noise: twice the clocks'
    uncertainty per collective of the step, at least `min_ns` and the step-to-step noise `floor_ns`."""
    per = pc.groupby("unit")["collective"].size()
    return np.maximum(np.maximum(2 * clock_ns * per, min_ns), floor_ns).astype("float64")


def clock_spread_ns(coll: pd.DataFrame) -> float:
    """How well the ranks' clocks agree: the median spread of the collectives' ends."""
    return float(np.median(end_spread_ns(coll))) if len(coll) else 0.0


def floor_ns(coll: pd.DataFrame) -> float:
    """The step-to-step noise: of the work (step_noise_ns) or of the step time (span_noise_ns)."""
    return max([float(coll[c].max()) for c in ("noise_floor_ns", "span_noise_ns") if c in coll and len(coll)] + [0.0])
