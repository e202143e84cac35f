"""Profiler cost and run-vs-run differences judged against the noise (issue 22): medians of
per-step samples, the exact Mann-Whitney test and the shift's interval (reports/stats.py),
each checked against brute force over every ordering of the samples; on real run folders."""
from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from tracelab.reports.runtable import profiler_cost, results_of
from tracelab.reports.stats.tests import mann_whitney_p, median_difference, shift_interval, u_counts

DATA = Path(__file__).resolve().parent / "data"


def _splits(values: np.ndarray, n: int):
    """Every way to call n of the pooled values the first sample."""
    for first in itertools.combinations(range(len(values)), n):
        mask = np.zeros(len(values), bool)
        mask[list(first)] = True
        yield values[mask], values[~mask]


def _u(a, b) -> float:
    return sum(1.0 if y > x else 0.5 if y == x else 0.0 for x in a for y in b)


@pytest.mark.parametrize("n,m", [(1, 1), (2, 3), (3, 3), (4, 4), (3, 5), (5, 5)])
def test_u_counts_are_every_orderings_u(n, m):
    values = np.arange(n + m, dtype=float)
    brute = np.bincount([int(_u(a, b)) for a, b in _splits(values, n)], minlength=n * m + 1)
    assert list(u_counts(n, m)) == brute.tolist() and sum(u_counts(n, m)) == math.comb(n + m, n)


def _step_ms(name: str) -> list[float]:
    return results_of(json.loads((DATA / name / "run.json").read_text()))[0]["rows"][0]["step_ms"]


@pytest.mark.parametrize("other", ["train-1gpu-steps-torch", "train-1gpu-steps-nsys", "train-1gpu-steps-proton"])
def test_p_and_interval_against_brute_force(other):
    a, b = np.array(_step_ms("train-1gpu-steps-none")), np.array(_step_ms(other))
    pooled = np.r_[a, b]
    us = np.array([_u(x, y) for x, y in _splits(pooled, len(a))])
    centre = len(a) * len(b) / 2
    observed = _u(a, b)
    assert mann_whitney_p(a, b) == pytest.approx((np.abs(us - centre) >= abs(observed - centre)).mean())
    low, high, confidence = shift_interval(a, b)
    assert confidence == pytest.approx(1 - 2 / math.comb(8, 4))  # 4 against 4: only U = 0 is rarer than 2.5%
    diffs = b[:, None] - a[None, :]
    assert (low, high) == (diffs.min(), diffs.max())
    d = median_difference(a, b)
    assert (d.median_a, d.median_b) == (np.median(a), np.median(b))
    assert d.within_noise == (low <= 0 <= high)


def test_two_against_two_gives_no_interval():
    assert shift_interval([1.0, 2.0], [5.0, 6.0]) is None
    d = median_difference([1.0, 2.0], [5.0, 6.0])
    assert d.confidence is None and d.p_value == pytest.approx(2 / 6) and d.within_noise


def _runs(none_steps: list[float] | None = None) -> list[tuple[str, dict]]:
    runs = [(n, json.loads((DATA / n / "run.json").read_text()))
            for n in ("train-1gpu-steps-none", "train-1gpu-steps-nsys", "train-1gpu-steps-torch")]
    if none_steps is not None:
        results_of(runs[0][1])  # the same dicts: edit the none run's samples in place
        key = "results" if "results" in runs[0][1] else "figures"
        for fig in runs[0][1][key].values():
            fig["rows"][0]["step_ms"] = none_steps
    return runs


def test_profiler_cost_on_real_runs():
    runs = _runs()
    nsys, torch = profiler_cost(runs[1][1], runs), profiler_cost(runs[2][1], runs)
    a, b = _step_ms("train-1gpu-steps-none"), _step_ms("train-1gpu-steps-nsys")
    assert nsys.startswith(f"{100 * (np.median(b) / np.median(a) - 1):+.1f}% step time (median {np.median(b):,.2f} ms")
    assert "97% interval of the difference" in nsys and "within noise" not in nsys
    c = _step_ms("train-1gpu-steps-torch")
    assert torch.startswith("within noise: ") and "holds 0" in torch
    assert f"{np.median(c):,.2f} ms against {np.median(a):,.2f} ms" in torch


def test_a_noisy_baseline_is_within_noise():
    """The issue's case: a `none` run with one slow step, whose mean makes the profiled run look
    much faster (the old line's mean against mean), reads as within noise on the medians."""
    noisy = [11.5, 13.5, 75.0, 12.0]
    assert np.mean(_step_ms("train-1gpu-steps-nsys")) / np.mean(noisy) - 1 < -0.4
    runs = _runs(noisy)
    line = profiler_cost(runs[1][1], runs)
    assert line.startswith("within noise: ") and "holds 0" in line
