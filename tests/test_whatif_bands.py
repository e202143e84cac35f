"""Each what-if answer states its scenario's measured error band (reports/whatif/bands.py) where
one was measured, and none where none was: in the JSON, the terminal table, the findings."""
from __future__ import annotations

import json
from pathlib import Path

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
