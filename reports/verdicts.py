"""Who waits on whom, per step, and whether one rank is the straggler of the run.

Input: the matched collectives (collectives.collectives) and the events they came from.
Pure functions; the verdict is a plain dict, its text made by `verdict_line` (reports/timeline/straggler_text.py).

Per collective, the last rank to arrive made the others wait `skew` = last - first
arrival. A skew under the noise is nobody's: the clocks' uncertainty (twice the median
spread of the collectives' ends, at least 1 us) and the work's own step-to-step
variation (step_noise_ns). Per step, the gating rank
is the rank that was last for most of the step's skew; its `why` compares the GPU
work each rank did between its previous collective and this one: more busy GPU time
on the gating rank ("more GPU work before the collective", with the kernels that
differ) or more idle GPU time (the host launched late).

The run's straggler is the rank that is significantly late, by more than the noise, and gates most of the steps:
per step each rank's lateness (its arrivals less the other ranks' mean, summed over the
step's collectives), a one-sided Wilcoxon signed-rank test that it leans late (exact;
Bonferroni over the ranks), p < STRAGGLER_ALPHA, the rank gates more than half the gated steps, and its
mean lateness per step is above the clocks' noise (their median end spread, at least MIN_SKEW_NS) at each
of the step's collectives: a rank steadily late by less than the clocks can tell apart is not a
straggler (the ranks of a CPU run sharing two cores can lean one way by 0.6x that, p < 0.05 over a
thousand steps). Not the step-to-step noise: a rank that stalls every other step raises that noise
itself, and is the straggler (whatif-stall-2gpu-torch).
Above SIGNED_RANK_UP_TO ranks the test is instead how often the rank gates: a binomial tail
of its gated steps against 1/ranks per step (Bonferroni over the ranks). The signed-rank
test cannot scale: with n steps its smallest p is 2^-n, times the ranks, so 64 ranks need
11 steps and 1,024 need 15 before any straggler could be named; being last in 6 of 6 gated
steps among 64 ranks happens by chance with p = 64 x 64^-6. Which test applies depends on
the rank count only, never on the data.
Magnitudes count: a rank 3 ms late in six steps and 0.3 ms early in two is late, which
a sign test on 6 of 8 would not say. Short captures (3 to 5 steps, where those tests cannot
reach STRAGGLER_ALPHA) have a second way to a straggler: the block test of reports/evidence.py (a t-test
over steps of the rank's per-step lateness, p < 0.01, with the rank last at most collectives
and late beyond the clock and step-to-step noise in every step); the line states the evidence. Otherwise "alternating" where consecutive gated steps switch gating
rank at least ALTERNATING_SHARE of the time and more often than chance (binomial against
1 - 1/ranks per move, p < STRAGGLER_ALPHA), else "no clear straggler" with the counts. Without
steps every collective is its own unit (basis "collectives"). Times are the GPU's, or
the CPU's in a CPU-only run (gloo), and the causes say which.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd

from . import evidence as E
from .stats import groups as G
from .fmt import ms
from .stats import MIN_SKEW_NS, STRAGGLER_ALPHA
from .stats.noise import clock_spread_ns, noise_ns
from .stats.tests import binomial_tail, signed_rank_p
from .timeline.intervals import busy_before, merge_intervals

SIGNED_RANK_UP_TO = 4  # ranks; with more, the test of a straggler is how often it gates (see straggler)
ALTERNATING_SHARE = 0.8  # share of consecutive gated units whose gating rank differs
TOP_KERNELS = 3



def per_collective(coll: pd.DataFrame) -> pd.DataFrame:
    """One row per collective: collective, step, unit (the step, or the collective where
    steps are unknown), skew_ns, last_rank (NA under the noise)."""
    if coll.empty:
        return _per_collective_empty(coll)
    g = G.by(coll["collective"].to_numpy(dtype=np.int64))
    arrive = coll["arrival_ns"].to_numpy()
    skew = g.max(arrive) - g.min(arrive)
    step = g.first(coll["step"])
    last = pd.array(g.first(coll["last_rank"]), dtype="Int64")
    last = pd.arrays.IntegerArray(last.to_numpy(dtype=np.int64, na_value=0), last.isna() | (skew < noise_ns(coll)))
    unit = step if not step.isna().all() else pd.array(g.keys, dtype="Int64")
    keep = ~np.asarray(unit.isna(), dtype=bool)
    return pd.DataFrame({"collective": g.keys[keep], "step": step[keep], "last_rank": last[keep], "skew_ns": skew[keep],
                         "unit": unit[keep]})


def _per_collective_empty(coll: pd.DataFrame) -> pd.DataFrame:
    """per_collective of no collectives: its columns, typed as a groupby of `coll` types them."""
    out = coll.groupby("collective", sort=True).agg(step=("step", "first"), first_ns=("arrival_ns", "min"),
                                                      last_ns=("arrival_ns", "max"),
                                                      last_rank=("last_rank", "first")).reset_index()
    out["skew_ns"] = out.pop("last_ns") - out.pop("first_ns")
    out["last_rank"] = out["last_rank"].astype("Int64")
    out["unit"] = out["collective"].astype("Int64")
    return out


def gating(coll: pd.DataFrame) -> pd.DataFrame:
    """One row per unit (step): unit, collectives, skew_ns (summed), gating_rank (last for
    most of the skew; NA when no collective's skew passes the noise), gating_skew_ns."""
    return _gating_of(per_collective(coll))


def _gating_of(pc: pd.DataFrame) -> pd.DataFrame:
    """gating of the collectives whose per_collective is `pc`."""
    cols = ["unit", "collectives", "skew_ns", "gating_rank", "gating_skew_ns"]
    if pc.empty:
        return pd.DataFrame(columns=cols)
    unit = pc["unit"].to_numpy(dtype=np.int64)
    skew = pc["skew_ns"].to_numpy(dtype=np.int64)
    units = G.by(unit)
    rank, skew_by_rank = _gating_rank(unit, pc["last_rank"], skew, units.keys)
    return pd.DataFrame({"unit": pd.array(units.keys, dtype=pc["unit"].dtype),
                         "collectives": np.diff(np.r_[units.starts, len(unit)]), "skew_ns": units.sum(skew),
                         "gating_rank": rank, "gating_skew_ns": skew_by_rank})[cols]


def _gating_rank(unit: np.ndarray, last_rank: pd.Series, skew: np.ndarray, keys: np.ndarray
                 ) -> tuple[pd.api.extensions.ExtensionArray, np.ndarray]:
    """Per unit (`keys`): the last rank with the most skew summed over the unit's collectives
    (the lowest rank on a tie), NA where none has a last rank, and that skew (0 there)."""
    known = last_rank.notna().to_numpy()
    rank = last_rank.to_numpy(dtype=np.int64, na_value=-1)[known]
    pairs = G.by(unit[known] * (int(rank.max()) + 1 if len(rank) else 1) + rank)
    pair_unit, pair_rank, pair_skew = pairs.min(unit[known]), pairs.min(rank), pairs.sum(skew[known])
    best = np.lexsort((pair_rank, -pair_skew, pair_unit))
    top = best[np.r_[True, pair_unit[best][1:] != pair_unit[best][:-1]]] if len(best) else best
    at = np.searchsorted(keys, pair_unit[top])
    out_rank = np.zeros(len(keys), np.int64)
    out_skew = np.zeros(len(keys), np.int64)
    out_rank[at], out_skew[at] = pair_rank[top], pair_skew[top]
    missing = np.ones(len(keys), bool)
    missing[at] = False
    return pd.arrays.IntegerArray(out_rank, missing), out_skew


def waits(coll: pd.DataFrame) -> pd.DataFrame:
    """Wide: one row per unit, one column per rank, the rank's summed wait (ns)."""
    pc = per_collective(coll)
    rows, at = _unit_rows(coll, pc)
    unit = pc["unit"].to_numpy(dtype=np.int64)[at]
    wait = coll["wait_ns"].to_numpy(dtype=np.int64)[rows]
    return _wide(pc, unit, coll["rank"].to_numpy()[rows], wait, _int_sums)


def lateness(coll: pd.DataFrame) -> pd.DataFrame:
    """Unit x rank: how much later than the mean of the other ranks the rank arrived at the
    unit's collectives (ns, summed over them; negative: earlier)."""
    pc = per_collective(coll)
    rows, at = _unit_rows(coll, pc)
    unit = pc["unit"].to_numpy(dtype=np.int64)[at]
    arrive = coll["arrival_ns"].to_numpy(dtype=np.int64)[rows]
    collective = G.by(coll["collective"].to_numpy(dtype=np.int64)[rows])
    total = np.empty(len(rows), np.int64)
    total[collective.order] = collective.sum(arrive)[collective.of]
    others = (total - arrive) / (coll["ranks"].to_numpy(dtype=np.int64)[rows] - 1)
    return _wide(pc, unit, coll["rank"].to_numpy()[rows], arrive - others, _compensated_sums)


def _unit_rows(coll: pd.DataFrame, pc: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The rows of `coll` whose collective has a unit (`pc`: its per_collective), in order, and
    each one's row in `pc`."""
    ids = pc["collective"].to_numpy(dtype=np.int64)
    own = coll["collective"].to_numpy(dtype=np.int64)
    at = np.minimum(np.searchsorted(ids, own), max(len(ids) - 1, 0))
    rows = np.flatnonzero(ids[at] == own) if len(ids) else np.zeros(0, np.int64)
    return rows, at[rows]


def _wide(pc: pd.DataFrame, unit: np.ndarray, rank: np.ndarray, values: np.ndarray, sums) -> pd.DataFrame:
    """Unit x rank: `values` summed per (unit, rank) by `sums` (cells, values, count), 0 where none:
    the pivot table of them."""
    units, u = np.unique(unit, return_inverse=True)
    ranks, r = np.unique(rank, return_inverse=True)
    table = sums(u.reshape(-1) * len(ranks) + r.reshape(-1), values, len(units) * len(ranks))
    return pd.DataFrame(table.reshape(len(units), len(ranks)), index=pd.Index(
        pd.array(units, dtype=pc["unit"].dtype), name="unit"), columns=pd.Index(ranks, name="rank"))


def _int_sums(cell: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, np.int64)
    np.add.at(out, cell, values)
    return out


def _compensated_sums(cell: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Per cell, its values summed in row order with Kahan's compensation, as pandas' groupby sum
    of floats does (the same float to the last bit): one step per row of the longest cell."""
    g = G.by(cell)
    nth = np.arange(len(cell)) - g.starts[g.of]
    label, value = g.keys[g.of], values[g.order]
    total, carry = np.zeros(n), np.zeros(n)
    for k in range(int(nth.max()) + 1 if len(nth) else 0):
        at = nth == k
        lab = label[at]
        y = value[at] - carry[lab]
        t = total[lab] + y
        carry[lab] = np.where(np.isnan(t - total[lab] - y), 0.0, t - total[lab] - y)
        total[lab] = t
    return total


def straggler(gate: pd.DataFrame, coll: pd.DataFrame) -> dict[str, Any]:
    """The run's verdict: pattern (straggler, alternating, none), rank (int or None), the
    test's numbers (units gated per rank; p value of the signed-rank test of the most likely
    rank's per-unit lateness, Bonferroni over the ranks; its mean lateness) and the
    per-collective last counts. A straggler needs p < STRAGGLER_ALPHA, to gate most gated units and a
    positive mean lateness."""
    ranks = sorted(int(r) for r in coll["rank"].unique()) if len(coll) else []
    pc = per_collective(coll) if len(coll) else pd.DataFrame(columns=["last_rank", "step"])
    basis = "steps" if len(pc) and pc["step"].notna().any() else "collectives"
    gated = gate.dropna(subset=["gating_rank"]) if len(gate) else gate
    counts = {r: int((gated["gating_rank"] == r).sum()) for r in ranks} if len(gated) else {r: 0 for r in ranks}
    last = {r: int((pc["last_rank"] == r).sum()) for r in ranks}
    n = int(sum(counts.values()))
    out = {"rank": None, "pattern": "none", "basis": basis, "test": "", "units": int(len(gate)), "gated_units": n,
           "gated_by_rank": counts, "last_at_collectives": last, "collectives": int(len(pc)),
           "p_value": None, "lateness_ns": None, "alternation_p": None, "alpha": STRAGGLER_ALPHA}
    if len(ranks) < 2 or n == 0:
        return out
    late = lateness(coll)
    if len(ranks) <= SIGNED_RANK_UP_TO:
        p_of = {r: min(1.0, signed_rank_p(late[r].to_numpy()) * len(ranks)) if r in late else 1.0 for r in ranks}
        test = "signed-rank test of its lateness"
    else:  # a rank gating k of n by chance: Binomial(n, 1/ranks) of each, Bonferroni over the ranks
        p_of = {r: min(1.0, binomial_tail(counts[r], n, 1 / len(ranks)) * len(ranks)) for r in ranks}
        test = f"binomial test of the {'steps' if basis == 'steps' else 'collectives'} it gates against 1 in {len(ranks)}"
    top = min(ranks, key=lambda r: (p_of[r], -counts[r], r))
    out.update(p_value=p_of[top], lateness_ns=float(late[top].mean()) if top in late else 0.0, test=test)
    if p_of[top] < STRAGGLER_ALPHA and counts[top] > n / 2 and out["lateness_ns"] > 0:  # late on average too:
        # the others lose time to it (last often, yet earlier on average, it costs them nothing in all)
        ev = E.evidence_of(late, pc, coll, top)
        floor = E.clock_per_step_ns(pc, max(clock_spread_ns(coll), MIN_SKEW_NS))  # at least 1 us a collective
        if ev is None or ev["lateness_ns"] > floor:
            return {**out, "rank": top, "pattern": "straggler", "evidence": ev}
        out["within_noise"] = {"rank": top, "floor_ns": floor, **ev}  # steadily late, by less than the clocks tell
    block = E.block_of(late, pc, coll, MIN_SKEW_NS) if basis == "steps" else {"named": False}
    out["block"] = block if block.get("rank") is not None else None
    if block["named"]:  # few steps: the block test over steps and the size against the noise (reports/evidence.py)
        return {**out, "rank": block["rank"], "pattern": "straggler", "p_value": block["p_value"],
                "lateness_ns": block["lateness_ns"], "test": "block t-test of its per-step lateness",
                "evidence": block}
    seq = gated.sort_values("unit")["gating_rank"].astype(int).to_numpy()
    switches, moves = int((seq[1:] != seq[:-1]).sum()), max(len(seq) - 1, 0)
    if moves >= 3:  # more switches of the last rank than chance (1 - 1/ranks per move) gives?
        out["alternation_p"] = binomial_tail(switches, moves, 1 - 1 / len(ranks))
        if switches >= ALTERNATING_SHARE * moves and out["alternation_p"] < STRAGGLER_ALPHA:
            out["pattern"] = "alternating"
    return out


def windows(rows: pd.DataFrame, comm: pd.DataFrame) -> pd.DataFrame:
    """One rank's windows before its collectives: per row of `comm` (the rank's communication
    rows, collectives.comm_rows, in arrival order), window_start_ns (the rank's previous
    communication end, its first activity for the first), busy_ns and idle_ns of its GPU
    (the union of `rows`, its activity other than communication) from there to the arrival.
    A rank's windows never overlap: each ends at an arrival, the next starts at or after it."""
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    seg = merge_intervals(start, start + rows["dur_ns"].to_numpy(dtype=np.int64))
    arrive = comm["arrival_ns"].to_numpy(dtype=np.int64)
    begin = np.r_[start.min() if len(start) else 0, comm["end_ns"].to_numpy(dtype=np.int64)[:-1]][:len(arrive)]
    begin = np.minimum(begin, arrive)
    busy = busy_before(*seg, arrive) - busy_before(*seg, begin)
    # one frame made, not one per column added
    return pd.DataFrame({**{c: comm[c].array for c in comm.columns},
                         "window_start_ns": begin, "busy_ns": busy, "idle_ns": arrive - begin - busy})


def time_in(rows: pd.DataFrame, windows_df: pd.DataFrame, key: str) -> pd.DataFrame:
    """ns per (window, key) of one rank's `rows` that start inside its windows (`windows_df`:
    window_start_ns and arrival_ns in arrival order, from `windows`; window = its position).
    Windows never overlap, so each row falls in at most one: one searchsorted."""
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    begin = windows_df["window_start_ns"].to_numpy(dtype=np.int64)
    if not len(begin):
        start = start[:0]
    pos = np.searchsorted(begin, start, side="right") - 1
    inside = (pos >= 0) & (start < windows_df["arrival_ns"].to_numpy(dtype=np.int64)[np.maximum(pos, 0)])
    names = _as_str_categorical(rows[key], inside)
    window = pos[inside].astype(np.int64)
    # per (window, name) in order of first appearance, as groupby(sort=False, observed=True): integer sums
    pair, at = pd.factorize(window * max(len(names.categories), 1) + names.codes)
    ns = np.zeros(len(at), np.int64)
    np.add.at(ns, pair, rows["dur_ns"].to_numpy(dtype=np.int64)[inside])
    first = np.unique(pair, return_index=True)[1]
    return pd.DataFrame({"window": window[first].astype(np.int32),
                         key: pd.Categorical.from_codes(names.codes[first], dtype=names.dtype), "dur_ns": ns})


def _as_str_categorical(column: pd.Series, mask: np.ndarray) -> pd.Categorical:
    """pd.Categorical(column.astype(str)[mask]): a categorical column's names made once per
    category, not once per row (its categories: the names present, sorted)."""
    if not isinstance(column.dtype, pd.CategoricalDtype):
        values = np.asarray(column.array, dtype=object)[mask]
        if isinstance(column.dtype, pd.StringDtype) and not column.isna().to_numpy()[mask].any():  # str already
            codes, names = pd.factorize(values, sort=True)  # the categories pd.Categorical sorts, in one pass
            return pd.Categorical.from_codes(codes, categories=pd.Index(names, dtype=object))
        return pd.Categorical(values.astype(str).astype(object))
    codes = column.cat.codes.to_numpy()[mask]
    used = np.unique(codes)
    used = np.r_[used[used >= 0], used[used < 0]]  # a missing name (-1) last, as its label is
    labels = np.array([str(c) for c in column.cat.categories[used[used >= 0]]] + ["nan"] * int((used < 0).any()),
                      dtype=object)  # NaN: "nan", as astype(str) writes it
    categories, label_at = np.unique(labels, return_inverse=True)
    lookup = np.zeros(len(column.cat.categories) + 1, np.int64)  # code -1 (NaN) is the last slot
    lookup[np.where(used >= 0, used, len(column.cat.categories))] = label_at.reshape(-1)
    return pd.Categorical.from_codes(lookup[codes], categories=pd.Index(categories, dtype=object))


@dataclass(frozen=True)
class _Chosen:
    """The rows of the collectives each unit's gating rank was last at: per row its rank, its
    window (the position among its rank's communication rows), its unit's position in `units`
    and whether it is the gating rank's own; `gate`: each unit's gating rank."""
    rank: np.ndarray
    window: np.ndarray
    unit: np.ndarray
    mine: np.ndarray
    units: np.ndarray
    gate: np.ndarray


def _chosen(coll: pd.DataFrame, pc: pd.DataFrame, gate: pd.DataFrame) -> tuple[_Chosen, np.ndarray]:
    """_Chosen of `coll` (pc: its per_collective; gate: its gating), and the positions of its rows kept."""
    rows, at = _unit_rows(coll, pc)
    unit = pc["unit"].to_numpy(dtype=np.int64)[at]
    last = pc["last_rank"].to_numpy(dtype=np.int64, na_value=-1)[at]
    gated = gate[gate["gating_rank"].notna()]
    units = gated["unit"].to_numpy(dtype=np.int64)
    gate_rank = gated["gating_rank"].to_numpy(dtype=np.int64)
    pos = np.minimum(np.searchsorted(units, unit), len(units) - 1)
    keep = (units[pos] == unit) & (last >= 0) & (last == gate_rank[pos])
    rows, pos = rows[keep], pos[keep]
    rank = coll["rank"].to_numpy(dtype=np.int64)[rows]
    return _Chosen(rank, coll["window"].to_numpy(dtype=np.int64)[rows], pos, rank == gate_rank[pos], units,
                   gate_rank), rows


@dataclass(frozen=True)
class _NameSums:
    """Per (unit, name) pair, sorted by unit then name: the unit's position, the name, its ns
    summed over all ranks and the unit's gating rank's own; `at`: where each unit's pairs begin
    (units past the last pair: its end)."""
    unit: np.ndarray
    name: np.ndarray
    total_ns: np.ndarray
    own_ns: np.ndarray
    at: np.ndarray

    def of(self, unit: int) -> slice:
        return slice(self.at[unit], self.at[unit + 1])


def _names_in(chosen: _Chosen, tables: Mapping[int, pd.DataFrame], key: str) -> _NameSums:
    """Per (unit, name): ns summed over all ranks, and the unit's gating rank's own, of the
    ranks' per-window tables (`tables`: rank -> time_in of `key`) in the `chosen` windows.
    Each rank's table is cut to its chosen windows on its own: only those rows meet."""
    unit, names, ns, mine = [], [], [], []
    for rank in np.unique(chosen.rank):
        t = tables.get(int(rank))
        if t is None or t.empty:
            continue
        rows = np.flatnonzero(chosen.rank == rank)
        order = rows[np.argsort(chosen.window[rows], kind="stable")]
        window = t["window"].to_numpy(dtype=np.int64)
        at = np.minimum(np.searchsorted(chosen.window[order], window), len(order) - 1)
        hit = chosen.window[order][at] == window
        unit.append(chosen.unit[order][at][hit])
        names.append(np.asarray(t[key].array[hit].astype(str), dtype=object))
        ns.append(t["dur_ns"].to_numpy(dtype=np.int64)[hit])
        mine.append(chosen.gate[unit[-1]] == rank)
    return _name_sums(*(np.concatenate(a) if a else np.zeros(0, d) for a, d in
                        ((unit, np.int64), (names, object), (ns, np.int64), (mine, bool))), len(chosen.units))


def _name_sums(unit: np.ndarray, names: np.ndarray, ns: np.ndarray, mine: np.ndarray, n_units: int) -> _NameSums:
    """_NameSums of rows (unit position, name, ns, the gating rank's own), names in sorted order
    (as a groupby by name sorts them)."""
    code, distinct = pd.factorize(names, sort=True)
    pairs = G.by(unit * max(len(distinct), 1) + code)
    pair_unit = pairs.min(unit)
    return _NameSums(pair_unit, np.asarray(distinct, dtype=object)[pairs.min(code)] if len(code) else names,
                     pairs.sum(ns), pairs.sum(np.where(mine, ns, 0)),
                     np.searchsorted(pair_unit, np.arange(n_units + 1)))


def _extra(sums: _NameSums, unit: int, n_others: int, work_ns: int) -> dict[str, int]:
    """The TOP_KERNELS names (kernels or scopes) whose ns before the gating rank's collectives
    of the unit exceed the other ranks' mean the most, each by over a tenth of the extra work
    (`sums`: per (unit, name), _names_in); largest first."""
    part = sums.of(unit)
    own = sums.own_ns[part]
    diff = own - (sums.total_ns[part] - own) / n_others
    names = sums.name[part]
    keep = names != ""  # rows outside every scope name nothing
    diff, names = diff[keep], names[keep]
    big = diff > max(work_ns, 0) / 10
    diff, names = diff[big], names[big]
    return {str(names[i]): int(diff[i]) for i in _descending(diff)[:TOP_KERNELS]}


def _descending(values: np.ndarray) -> np.ndarray:
    """The order Series.sort_values(ascending=False) gives `values` (no NaN), ties included:
    pandas sorts the reversed values ascending and reverses that."""
    reverse = np.arange(len(values))[::-1]
    return reverse[values[::-1].argsort(kind="quicksort")][::-1]


def _by_unit(chosen: _Chosen, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per unit (position): the gating rank's sum of `values` over the chosen rows, and the other ranks'."""
    n = len(chosen.units)
    mine = np.zeros(n, values.dtype)
    others = np.zeros(n, values.dtype)
    np.add.at(mine, chosen.unit[chosen.mine], values[chosen.mine])
    np.add.at(others, chosen.unit[~chosen.mine], values[~chosen.mine])
    return mine, others


def _n_others(chosen: _Chosen) -> np.ndarray:
    """Per unit (position): how many ranks other than its gating rank the chosen rows hold, at least 1."""
    ranks = int(chosen.rank.max()) + 1 if len(chosen.rank) else 1
    pairs = np.unique(chosen.unit[~chosen.mine] * ranks + chosen.rank[~chosen.mine])
    return np.maximum(np.bincount(pairs // ranks, minlength=len(chosen.units)), 1)


def why(coll: pd.DataFrame, kernels: Mapping[int, pd.DataFrame], scopes: Mapping[int, pd.DataFrame],
        device: str = "GPU") -> pd.DataFrame:
    """Per gated unit: why its gating rank was late, against the mean of the other ranks
    over the collectives it was last at: extra_work_ns (more GPU busy time before them),
    extra_idle_ns (more idle GPU time), cause ("more GPU work" / "idle GPU"), and the
    kernels and scopes whose time before them differs most (name -> extra ns, largest first).
    `coll`: collectives.collectives with each rank's `window` (its position among the rank's
    communication rows) and the window's busy_ns and idle_ns (`windows`); `kernels`, `scopes`:
    rank -> its `time_in` table; `device`: "GPU", or "CPU" for a CPU-only run."""
    cols = ["unit", "gating_rank", "extra_work_ns", "extra_idle_ns", "cause", "kernels", "scopes"]
    pc = per_collective(coll) if len(coll) else None
    gate = _gating_of(pc) if pc is not None else None
    if gate is None or gate["gating_rank"].isna().all():
        return pd.DataFrame(columns=cols)
    chosen, rows = _chosen(coll, pc, gate)
    n_others = _n_others(chosen)
    busy_mine, busy_others = _by_unit(chosen, coll["busy_ns"].to_numpy()[rows])
    idle_mine, idle_others = _by_unit(chosen, coll["idle_ns"].to_numpy()[rows])
    by_kernel, by_scope = _names_in(chosen, kernels, "kernel"), _names_in(chosen, scopes, "scope")
    out = []
    for u in np.unique(chosen.unit):
        work = int(busy_mine[u] - busy_others[u] / n_others[u])
        idle = int(idle_mine[u] - idle_others[u] / n_others[u])
        out.append({"unit": chosen.units[u], "gating_rank": int(chosen.gate[u]), "extra_work_ns": work,
                    "extra_idle_ns": idle, "cause": f"more {device} work" if work >= idle else f"idle {device}",
                    "kernels": _extra(by_kernel, u, int(n_others[u]), work),
                    "scopes": _extra(by_scope, u, int(n_others[u]), work)})
    return pd.DataFrame(out, columns=cols)



def waits_from_comm_time(per_rank: pd.DataFrame) -> dict[str, Any]:
    """Who waited, from time in communication kernels alone, for sources without timestamps
    (proton). A collective kernel starts when its rank arrives and spins until the last rank
    has, so a rank's time in it is its wait plus the transfer, and the transfer is common to
    all ranks: a rank's excess over the rank with the least is how much longer it waited.
    On 2 H200s (tests/data/ddp-2gpu-*) the excess equals the summed waits' difference that
    torch and nsys timestamps give, to < 0.1 ms per step. Totals cannot say in which steps,
    nor whether beyond the noise, so this names no straggler.
    per_rank: rank, comm_ns_per_step. Returns least_rank (the one waited for on average),
    excess_ns_per_step {rank: ns}, and the line."""
    if len(per_rank) < 2 or not (per_rank["comm_ns_per_step"] > 0).any():
        return {"least_rank": None, "excess_ns_per_step": {}, "line": "no timestamps and no collectives to read waits from"}
    comm = per_rank.set_index("rank")["comm_ns_per_step"].astype(float)
    least = int(comm.idxmin())
    excess = {int(r): int(round(v - comm[least])) for r, v in comm.items()}
    most = max(excess, key=excess.get)
    line = (f"no timestamps (proton): a collective kernel spins until the last rank arrives, so its time holds the "
            f"wait: rank {most} spent {ms(excess[most])} per step more in communication than rank {least}, "
            f"the rank the others waited for on average; in which steps, and whether beyond the noise, needs a "
            f"timed trace (torch or nsys)")
    return {"least_rank": least, "excess_ns_per_step": excess, "line": line}
