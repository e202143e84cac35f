"""Each what-if answer states its scenario's measured error band (reports/whatif/bands.py) where
one was measured, and none where none was: in the JSON, the terminal table, the findings."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracelab.reports.whatif.bands import BANDS, COLUMN_WORDS, NO_BAND, UNPROFILED, band

from helpers import run_cli_output

DATA = Path(__file__).parent / "data"


def test_bands_are_ordered_and_say_what_they_were_measured_on():
    for name, b in BANDS.items():
        assert b.low_frac <= b.high_frac and b.measured and b.column in COLUMN_WORDS, name
    assert band("roofline") is None and band("busbw") is None and band("scale") is None
    assert BANDS["balance"].short() == "error -15% to -6% on our gloo CPU runs with a late rank"
    assert BANDS["no-host-gaps"].short() == "error +1% on our H100 step pair, eager against captured"  # never as if of the input
    # one pair, of CPUs: said so, and of the user-time column, named where both columns are shown
    assert BANDS["overlap-comm"].short() == "error +20% on our one gloo CPU pair, naive against bucketed DDP"
    assert BANDS["overlap-comm"].text().startswith(BANDS["overlap-comm"].short() + ", of the prediction without the profiler (")
    assert BANDS["balance"].text().startswith(BANDS["balance"].short() + ", of the profiled prediction (")


def _slowest_unprofiled_ns(folder: str) -> float:
    """The slowest rank's step timed with the profiler off, straight from the run folder's run.json."""
    results = json.loads((DATA / folder / "run.json").read_text())["results"]
    return max(rec["rows"][0]["unprofiled_step_ns"] for rec in results.values())


@pytest.mark.slow  # about 3 s of CPU: a 15,760-node replay
def test_overlap_comms_band_is_what_the_code_predicts_now_on_its_pair(capsys):
    """The band bands.py states for overlap-comm is the error of the user-time prediction on its one
    pair: per-parameter all-reduces (ddp-naive-16cpu-torch) against bucketed DDP run for real with the
    profiler off (ddp-naive-16cpu-after-none). Recomputed by the code as it is now; it fails where
    the prediction drifts from the band by more than a point."""
    status, out, _ = run_cli_output(capsys, "whatif", str(DATA / "ddp-naive-16cpu-torch"), "--scenario", "overlap-comm",
                                    "--format", "json")
    doc = json.loads(out)
    [row] = [s for s in doc["scenarios"] if s["name"] == "overlap-comm"]
    # the prediction is anchored on the profiled run's own step timed without the profiler
    assert status == 0 and doc["unprofiled_source"] == "measured"
    assert doc["unprofiled_step_ns"] == pytest.approx(_slowest_unprofiled_ns("ddp-naive-16cpu-torch"), rel=1e-3)
    after_ns = _slowest_unprofiled_ns("ddp-naive-16cpu-after-none")
    error = row["predicted_unprofiled_ns"] / after_ns - 1
    b = BANDS["overlap-comm"]
    assert b.column == UNPROFILED and b.low_frac == b.high_frac
    assert abs(error - b.low_frac) <= 0.01, error
    assert row["error_band"] == b.doc()
    # the profiled replay is no prediction of the user's step: against the same step it is far off
    assert abs(row["predicted_ns"] / after_ns - 1 - b.low_frac) > 0.2


def test_the_json_and_the_table_state_the_band_of_each_measured_scenario(capsys):
    status, out, _ = run_cli_output(capsys, "whatif", str(DATA / "gloo-2cpu-late"), "--format", "json")
    doc = json.loads(out)
    got = {s["name"] + (f":{s['args']}" if s["args"] and s["name"] != "together" else ""): s["error_band"]
           for s in doc["scenarios"]}
    assert got["balance:share"] is None and got["balance"] == {"low_frac": -0.153, "high_frac": -0.056, "measured": BANDS["balance"].measured,
                              "column": "predicted_ns"}
    assert got["overlap-comm"]["column"] == "predicted_unprofiled_ns" and got["together"] is None
    status, table, _ = run_cli_output(capsys, "whatif", str(DATA / "gloo-2cpu-late"))
    flat = " ".join(table.split())
    assert status == 0 and ("balance: error -15% to -6% on our gloo CPU runs with a late rank, of the profiled prediction "
                            "(2 gloo CPU ranks") in flat
    # the shared form, a default now, borrows no band: said so, with the joint replay
    assert "no band measured: balance:share, together (" in flat


def test_a_form_of_a_scenario_that_models_another_change_has_no_band():
    """balance's band was measured on runs without the late rank's extra work, which `balance`
    removes; `balance:share` moves that work onto the other ranks, another change: no band.
    remove:X keeps remove's (its argument is a pattern, not another change)."""
    assert band("balance", "share") is None and band("balance") is BANDS["balance"]
    assert band("remove", "nccl") is band("remove") is not None


@pytest.mark.slow  # about 3 s of CPU: band() is the rule, checked above
def test_the_shared_balance_states_no_band_and_the_table_says_balances_once(capsys):
    """In the JSON and the table: balance:share's band null, balance's line said once."""
    status, out, _ = run_cli_output(capsys, "whatif", str(DATA / "gloo-2cpu-late"), "--scenario", "balance:share",
                                    "--scenario", "balance", "--format", "json")
    got = {(s["name"], s["args"]): s["error_band"] for s in json.loads(out)["scenarios"]}
    assert status == 0 and got[("balance", "share")] is None and got[("balance", "")] == BANDS["balance"].doc()
    status, table, _ = run_cli_output(capsys, "whatif", str(DATA / "gloo-2cpu-late"), "--scenario", "balance:share",
                                      "--scenario", "balance")
    flat = " ".join(table.split())
    assert status == 0 and flat.count("balance: error -15% to -6% on our gloo CPU runs") == 1
    assert "no band measured: balance:share (not yet timed against a run without the cause)" in flat
    assert ("balance", "") in got and not any(name == "together" for name, _ in got)  # one form each: no joint replay


# a finding's values (whatif/findings._row_values): 2 ms saved of a 10 ms profiled step, 1.5 ms of 6 ms without it
PROFILED_ONLY = {"window": "per step", "step_ns": 10e6, "saving_ns": 2e6, "saving_share": 0.2}
BOTH = {**PROFILED_ONLY, "unprofiled_step_ns": 6e6, "unprofiled_saving_ns": 1.5e6, "unprofiled_source": "measured"}
USER_CLAUSE = "saves 1.50 ms of 6.00 ms per step without the profiler (25%"
PROFILED_CLAUSE = "under the profiler it saves 2.00 ms of 10.00 ms per step, step end to step end (20%"


@pytest.mark.parametrize("name, values, beside", [
    ("balance", BOTH, PROFILED_CLAUSE),  # measured on profiled steps: beside the profiled saving
    ("overlap-comm", BOTH, USER_CLAUSE),  # measured with the profiler off: beside the user's saving
    ("balance", PROFILED_ONLY, "saves 2.00 ms of 10.00 ms per step, step end to step end (20%"),
    ("overlap-comm", PROFILED_ONLY, None),  # its column not said: no band beside another's figure
])
def test_a_findings_band_sits_beside_the_figure_of_its_column(name, values, beside):
    from tracelab.reports.whatif.findings import saving_words

    b = BANDS[name]
    words = saving_words(values, "x", b)
    if beside is None:
        assert "error" not in words and NO_BAND not in words
    else:
        assert f"{beside}; {b.short()};" in words and words.count("error") == 1


@pytest.mark.parametrize("values, beside", [(BOTH, USER_CLAUSE), (PROFILED_ONLY, "step end to step end (20%")])
def test_a_form_said_beside_a_banded_one_says_it_has_none(values, beside):
    """The shared balance, stated after the removal's band, must not seem to share it."""
    from tracelab.reports.whatif.findings import saving_words

    assert f"{beside}; {NO_BAND};" in saving_words(values, "x", None, unbanded=True)
    assert NO_BAND not in saving_words(values, "x", None) and "error" not in saving_words(values, "x", None)
