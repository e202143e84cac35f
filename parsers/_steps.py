"""Steps for every parser: which training step (or decode token) each row belongs to.

A step is a user range whose name matches the step pattern: by default
`ProfilerStep#N` (torch.profiler's schedule), `stepN`, `step N`, `step_N`,
`iteration N`, `iter N`, `token N` (case-insensitive). The step number is the
first number the pattern captures; a pattern with no group numbers the
matching ranges 0, 1, 2... in start order within their process.

A step is ONE OCCURRENCE of a step range. Where a number comes back later in
the process (`token 1..31` once per decode sample, `step 0..3` once per epoch),
the k-th occurrence (k = 0, 1, ...) of number N becomes step N + k * 10^d, d
the digits of the largest number there: `token 3` of the second sample is step
103 of 1..131, its last digits still the trace's number. Ranges of one number
that overlap (the same step marked on two threads, or nested) are one
occurrence. The k-th occurrence is the same step on every rank and under every
profiler of the same program, so steps align across them.

A row belongs to the step whose range, on ANY thread of the row's process,
holds the start of the call that launched it (the autograd thread and NCCL's
hooks launch kernels inside the main thread's step). Of nested matching
ranges the innermost holding the call wins. Rows outside every step get NA.
Step ranges are left out of scopes: the step column carries them, and a
scope per step would keep scopes from aligning across steps and runs.
"""
from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np
import pandas as pd

from tracelab.core.errors import UsageError
from tracelab.core.note import Note

DEFAULT_STEP_PATTERN = r"ProfilerStep#(\d+)|(?:step|iteration|iter|token)[ _#]?(\d+)"


def compile_pattern(pattern: str | None) -> re.Pattern:
    """The step pattern, matched against whole range names: `pattern` (Options.step_pattern, which
    the cache keys on), else DEFAULT_STEP_PATTERN."""
    pattern = pattern or DEFAULT_STEP_PATTERN
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as e:
        raise UsageError("--step", f"{pattern!r} is not a regular expression: {e}") from None


def is_step(names: list[str], pattern: re.Pattern) -> np.ndarray:
    """Mask of range names that are steps (whole-name matches)."""
    return name_mask(names, lambda n: pattern.fullmatch(n) is not None)


class Names(list):
    """A column of names (a Kineto collector's) that indexes its distinct names once: every mask
    asked of it (name_mask, each pattern of parsers/_kineto_graphs, the host kinds) is then one
    verdict per distinct name, spread by the index in numpy, not one dict look-up per row each.
    The column only grows (appended to); the index is made again when its length changed."""

    def distinct(self) -> tuple[list[str], np.ndarray]:
        """The distinct names in first-seen order, and per row its name's place among them (int32)."""
        made = self.__dict__.get("_distinct")
        if made is None or made[0] != len(self):
            index = dict.fromkeys(self)
            for i, name in enumerate(index):
                index[name] = i
            made = self._distinct = (len(self), list(index),
                                     np.fromiter(map(index.__getitem__, self), dtype=np.int32, count=len(self)))
        return made[1], made[2]


def per_name(names: list[str], verdict: Callable[[str], Any], dtype: type) -> np.ndarray:
    """verdict(name) per row as `dtype`, computed once per distinct name (a trace's 40k CPU
    operators and 25k runtime calls have a few hundred names)."""
    if isinstance(names, Names):
        distinct, index = names.distinct()
        return np.fromiter(map(verdict, distinct), dtype=dtype, count=len(distinct))[index]
    of = {name: verdict(name) for name in dict.fromkeys(names)}
    return np.fromiter(map(of.__getitem__, names), dtype=dtype, count=len(names))


def name_mask(names: list[str], test: Callable[[str], bool]) -> np.ndarray:
    """Mask of the names for which `test` holds, tested once per distinct name (per_name)."""
    return per_name(names, test, bool)


def _step_number(captured: str, name: str, pattern: re.Pattern) -> int:
    """What the pattern's first group captured, as a step number (ASCII digits, within int32);
    UsageError naming the range otherwise: the --step pattern captures something else."""
    if not re.fullmatch(r"[0-9]{1,10}", captured) or int(captured) > 2**31 - 1:
        raise UsageError("--step", f"'{pattern.pattern}' captures {captured[:40]!r} in the range {name[:80]!r}, "
                                   "not a step number (0..2**31-1): make its first group match only the number, "
                                   "e.g. (\\d+)")
    return int(captured)


def numbers(names: list[str], group: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray,
            pattern: re.Pattern) -> np.ndarray:
    """Step number of each step range: the first number captured by the pattern, else
    (no capturing group matched) its place in start order among its group's step ranges;
    a number's later occurrences made distinct (module docstring)."""
    return occurrences(_numbers(names, group, start_ns, pattern), group, start_ns, end_ns)


def occurrences(number: np.ndarray, group: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """number + k * 10^d for the k-th occurrence of a number in its group (d: the digits of
    the group's largest number); ranges of one number that overlap are one occurrence."""
    if not len(number):
        return number
    order = np.lexsort((number, group))
    if not ((group[order][1:] == group[order][:-1]) & (number[order][1:] == number[order][:-1])).any():
        return np.asarray(number, dtype=np.int64).copy()  # no number repeats in its group: every occurrence the first
    df = pd.DataFrame({"g": group, "n": number, "start": start_ns, "end": end_ns}).sort_values(
        ["g", "n", "start"], kind="stable")
    by = df.groupby(["g", "n"], sort=False)
    reach = by["end"].cummax()
    new = (df["start"] >= reach.groupby([df["g"], df["n"]], sort=False).shift(1)).astype(np.int64)
    occurrence = new.groupby([df["g"], df["n"]], sort=False).cumsum()
    scale = df.groupby("g")["n"].transform("max").map(lambda m: _scale(int(m)))
    out = np.empty(len(number), dtype=np.int64)
    out[df.index.to_numpy()] = (df["n"] + occurrence * scale).to_numpy(dtype=np.int64)
    return out


def repeat_note(names: list[str], group: np.ndarray, start_ns: np.ndarray, step: np.ndarray,
                pattern: re.Pattern) -> list[Note]:
    """A note for meta.notes where step ranges repeat their numbers, else []."""
    first = _numbers(names, group, start_ns, pattern)
    moved = np.flatnonzero(step != first)
    if not len(moved):
        return []
    i = int(moved[0])
    return [Note("step_numbers_repeat", {"occurrences": len(moved), "range_name": names[i], "step": int(step[i]),
                                         "scale": _scale(int(first.max()))})]


def _scale(largest: int) -> int:
    """10^d, d the digits of the largest step number: a repeat's offset."""
    return 10 ** len(str(max(largest, 1)))


def _numbers(names: list[str], group: np.ndarray, start_ns: np.ndarray, pattern: re.Pattern) -> np.ndarray:
    """The number of each step range as the trace gives it (its order where it gives none)."""
    captured = [next((g for g in pattern.fullmatch(n).groups() if g is not None), None) for n in names]
    out = np.array([-1 if c is None else _step_number(c, n, pattern) for c, n in zip(captured, names)],
                   dtype=np.int64)
    missing = out < 0
    if missing.any():
        order = np.lexsort((start_ns, group))
        rank_in_group = np.empty(len(order), dtype=np.int64)
        first = np.r_[True, group[order][1:] != group[order][:-1]]
        run_start = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
        rank_in_group[order] = np.arange(len(order)) - run_start
        out[missing] = rank_in_group[missing]
    return out


def assign(row_group: np.ndarray, at_ns: np.ndarray, ranges: dict[str, np.ndarray]) -> pd.arrays.IntegerArray:
    """Per row, the step of the range of its group (process, or device) holding at_ns:
    the latest-starting one that holds it, else the one reaching furthest that started
    before it (an enclosing range); NA where none holds it. `ranges` has arrays group,
    start_ns, end_ns, step."""
    out = np.full(len(at_ns), -1, dtype=np.int64)
    for g in np.unique(ranges["group"]) if len(at_ns) else []:
        rows = np.flatnonzero(row_group == g)
        idx = np.flatnonzero(ranges["group"] == g)
        idx = idx[np.argsort(ranges["start_ns"][idx], kind="stable")]
        starts, ends = ranges["start_ns"][idx], ranges["end_ns"][idx]
        pos = np.searchsorted(starts, at_ns[rows], side="right") - 1
        ok = pos >= 0
        latest = np.where(ok, pos, 0)
        reach = _prefix_argmax(ends)[latest]  # of ranges started by then, the one ending last
        at = at_ns[rows]
        pick = np.where(at < ends[latest], latest, np.where(at < ends[reach], reach, -1))
        hit = ok & (pick >= 0)
        out[rows[hit]] = ranges["step"][idx[pick[hit]]]
    return pd.array(np.where(out >= 0, out, None), dtype="Int64") if (out < 0).any() else pd.array(out, dtype="Int64")


def _prefix_argmax(values: np.ndarray) -> np.ndarray:
    """Index of the largest value among values[0..i], for each i (the first of equals)."""
    if not len(values):
        return np.empty(0, dtype=np.int64)
    running = np.maximum.accumulate(values)
    is_new = np.r_[True, running[1:] > running[:-1]]
    return np.maximum.accumulate(np.where(is_new, np.arange(len(values)), 0))


def main_threads(pid: np.ndarray, tid: np.ndarray, dur_ns: np.ndarray) -> dict[int, int]:
    """pid -> its main thread: the one whose user ranges add up to the most time (the
    loop that opens the step and phase ranges; the first of equals). Kernels launched by
    the process's other threads take its open ranges as their outer scope."""
    if not len(pid):
        return {}
    pid, tid = np.asarray(pid), np.asarray(tid)
    if pid.dtype.kind not in "iu" or tid.dtype.kind not in "iu":
        total = pd.DataFrame({"pid": pid, "tid": tid, "dur_ns": np.asarray(dur_ns, dtype=np.float64)}).groupby(
            ["pid", "tid"])["dur_ns"].sum()
        return {int(p): int(key[1]) for p, key in total.groupby(level=0).idxmax().items()}
    order = np.lexsort((tid, pid))  # threads in (pid, tid) order, as the groupby above sorts them
    p, t = pid[order], tid[order]
    first = np.flatnonzero(np.r_[True, (p[1:] != p[:-1]) | (t[1:] != t[:-1])])
    total = np.add.reduceat(np.asarray(dur_ns, dtype=np.float64)[order], first)  # per thread
    threads_pid, threads_tid = p[first], t[first]
    out = {}
    for process in np.unique(threads_pid).tolist():  # a few processes
        mine = np.flatnonzero(threads_pid == process)
        out[int(process)] = int(threads_tid[mine[np.argmax(total[mine])]])  # the first of equals
    return out


def step_of_scope(scope: tuple[str, ...], pattern: re.Pattern) -> tuple[int | None, tuple[str, ...]]:
    """(step, scope without its numbered step parts) for an aggregated tree's scope path
    (proton): the innermost step-named part with a captured number, None where there is
    none. A step-named part without a number stays in the scope: in an aggregate it is
    all the steps together, not one of them."""
    found = [pattern.fullmatch(part) for part in scope]
    number = [next((g for g in m.groups() if g is not None), None) if m else None for m in found]
    step = next((int(n) for n in reversed(number) if n is not None), None)
    return step, tuple(part for part, n in zip(scope, number) if n is None)
