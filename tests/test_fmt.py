"""reports/fmt.py: the one formatter of durations, sizes, rates and counts (issue 31)."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracelab.reports import fmt

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("ns, text", [
    (1_234_567_891, "1,234.568 ms"), (450_000, "0.450 ms"), (-2_000_000, "-2.000 ms")])
def test_ms_is_to_the_microsecond(ns, text):
    assert fmt.ms(ns) == text


def test_ms_to_fewer_places():
    assert fmt.ms(8_049_999, 1) == "8.0 ms" and fmt.ms(1_234_567_891, 0) == "1,235 ms"


@pytest.mark.parametrize("ns, text", [
    (999_949, "999.9 us"),          # under 1 ms: us
    (1_000_000, "1.00 ms"),         # 1 to 10 ms: two places
    (9_994_999, "9.99 ms"),
    (10_000_000, "10.0 ms"),        # from 10 ms: one place
    (1_234_567_891, "1,234.6 ms"),
    (-3_456_000, "-3.46 ms")])      # the sign does not change the unit
def test_duration_keeps_about_three_figures(ns, text):
    assert fmt.duration(ns) == text


@pytest.mark.parametrize("missing", [None, float("nan"), np.nan, pd.NA])
def test_cells_show_a_dash_where_there_is_no_value(missing):
    assert fmt.ms_cell(missing) == "-" and fmt.us_cell(missing) == "-"


def test_cells_hold_the_number_alone():
    assert fmt.ms_cell(np.int64(3_000_000)) == "3.000" and fmt.us_cell(12_345) == "12.35"


def test_sizes_rates_counts():
    assert fmt.size(12_345_678) == "12.3 MB"
    assert fmt.rate_gb_s(1234.4) == "1,234 GB/s" and fmt.tflops(989.44) == "989.4 TFLOP/s"
    assert fmt.count(np.int64(1_234_567)) == "1,234,567"


@pytest.mark.slow
def test_no_module_keeps_its_own_duration_formatter():
    """The six private _ms/_us formatters are gone; a new one would bring a fifth format back."""
    own = []
    for p in [*(ROOT / "reports").rglob("*.py"), *(ROOT / "tracelab").rglob("*.py")]:
        for node in ast.parse(p.read_text()).body:
            returns = ast.unparse(node.returns) if isinstance(node, ast.FunctionDef) and node.returns else ""
            if isinstance(node, ast.FunctionDef) and node.name in {"_ms", "_us", "_time"} and returns == "str":
                own.append(f"{p.relative_to(ROOT)}:{node.name}")
    assert own == []


@pytest.mark.parametrize("n_bytes, text", [
    (100, "100 B"), (768, "0.75 KiB"), (300 * 2**10, "0.29 MiB"), (2**28, "0.25 GiB"), (2**28 - 1, "256.00 MiB"),
    (int(26.77 * 2**20), "26.77 MiB"), (-3 * 2**30, "-3.00 GiB")])
def test_binary_size_counts_memory_in_binary_units(n_bytes, text):
    assert fmt.binary_size(n_bytes) == text


def test_flop_is_an_amount_of_work():
    assert fmt.flop(1.234e12) == "1.23 TFLOP" and fmt.flop(12_345_000_000) == "12.35 GFLOP"


@pytest.mark.slow
def test_no_module_keeps_its_own_size_or_work_formatter():
    """memory's gib and the fixes' _flop moved into fmt; text in MiB is fmt.binary_size's."""
    own = []
    for p in [*(ROOT / "reports").rglob("*.py"), *(ROOT / "tracelab").rglob("*.py")]:
        text = p.read_text()
        own += [f"{p.relative_to(ROOT)}:{n.name}" for n in ast.parse(text).body
                if isinstance(n, ast.FunctionDef) and n.name in {"gib", "_flop", "_gib", "_mib"}]
        own += [f"{p.relative_to(ROOT)}: {line.strip()}" for line in text.splitlines()
                if p.name != "fmt.py" and "MiB" in line and "2**20:" in line]  # an f-string's own MiB
    assert own == []
