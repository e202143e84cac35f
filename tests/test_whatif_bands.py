"""Each what-if answer states its scenario's measured error band (reports/whatif/bands.py) where
one was measured, and none where none was: in the JSON, the terminal table, the findings."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracelab.reports.whatif.bands import BANDS, band

from helpers import run_cli_output

DATA = Path(__file__).parent / "data"


def test_bands_are_ordered_and_say_what_they_were_measured_on():
    for name, b in BANDS.items():
        assert b.low_frac <= b.high_frac and b.measured, name
    assert band("overlap-comm") is None and band("roofline") is None and band("busbw") is None
    assert BANDS["balance"].short() == "error -15% to -6% on our gloo CPU runs with a late rank"
    assert BANDS["no-host-gaps"].short() == "error +1% on our H100 step pair, eager against captured"  # never as if of the input


def test_the_json_and_the_table_state_the_band_of_each_measured_scenario(capsys):
    status, out, _ = run_cli_output(capsys, "whatif", str(DATA / "gloo-2cpu-late"), "--format", "json")
    doc = json.loads(out)
    got = {s["name"]: s["error_band"] for s in doc["scenarios"]}
    assert got["balance"] == {"low_frac": -0.153, "high_frac": -0.056, "measured": BANDS["balance"].measured}
    assert got["overlap-comm"] is None and got["together"] is None
    status, table, _ = run_cli_output(capsys, "whatif", str(DATA / "gloo-2cpu-late"))
    assert status == 0 and "balance: error -15% to -6% on our gloo CPU runs with a late rank (2 gloo CPU ranks" in " ".join(table.split())


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
    assert status == 0 and " ".join(table.split()).count("balance: error -15% to -6% on our gloo CPU runs") == 1
