"""What a comparison may claim (reports/noise.py): per-step comparison when step counts
differ, and "slowest" only beyond the step-to-step noise; on a real trace pair made to
differ by a known amount."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import tracelab
from tracelab.reports.stats import noise
from tracelab.reports.align.align import compare
from tracelab.reports.ranks import Input

from helpers import shared_trace


@pytest.mark.parametrize("top, second, sigma_top, sigma_second, expected", [
    (1_000_000, 999_000, None, None, ""),          # 0.1% lead, no steps: noise
    (1_000_000, 980_000, None, None, "a"),         # 2% lead, no steps
    (1_000, 990, None, None, ""),                  # 10 ns: under MIN_LEAD_NS
    (1_000_000, 985_000, 2_000.0, 2_000.0, "a"),   # 15 us (1.5%) lead, 2.8 us combined sigma x 2 = 5.7 us
    (1_000_000, 998_000, 100.0, 100.0, ""),        # 0.2% lead of a steady kernel: beats its noise, not material
    (1_000_000, 990_000, 4_000.0, 4_000.0, ""),    # 10 us lead, 11.3 us noise
])
def test_slowest_beats_the_noise(top, second, sigma_top, sigma_second, expected) -> None:
    time = pd.DataFrame({"a": [top], "b": [second]}, index=["k"])
    sig = {"a": None if sigma_top is None else pd.Series([sigma_top], index=["k"]),
           "b": None if sigma_second is None else pd.Series([sigma_second], index=["k"])}
    assert noise.slowest(time, sig).tolist() == [expected]


def _input(label: str, events: pd.DataFrame) -> Input:
    return Input(label, "", 0, "torch", events)


@pytest.mark.shared
def test_different_step_counts_compare_per_call() -> None:
    """nccl_data holds steps 4, 5, 6; its first two steps alone are the same work in fewer
    steps: per call the kernels agree (ratio 1 within the step noise), in totals they would
    read x1.5; the note says what was compared and why. (Issue 22 made the ratios per call
    wherever the steps differ or are unknown: a step count from run.json can be a guess, a
    call count cannot; per step stays as columns.)"""
    ev = tracelab.load(shared_trace("hta/nccl_parser_config/nccl_data.json.gz")).events
    two = ev[ev["step"].isin([4, 5])]
    table = compare([_input("three", ev), _input("two", two)], "kernel").set_index("kernel")
    assert table.attrs["basis"].startswith("per call") and "three 3, two 2" in table.attrs["basis"]
    by_step = ev.groupby([ev["kernel"].astype(str), "step"])["dur_ns"].sum().unstack(fill_value=0)
    for k, row in table.iterrows():
        three, two = by_step.loc[k].sum(), by_step.loc[k, [4, 5]].sum()
        assert (row["time_ns[three]"], row["time_ns[two]"]) == (three, two)
        assert row["per_step_ns[two]"] == pytest.approx(two / 2)
        calls = row["count[three]"], row["count[two]"]
        if three and calls[1]:
            assert row["ratio[two]"] == pytest.approx((two / calls[1]) / (three / calls[0]))
    spread = (by_step.std(axis=1) / by_step.mean(axis=1)).fillna(0)
    steady = spread[spread < 0.01].index.intersection(table.index)
    assert len(steady) > 5
    assert np.allclose(table.loc[steady, "ratio[two]"], 1.0, rtol=0.03)
    assert (table.loc[steady, "slowest"] == "").mean() > 0.9
    assert (table["mean_ns[three]"] == table["time_ns[three]"] / table["count[three]"]).all()


@pytest.mark.shared
def test_equal_step_counts_compare_totals() -> None:
    ev = tracelab.load(shared_trace("hta/nccl_parser_config/nccl_data.json.gz")).events
    table = compare([_input("a", ev), _input("b", ev)], "kernel")
    assert table.attrs["basis"] == "totals" and (table["slowest"] == "").all()
    assert not any(c.startswith("per_step_ns") for c in table.columns)


def test_three_steps_against_five_compare_per_step(monkeypatch) -> None:
    """The issue's case: one job's profilers captured different step counts. Proton's decode
    covers the 5 tokens its run.json records (the CLI sets meta.steps from it); torch's
    capture cut to its first 3 tokens. In totals every compute kernel reads about x0.6;
    per call (the ratios) and per step (the columns beside) they agree within the step
    noise, and the note says what was compared."""
    from pathlib import Path

    from tracelab.reports.compare.command import with_steps as _with_steps
    from tracelab.ingest.inputs import label_inputs
    from tracelab.core.options import Options
    from tracelab.ingest.session import Session

    data = Path(__file__).resolve().parent / "data"
    paths = [str(data / "decode-2gpu-proton"), str(data / "decode-2gpu-torch")]
    session = _with_steps(Session.open(paths, Options.from_environment(step_pattern="decode_one_token"), keep_events=True, rank=0), None)
    groups = [r.profiles for r in session.runs]
    torch = groups[1][0]
    torch.events = torch.events[torch.events["step"].isin([0, 1, 2])]
    proton = groups[0][0]
    proton.events = proton.events[proton.events["scope"].str.startswith("decode_one_token")]
    for p in (torch, proton):
        p.summary.clear()  # made from the events as loaded; the inputs now digest the cut events
    table = compare(label_inputs(paths, groups), "kernel").set_index("kernel")
    assert table.attrs["basis"] == "per call (mean_ns): the inputs' steps differ (proton 5, torch 3)"
    compute = table[~table.index.str.contains("all_reduce") & (table["inputs"] == 2)]
    assert len(compute) > 20
    totals = compute["time_ns[torch]"].sum() / compute["time_ns[proton]"].sum()
    per_step = compute["per_step_ns[torch]"].sum() / compute["per_step_ns[proton]"].sum()
    assert totals == pytest.approx(0.6, abs=0.03) and per_step == pytest.approx(1.0, abs=0.03)
    per_call = compute["mean_ns[torch]"] / compute["mean_ns[proton]"]
    assert np.allclose(compute["ratio[torch]"], per_call)
    assert compute["ratio[torch]"].median() == pytest.approx(1.0, abs=0.03)


@pytest.mark.shared
def test_unknown_steps_compare_per_call() -> None:
    """One input without steps (its step column emptied): its totals cannot be divided by a
    step count, so the ratios are per call (time / calls, from the events here), said in the note."""
    ev = tracelab.load(shared_trace("hta/nccl_parser_config/nccl_data.json.gz")).events
    two = ev[ev["step"].isin([4, 5])].assign(step=pd.NA)
    table = compare([_input("three", ev), _input("two", two)], "kernel").set_index("kernel")
    assert table.attrs["basis_kind"] == "per call" and "two unknown" in table.attrs["basis"]
    assert not any(c.startswith("per_step_ns") for c in table.columns)
    calls = ev.groupby(ev["kernel"].astype(str))["count"].sum()
    calls_two = two.groupby(two["kernel"].astype(str))["count"].sum()
    time = ev.groupby(ev["kernel"].astype(str))["dur_ns"].sum()
    time_two = two.groupby(two["kernel"].astype(str))["dur_ns"].sum()
    both = calls_two.index[calls_two > 0].intersection(time.index[time > 0])
    want = (time_two[both] / calls_two[both]) / (time[both] / calls[both])
    assert np.allclose(table.loc[both, "ratio[two]"], want)


@pytest.mark.shared
def test_per_call_table_says_so() -> None:
    """The terminal table shows what the ratios divide: each input's mean per call (us), and
    its title names the basis; the JSON carries the note."""
    import json

    from rich.console import Console

    from tracelab.reports.align.align import comparison
    from tracelab.reports.compare.compare_text import compare_json, compare_tables

    ev = tracelab.load(shared_trace("hta/nccl_parser_config/nccl_data.json.gz")).events
    c = comparison([_input("three", ev), Input("two", "b", 0, "torch", ev[ev["step"].isin([4, 5])])], "kernel")
    console = Console(width=250, record=True)
    console.print(compare_tables(c, ["kernel"], top=3))
    text = " ".join(console.export_text().split())  # the title wraps
    assert "compared per call (mean_ns): the inputs' steps differ (three 3, two 2)" in text
    assert "three (us/call)" in text and "two (us/call)" in text
    top = c.table.iloc[0]
    assert f"{top['mean_ns[three]'] / 1e3:,.2f}" in text and f"x{top['ratio[two]']:.2f}" in text
    assert json.loads(compare_json(c, ["kernel"]))["basis"].startswith("per call")
