"""Memory across ranks and runs: the ranks' digests (memory.RankMemory) of each input
side by side, the peak per rank, the difference between runs, and what stands out. Pure.

What stands out (each a sentence with its numbers, `found`):
- imbalance: a rank whose peak is more than IMBALANCE (10%) and MIN_EXCESS_BYTES (8 MiB) above
  the median of the other ranks' peaks in its run (18% of 0.4 MiB is no finding);
- reserved over allocated: at a rank's highest peak, reserved exceeds allocated by more than
  FRAGMENTATION (20%) and MIN_EXCESS_BYTES: the caching allocator holds that much in free cached
  blocks. The totals cannot say whether a later request fits those blocks, so the finding claims the
  excess, not that it is unusable; `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` is the
  suggestion where it is fragmentation;
- allocator calls inside steps: cudaMalloc/cudaFree (and kin) inside any step but the first
  (which may fill the cache): the caching allocator is missing (its cache emptied, a
  non-caching allocator, or sizes that never repeat); cudaFree synchronises the device.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracelab.core.note import Note

from ..fmt import binary_size, ms
from .memory import STEP_COLUMNS, TOP_COLUMNS, RankMemory

IMBALANCE = 0.10
FRAGMENTATION = 0.20
MIN_EXCESS_BYTES = 8 * 2**20  # below this an excess is a few allocator blocks, not a finding
PEAK_COLUMNS = ["input", "rank", "device", "peak_allocated_bytes", "peak_reserved_bytes", "step", "peak_during"]
EXPANDABLE = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
SECTION = "memory"  # the report's section id


@dataclass
class Memory:
    """Inputs' memory side by side: per step and rank (STEP_COLUMNS + input), live at the
    peaks (TOP_COLUMNS + input), per rank its highest peak (PEAK_COLUMNS), the runs' peaks
    against the first input's (`runs`: input, rank, peak_allocated_bytes, delta_bytes, ratio),
    what stands out (`found`: text, evidence) and notes."""

    steps: pd.DataFrame
    top: pd.DataFrame
    peaks: pd.DataFrame
    runs: pd.DataFrame
    found: list[tuple[str, int, dict]] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)


def combine(parts: list[tuple[str, dict[int, RankMemory]]]) -> Memory:
    """Each input (its name, its ranks' digests by rank) side by side."""
    steps, tops, notes = [], [], []
    for name, digests in parts:
        for rank, d in sorted(digests.items()):
            steps.append(d.steps.assign(rank=rank, input=name))
            tops.append(d.top.assign(rank=rank, input=name))
            notes += [n.about(name, rank) for n in d.notes]
    step_rows = _cat(steps, ["input", *STEP_COLUMNS])
    peaks = peak_per_rank(step_rows)
    found = imbalance(peaks) + fragmentation(peaks) + allocator_misses(step_rows)
    return Memory(step_rows, _cat(tops, ["input", *TOP_COLUMNS]), peaks, runs(peaks), found, notes)


def _cat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frames = [f[columns] for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame({c: [] for c in columns})


def _level(steps: pd.DataFrame) -> pd.Series:
    """The peak compared: allocated, else (nsys) the reserved total."""
    return steps["peak_allocated_bytes"].astype("float64").fillna(steps["reserved_bytes"].astype("float64"))


def peak_per_rank(steps: pd.DataFrame) -> pd.DataFrame:
    """Per input and rank, the step of its highest peak and the figures there."""
    if not len(steps):
        return pd.DataFrame({c: [] for c in PEAK_COLUMNS})
    at = steps.assign(level=_level(steps)).groupby(["input", "rank"], sort=False)["level"].idxmax()
    rows = steps.loc[at.dropna().astype(int)]
    return rows.rename(columns={"reserved_bytes": "peak_reserved_bytes"})[PEAK_COLUMNS].reset_index(drop=True)


def _peak(row: pd.Series) -> float:
    return row["peak_allocated_bytes"] if pd.notna(row["peak_allocated_bytes"]) else row["peak_reserved_bytes"]


def _of(name: str) -> str:
    """The input's prefix of a sentence ("" for the ranks of one unnamed run)."""
    return f"{name}: " if name else ""


def imbalance(peaks: pd.DataFrame) -> list[tuple[str, int, dict]]:
    """Ranks whose peak is more than IMBALANCE and MIN_EXCESS_BYTES above the median of their
    run's other ranks."""
    out = []
    for name, g in peaks.groupby("input", sort=False):
        if len(g) < 2:
            continue
        level = g.apply(_peak, axis=1).astype("float64")
        for i, row in g.iterrows():
            others = float(level.drop(i).median())
            if others > 0 and level[i] > (1 + IMBALANCE) * others and level[i] - others >= MIN_EXCESS_BYTES:
                over = level[i] / others - 1
                out.append((f"{_of(name)}rank {row['rank']} peaks at {binary_size(level[i])} of memory, {100 * over:.0f}% above "
                            f"the other ranks' median ({binary_size(others)}): it holds more than the others", 0,
                            {"input": name, "rank": int(row["rank"]), "peak_bytes": int(level[i]),
                             "others_median_bytes": int(others)}))
    return out


def fragmentation(peaks: pd.DataFrame) -> list[tuple[str, int, dict]]:
    """Ranks whose reserved exceeds allocated at their peak by more than FRAGMENTATION and
    MIN_EXCESS_BYTES."""
    out = []
    for _, row in peaks.iterrows():
        alloc, reserved = row["peak_allocated_bytes"], row["peak_reserved_bytes"]
        if (pd.isna(alloc) or pd.isna(reserved) or alloc <= 0 or reserved <= (1 + FRAGMENTATION) * alloc
                or reserved - alloc < MIN_EXCESS_BYTES):
            continue
        out.append((f"{_of(row['input'])}rank {row['rank']} reserves {binary_size(reserved)} at its peak for {binary_size(alloc)} "
                    f"allocated ({100 * (reserved / alloc - 1):.0f}% more): the caching allocator keeps "
                    f"{binary_size(reserved - alloc)} in free cached blocks; where later requests do not fit "
                    f"them (fragmentation), {EXPANDABLE} lets segments grow instead", 0,
                    {"input": row["input"], "rank": int(row["rank"]), "reserved_bytes": int(reserved),
                     "allocated_bytes": int(alloc)}))
    return out


def allocator_misses(steps: pd.DataFrame) -> list[tuple[str, int, dict]]:
    """Per input and rank, allocator calls inside steps after the first (module docstring)."""
    out = []
    stepped = steps[steps["step"].notna() & steps["alloc_calls"].notna()]
    for (name, rank), g in stepped.groupby(["input", "rank"], sort=False):
        later = g[g["step"] > g["step"].min()] if len(g) > 1 else g.iloc[:0]
        hit = later[later["alloc_calls"] > 0]
        if not len(hit):
            continue
        calls, ns, sync = (int(hit[c].sum()) for c in ("alloc_calls", "alloc_ns", "alloc_sync_calls"))
        out.append((f"{_of(name)}rank {rank} calls the CUDA allocator {calls:,} times inside {len(hit)} of {len(later)} "
                    f"steps after the first ({ms(ns, 2)}, {sync} of them synchronising): the caching "
                    "allocator is missing (sizes that do not repeat, empty_cache, or no caching)", ns,
                    {"input": name, "rank": int(rank), "alloc_calls": calls, "alloc_ns": ns, "sync_calls": sync}))
    return out


def runs(peaks: pd.DataFrame) -> pd.DataFrame:
    """Each input's peak per rank against the first input's of that rank (align, then subtract),
    like with like: allocated where both inputs give it, else reserved where both do (`of` says
    which), else no difference (one input has neither of the other's quantities)."""
    columns = ["input", "rank", "of", "peak_bytes", "delta_bytes", "ratio"]
    if peaks["input"].nunique() < 2:
        return pd.DataFrame({c: [] for c in columns})
    level = peaks[["input", "rank", "peak_allocated_bytes", "peak_reserved_bytes"]].copy()
    for c in ("peak_allocated_bytes", "peak_reserved_bytes"):
        level[c] = level[c].astype("float64")
    first = level[level["input"] == level["input"].iloc[0]].drop(columns="input")
    out = level.merge(first, on="rank", how="left", suffixes=("", "_base"))
    both = {q: out[f"peak_{q}_bytes"].notna() & out[f"peak_{q}_bytes_base"].notna() for q in ("allocated", "reserved")}
    out["of"] = np.where(both["allocated"], "allocated", np.where(both["reserved"], "reserved", None))
    out["peak_bytes"] = np.where(both["allocated"], out["peak_allocated_bytes"],
                                 np.where(both["reserved"], out["peak_reserved_bytes"], out.apply(_peak, axis=1)))
    base = np.where(both["allocated"], out["peak_allocated_bytes_base"], out["peak_reserved_bytes_base"])
    base = np.where(out["of"].notna(), base, np.nan).astype("float64")
    out["delta_bytes"] = out["peak_bytes"].astype("float64") - base
    out["ratio"] = np.divide(out["peak_bytes"].astype("float64"), base, out=np.full(len(out), np.nan), where=base > 0)
    return out[columns]


def with_memory(inputs: list) -> tuple[list, list[Note]]:
    """The inputs whose traces hold memory events, and one note per kind of input without."""
    have, alike = [], {}
    for i in inputs:
        d: RankMemory = i.digest("memory")
        if len(d.steps):
            have.append(i)
        else:
            note = d.notes[0] if d.notes else Note("memory_none")
            alike.setdefault(note.text, (note, []))[1].append(i.label)
    return have, [note.about(", ".join(map(str, labels))) for note, labels in alike.values()]


def by_run(inputs: list) -> list[tuple[str, dict[int, RankMemory]]]:
    """The inputs by run (their group; "" for the ranks of one run), each rank's digest by rank."""
    groups: dict[str, dict[int, RankMemory]] = {}
    for i in inputs:
        groups.setdefault(i.group, {})[i.rank] = i.digest("memory")
    return list(groups.items())
