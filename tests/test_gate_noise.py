"""The gate's noise model (reports/gate/noise.py) and the verdicts it makes, on samples made by
hand: with repeats, Student's t test on the runs' log medians, pooled (checked against
scipy.stats.ttest_ind), never narrower than the floor's; with one run a side, the steps' own noise (autocorrelation counted
with pandas' own lag-1 autocorrelation) plus the stated run-to-run floor; each metric judged at
the gate's Bonferroni level; counted metrics with no floor."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tracelab.reports.gate.noise import RUN_NOISE, run_level, shift
from tracelab.reports.gate.samples import RunSamples
from tracelab.reports.gate.verdict import WITHIN, Thresholds, family_level, gate

from helpers import LazyModule

stats = LazyModule("scipy.stats")  # imported by the first test that uses it (helpers.LazyModule says why)

RNG = np.random.default_rng(41)


def _run(name: str, steps: dict[str, list[float]], units: dict[str, str]) -> RunSamples:
    return RunSamples(name, pd.DataFrame(steps), {}, pd.DataFrame(columns=["metric", "by", "name", "value"]), units)


def _steps(level: float, n: int = 12, sd: float = 0.02) -> list[float]:
    return list(level * np.exp(RNG.normal(0, sd, n)))


def _gate(a: list[list[float]], b: list[list[float]], unit: str = "ns", **limits):
    metric = {"ns": "step_time", "bytes": "peak_allocated", "count": "launches"}[unit]
    side = lambda runs, tag: [_run(f"{tag}{i}", {metric: x}, {metric: unit}) for i, x in enumerate(runs)]
    (m,) = gate(side(a, "a"), side(b, "b"), Thresholds(**limits)).metrics
    return m


def test_with_repeats_wider_apart_than_the_floor_it_is_students_t_on_the_runs_log_medians_pooled():
    a = [_steps(100 * f, sd=0.001) for f in (1.0, 1.04, 0.97)]
    b = [_steps(100 * f, sd=0.001) for f in (1.12, 1.08, 1.15, 1.1)]
    s = shift([np.array(x) for x in a], [np.array(x) for x in b], run_noise=0.0, level=0.95)
    la, lb = ([np.median(np.log(x)) for x in side] for side in (a, b))  # a run's level: its median log step
    student = stats.ttest_ind(lb, la, equal_var=True)
    low, high = student.confidence_interval(0.95)
    assert s.p_value == pytest.approx(student.pvalue, rel=1e-9)
    assert (s.low, s.high) == (pytest.approx(math.expm1(low)), pytest.approx(math.expm1(high)))
    assert s.detectable == pytest.approx(math.expm1((high - low) / 2))
    assert s.relative == pytest.approx(math.exp(np.mean(lb) - np.mean(la)) - 1)
    pooled = (np.var(la, ddof=1) * 2 + np.var(lb, ddof=1) * 3) / 5
    assert s.spread == pytest.approx(math.expm1(math.sqrt(pooled))) and s.floor < s.spread


@pytest.mark.parametrize("runs", [2, 3, 5])
def test_repeats_that_happen_to_agree_leave_the_floor_bounding_the_noise(runs):
    """Runs of one time agree better than runs made at other times: the measured spread never
    makes the noise smaller than one run's (its steps' and the stated floor's)."""
    a, b = [[100.0] * 8] * runs, [[115.0] * 8] * runs
    s = shift([np.array(x) for x in a], [np.array(x) for x in b], run_noise=0.1, level=0.95)
    half = stats.norm.ppf(0.975) * math.log(1.1) * math.sqrt(2 / runs)  # the floor, known: the normal
    assert s.spread == 0 and s.floor == pytest.approx(0.1)
    assert s.detectable == pytest.approx(math.expm1(half))
    assert s.p_value == pytest.approx(2 * stats.norm.sf(math.log(1.15) / (math.log(1.1) * math.sqrt(2 / runs))))
    assert s.within_noise == (math.log(1.15) < half)
    assert s.within_noise == (runs < 5)  # +15% is within the floor's noise with 2 and 3 runs a side


def test_the_repeats_note_says_the_step_times_spread_and_floor():
    units = {"step_time": "ns"}
    side = lambda level, tag: [_run(f"{tag}{i}", {"step_time": _steps(level * f)}, units)
                               for i, f in enumerate((1, 1.02, 0.98))]
    g = gate(side(100, "a"), side(101, "b"))
    (note,) = [n for n in g.notes if n.code == "gate_noise_repeats"]
    (m,) = g.metrics
    assert f"differ by {m.run_spread:.1%} (sd) within a side, the floor {m.run_floor:.1%}" in note.text
    assert m.run_floor > m.run_spread and m.detectable > m.run_floor  # three runs of a quiet job: the floor bounds it


def test_one_run_a_side_adds_a_step_and_the_floor_to_the_medians_noise_counted_with_its_autocorrelation():
    a = np.array(_steps(100, 20, 0.05))
    b = np.array(_steps(120, 20, 0.05))
    s = shift([a], [b], run_noise=0.1, level=0.95)

    def own(x):  # the log median's variance (sqrt(pi/2) MAD-sd, n_eff from the lag-1 autocorrelation) and a step's
        logs = pd.Series(np.log(x))
        r = min(max(logs.autocorr(1), 0.0), 0.9)
        sd = 1.4826 * (logs - logs.median()).abs().median()
        return (math.pi / 2) * sd ** 2 / (len(x) * (1 - r) / (1 + r)) + sd ** 2

    se = math.sqrt(own(a) + own(b) + 2 * math.log(1.1) ** 2)
    d = np.median(np.log(b)) - np.median(np.log(a))
    assert s.p_value == pytest.approx(2 * stats.norm.sf(abs(d) / se))
    assert s.detectable == pytest.approx(math.expm1(stats.norm.ppf(0.975) * se))


def test_steps_whose_slow_spell_lasts_tell_less_than_the_same_steps_shuffled():
    spell = np.r_[np.full(10, 100.0), np.full(10, 130.0)] + RNG.normal(0, 1, 20)
    shuffled = RNG.permutation(spell)
    assert run_level(spell)[1] > 10 * run_level(shuffled)[1]  # the median's variance: 20 steps worth about one
    assert run_level(spell)[2] == run_level(shuffled)[2]  # one step's: the same steps
    steady = np.full(20, 115.0)
    assert shift([spell], [steady], 0.0).detectable > 1.3 * shift([shuffled], [steady], 0.0).detectable


@pytest.mark.parametrize("a, b, limits, verdict, regression", [
    ([[100.0] * 8], [[100.0] * 8], {}, WITHIN, False),
    ([_steps(100)], [_steps(200)], {}, "slower", True),  # twice the step: beyond any run's wander
    ([_steps(100)], [_steps(110)], {}, WITHIN, False),  # +10%, one run a side: runs differ that much
    ([_steps(100)], [_steps(110)], {"run_noise": 0.01}, "slower", True),  # ... unless the user says they do not
    ([_steps(100, sd=0.01) for _ in range(5)], [_steps(115, sd=0.01) for _ in range(5)], {}, "slower", True),
    ([_steps(100, sd=0.01) for _ in range(3)], [_steps(110, sd=0.01) for _ in range(3)], {}, WITHIN, False),  # 3 too few
    ([_steps(100 * f) for f in (1, 1.3, 0.8)], [_steps(110 * f) for f in (1, 1.3, 0.8)], {}, WITHIN, False),
    ([_steps(100, sd=0.001) for _ in range(3)], [_steps(103, sd=0.001) for _ in range(3)], {"run_noise": 0.001},
     "slower", False),  # beyond the noise, not beyond 5%
    ([_steps(100)], [_steps(90)], {}, WITHIN, False),
    ([_steps(100)], [_steps(50)], {}, "faster", False),
])
def test_timed_verdicts(a, b, limits, verdict, regression):
    m = _gate(a, b, **limits)
    assert (m.verdict, m.regression) == (verdict, regression)


def test_launches_have_no_run_floor_memory_has_and_a_spike_moves_no_median():
    more = _gate([[10.0, 10, 10]], [[11.0, 11, 11]], "count")
    grew = _gate([[10.0, 10, 10]], [[11.0, 11, 11]], "bytes")
    spike = _gate([[10.0, 10, 10, 10]], [[10.0, 16, 10, 10]], "count")
    assert (more.verdict, more.regression, more.detectable) == ("more", True, 0)
    assert (grew.verdict, grew.regression) == (WITHIN, False)  # +10%: runs' allocators differ that much
    assert _gate([[10.0] * 3], [[20.0] * 3], "bytes").verdict == "grew"
    assert (spike.verdict, spike.regression) == (WITHIN, False)


def test_each_metric_is_judged_at_the_gates_bonferroni_level():
    units = {f"m{i}": "ns" for i in range(10)}
    runs = lambda level: [_run("r", {m: _steps(level) for m in units}, units)]
    g = gate(runs(100), runs(100), Thresholds(metrics=(("m9", None),)))
    assert family_level(9) == pytest.approx(1 - 0.05 / 9)
    assert [m.confidence for m in g.metrics] == [pytest.approx(1 - 0.05 / 9)] * 10
    assert any("each of 9 metrics judged at 99.44%" in n.text for n in g.notes)
    assert RUN_NOISE == Thresholds().run_noise


@pytest.mark.parametrize("values", [[0.0, 0.0, 0.0], [0.0, 5.0, 0.0]])
def test_metrics_that_can_be_zero_are_judged_on_their_own_scale(values):
    m = _gate([values], [values], "bytes")
    assert m.verdict == WITHIN and not m.regression


@pytest.mark.slow
def test_a_report_of_one_run_never_imports_scipy_stats():
    """The report resolves every topic's section, the gate's among them; scipy.stats (~1.4 s of
    CPU a command) is imported only where a gate is judged: then the test above still holds."""
    import subprocess
    import sys

    code = ("import sys\nimport tracelab.reports.gate.gate_html, tracelab.reports.gate.verdict\n"
            "before = 'scipy.stats' in sys.modules\n"
            "from tracelab.reports.gate.noise import shift\nimport numpy as np\n"
            "shift([np.array([1.0, 1.1, 0.9])], [np.array([2.0, 2.1, 1.9])])\n"
            "print(before, 'scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
