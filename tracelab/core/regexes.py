"""Regular expressions the user gives (`--scenario remove:REGEX`), matched against names a
trace holds, with a bound on the time they may take.

Python's `re` backtracks: `(a+)+$` against a name of 40 `a`s and a `b` takes longer than the
universe's age. No engine without backtracking ships with Python (re2 and `regex`'s timeout
are extra packages), so a pattern is matched once per distinct name (a trace has thousands of
ops but hundreds of names) under a wall-clock budget: `re` checks for signals as it
backtracks, so a SIGALRM timer stops a runaway match, and the pattern is refused in one line
naming it. The timer needs the main thread; elsewhere (a worker thread) the match runs
unbounded, as before, still once per name. search(), never str.contains: a pattern with groups
makes pandas warn, and the user's groups mean nothing here.
"""
from __future__ import annotations

import re
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import pandas as pd

from tracelab.core.errors import UsageError

BUDGET_S = 2.0  # all names of one match together; a sane pattern on 100 k names takes < 0.2 s
MAX_PATTERN_CHARS = 10_000  # compiling is not bounded by the timer: re's parser takes ~7 s per MB


class _OutOfTime(Exception):
    pass


def compiled(pattern: str, option: str) -> re.Pattern:
    """`pattern` compiled; UsageError naming `option` where it is not a regular expression
    or is longer than MAX_PATTERN_CHARS."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise UsageError(option, f"a pattern of {len(pattern):,} characters: at most {MAX_PATTERN_CHARS:,}")
    try:
        return re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as e:
        raise UsageError(option, f"{pattern!r} is not a regular expression: {e}") from None


def matches(regex: re.Pattern, values, option: str, budget_s: float | None = None) -> np.ndarray:
    """Which of `values` (names, as anything pandas reads) `regex` finds a match in, a bool
    array; UsageError naming `option` when matching takes more than `budget_s` seconds
    (default BUDGET_S)."""
    budget_s = BUDGET_S if budget_s is None else budget_s
    try:
        with _time_bound(budget_s):
            return searched(regex, values)
    except _OutOfTime:
        names = pd.Series(values, dtype=object).nunique(dropna=False)
        raise UsageError(option, f"{regex.pattern!r} took more than {budget_s:g} s to match {names:,} names: "
                                 "a pattern that backtracks without bound (a repeat inside a repeat, as (a+)+); "
                                 "write it without the nested repeat") from None


def searched(regex: re.Pattern, values) -> np.ndarray:
    """Which of `values` (names, as anything pandas reads; a missing one as its text, `<NA>`)
    `regex` finds a match in, a bool array: searched once per distinct name, not per row (tracelab's
    own patterns; a user's go through matches, under its time bound)."""
    if not (isinstance(values, pd.Series) and isinstance(values.dtype, pd.StringDtype)):
        values = pd.Series(values, dtype=object).astype(str)  # text already: no copy (its NA reads `<NA>` below)
    codes, names = pd.factorize(values, use_na_sentinel=False)
    found = np.fromiter((regex.search(str(n)) is not None for n in names), dtype=bool, count=len(names))
    return found[codes] if len(codes) else np.zeros(0, dtype=bool)


@contextmanager
def _time_bound(seconds: float) -> Iterator[None]:
    """Raises _OutOfTime in the block after `seconds`, in the main thread (module docstring)."""
    if threading.current_thread() is not threading.main_thread() or signal.getitimer(signal.ITIMER_REAL)[0]:
        yield  # no timer of ours here: another thread, or someone else's timer running
        return

    def expire(signum, frame):
        raise _OutOfTime

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
