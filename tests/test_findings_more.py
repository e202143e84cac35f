"""The idle and roofline findings (reports/findings/findings_more.py): their numbers are those of
`tracelab idle` and `tracelab roofline` on the same inputs, and below their thresholds they say
nothing."""
from __future__ import annotations

import json
import statistics

import pandas as pd
import pytest

from tracelab.ingest.session import Session

from helpers import DATA, slow_after
from helpers import run_cli_output, stake_ns


def _found(folder: str, sources=None) -> list:
    paths = [str(DATA / folder)]
    return Session.open(paths, keep_events=True).findings(sources=sources)


def _json(capsys, *args) -> dict:
    status, out, err = run_cli_output(capsys, *args, "--format", "json")
    assert status == 0, err
    return json.loads(out)


@pytest.mark.slow
def test_idle_finding_states_tracelab_idle_numbers(capsys):
    from tracelab.reports.findings.findings import idle_or_share
    found = [f for f in _found("idle-1gpu-small-torch", [idle_or_share]) if "idle_ns_per_step" in f.evidence]
    assert len(found) == 1
    steps = _json(capsys, "idle", str(DATA / "idle-1gpu-small-torch"))["steps"]
    median = lambda key: statistics.median(s[key] for s in steps)  # noqa: E731 - per step: medians over the steps
    assert found[0].evidence["idle_ns_per_step"] == pytest.approx(median("idle_ns"))
    assert f"{median('idle_host_ns') / 1e6:,.3f} ms of it before the host" in found[0].text
    assert f"host-bound in {len(steps)} of {len(steps)} steps" in found[0].text
    # issue 27: ranked by what no host gaps would save, as `tracelab whatif` predicts it
    scenario = next(s for s in _json(capsys, "whatif", str(DATA / "idle-1gpu-small-torch"), "--scenario",
                                     "no-host-gaps")["scenarios"] if s["name"] == "no-host-gaps")
    assert found[0].at_stake_ns == stake_ns(scenario)
    assert (f"saves {scenario['saving_ns'] / 1e6:,.2f} ms of {scenario['step_ns'] / 1e6:,.2f} ms per step, step end to "
            "step end" in found[0].text)


@pytest.mark.slow
def test_the_fix_carries_the_diagnosis_saving_once(capsys):
    """The CUDA-graphs fix (reports/fixes/host.py) and the idle finding get the same no-host-gaps
    saving: the fix alone is said, with that saving in place of its upper bound."""
    from tracelab.reports.findings.findings import idle_or_share
    from tracelab.reports.fixes.host import graphs_findings
    idle = _found("idle-1gpu-small-torch", [idle_or_share])
    fix = _found("idle-1gpu-small-torch", [graphs_findings])
    both = _found("idle-1gpu-small-torch", [idle_or_share, graphs_findings])
    assert len(idle) == len(fix) == 1 and both == fix
    assert fix[0].at_stake_ns == idle[0].at_stake_ns and fix[0].evidence["whatif"] == idle[0].evidence["whatif"]
    assert "an upper bound" not in fix[0].text and "what if the host issued work" in fix[0].text


@pytest.mark.slow
def test_gpu_bound_capture_has_no_idle_finding():
    assert not [f for f in _found("idle-1gpu-large-torch") if f.section == "idle"]


@pytest.mark.slow
def test_roofline_finding_names_the_row_losing_most(capsys):
    found = [f for f in _found("decode-1b-1gpu-torch") if f.section == "roofline"]
    rows = _json(capsys, "roofline", str(DATA / "decode-1b-1gpu-torch"), "--top", "0")["rows"]
    top = max((r for r in rows if r["lost_ns"] is not None), key=lambda r: r["lost_ns"])
    assert len(found) == 1 and found[0].evidence["kernel"] == top["kernel"]
    assert found[0].evidence["lost_ns"] == top["lost_ns"]
    assert f"loses {top['lost_ns'] / 1e6:,.3f} ms to its roofline" in found[0].text


@pytest.mark.slow
def test_no_roofline_finding_without_a_device_or_work():
    assert not [f for f in _found("train-cpu-torch") if f.section == "roofline"]  # CPU: no roof
    assert not [f for f in _found("decode-1gpu-proton") if f.section == "roofline"]  # no proton metrics there


@pytest.mark.slow
def test_the_tf32_fix_says_what_the_step_would_gain(capsys):
    """The fp32-GEMM fix carries its own what-if, the same saving `tracelab whatif --scenario
    scale:...` predicts: those kernels scaled to the TF32 roof's time where the trace gives their
    work; here it does not, so they take no time at all, an upper bound said so. The step is
    host-bound: the bound is small beside the CUDA-graphs fix's."""
    from tracelab.reports.fixes.gemm import tf32_findings
    from tracelab.reports.fixes.host import graphs_findings
    found = _found("train-1gpu-steps-torch", [tf32_findings])
    assert len(found) == 1 and found[0].evidence["scenario"].endswith("=0")
    e = found[0].evidence
    scenario = _json(capsys, "whatif", str(DATA / "train-1gpu-steps-torch"), "--scenario", e["scenario"])["scenarios"][0]
    assert e["whatif"]["saving_ns_per_step"] == pytest.approx(scenario["saving_ns"])
    assert found[0].at_stake_ns == stake_ns(scenario)
    from tracelab.reports.whatif.findings import NOTHING_FRAC
    saved = f"{scenario['saving_ns'] / 1e6:,.2f} ms"
    nothing = scenario["saving_ns"] < NOTHING_FRAC * scenario["step_ns"]
    assert ("what if these GEMMs took no time at all (an upper bound: the trace does not give their work): "
            + (f"nothing to gain now ({saved} of " if nothing else f"saves {saved} of ")) in found[0].text
    graphs = _found("train-1gpu-steps-torch", [graphs_findings])
    assert 0 <= found[0].at_stake_ns < graphs[0].at_stake_ns


@pytest.mark.slow
def test_the_run_under_none_is_the_step_without_the_profiler_for_every_command(capsys):
    """With the same job's run under backend none beside it (and no step of its own measured with
    the profiler off), that run's median step (from its run.json) is the step without the profiler:
    one figure, the same in whatif's JSON and in the findings' words, the user's time first."""
    import statistics

    from tracelab.reports.fixes.host import graphs_findings
    paths = [str(DATA / "train-1gpu-steps-torch"), str(DATA / "train-1gpu-steps-none")]
    (f,) = Session.open(paths, keep_events=True).findings(sources=[graphs_findings])
    none = json.loads((DATA / "train-1gpu-steps-none" / "run.json").read_text())
    rows = next(iter((none.get("results") or none["figures"]).values()))["rows"]
    none_ns = 1e6 * statistics.median(rows[0]["step_ms"])
    v = f.values
    assert v["unprofiled_step_ns"] == pytest.approx(none_ns) and v["unprofiled_run"] == "train-1gpu-steps-none"
    status, out, err = run_cli_output(capsys, "whatif", *paths, "--format", "json")
    assert status == 0, err
    doc = json.loads(out)
    assert doc["unprofiled_step_ns"] == pytest.approx(none_ns) and doc["unprofiled_source"] == "measured"
    row = next(r for r in doc["scenarios"] if r["name"] == "no-host-gaps")
    assert v["unprofiled_saving_ns"] == pytest.approx(none_ns - row["predicted_unprofiled_ns"])
    said = (f"saves {v['unprofiled_saving_ns'] / 1e6:,.2f} ms of {none_ns / 1e6:,.2f} ms per step without the profiler "
            f"({100 * v['unprofiled_saving_ns'] / none_ns:.0f}%; the median step of the same job under backend none, "
            "train-1gpu-steps-none)")
    assert said in f.text
    profiled = f"under the profiler it saves {v['saving_ns'] / 1e6:,.2f} ms of {v['step_ns'] / 1e6:,.2f} ms"
    assert f.text.index(said) < f.text.index(profiled)  # the user's time first, the profiled saving after
    (alone,) = _found("train-1gpu-steps-torch", [graphs_findings])
    assert "backend none" not in alone.text and alone.values.get("unprofiled_run") is None


@slow_after(1)
@pytest.mark.parametrize("command", [  # one reading rule: steps and whatif again under -m slow
    "breakdown", pytest.param("steps", marks=pytest.mark.slow), "idle", pytest.param("whatif", marks=pytest.mark.slow)])
def test_a_run_folder_under_none_is_taken_beside_traces(capsys, command):
    status, out, err = run_cli_output(capsys, command, str(DATA / "train-1gpu-steps-torch"),
                                      str(DATA / "train-1gpu-steps-none"))
    assert status == 0, err
    status, out, err = run_cli_output(capsys, command, str(DATA / "train-1gpu-steps-none"))
    assert status == 2 and "no trace files" in err


@slow_after(1)
@pytest.mark.parametrize("folder", ["decode-2gpu-torch", "train-1gpu-steps-nsys"])
def test_a_saving_the_replay_does_not_see_is_said_as_none(folder):
    """A finding whose what-if moves no step (under 0.5% of it) says "nothing to gain now" and
    why, never "0%" with an error band; the others keep their percentage."""
    from tracelab.reports.whatif.findings import NOTHING_FRAC
    found = [f for f in _found(folder) if "whatif" in f.evidence]
    assert found
    for f in found:
        w = f.evidence["whatif"]
        frac = w["saving_ns_per_step"] / w["step_ns"]
        if frac < NOTHING_FRAC:
            assert "nothing to gain now" in f.text and "the critical path runs through other work" in f.text
            assert "(0%" not in f.text
        else:
            assert f"({100 * frac:.0f}%" in f.text and "nothing to gain" not in f.text
    assert {f.evidence["whatif"]["saving_ns_per_step"] < NOTHING_FRAC * f.evidence["whatif"]["step_ns"]
            for f in found} == {True, False}  # each capture has both kinds


def _totals_row(compute_ns: list[int], comm_ns: list[int]) -> "pd.Series":
    """compare.stragglers' row for one run of these ranks' totals."""
    import pandas as pd

    from tracelab.reports.align.align import stragglers
    totals = pd.DataFrame({"group": "", "label": [f"rank{r}" for r in range(len(compute_ns))],
                           "rank": range(len(compute_ns)), "compute_ns": compute_ns, "comm_ns": comm_ns})
    row = stragglers(totals).iloc[0].copy()
    row["pattern"] = "straggler"
    return row


def test_a_compute_lead_that_explains_the_wait_is_the_reason_given():
    from tracelab.reports.findings.findings import totals_finding
    f = totals_finding(_totals_row([1_000_000_000, 1_171_700_000], [400_000_000, 233_200_000]))
    assert f.text.startswith("rank1 computes 171.7 ms more than any other rank") and "166.8 ms less" in f.text
    assert f.at_stake_ns == 171_700_000 and "unexplained_wait_ns" not in f.evidence


def test_a_wait_the_compute_lead_cannot_explain_is_said_to_be_elsewhere():
    """The README's command on 2 H200s under proton (eager llama-2-7b): rank 1 computed 100.6 ms more
    and rank 0 spent 19,856.5 ms more in NCCL kernels: compute is 0.5% of the wait, not its reason."""
    from tracelab.reports.findings.findings import totals_finding
    from tracelab.reports.align.straggler_text import straggler_line
    row = _totals_row([5_691_028_000, 5_791_643_000], [32_760_763_000, 12_904_238_000])
    f = totals_finding(row)
    wait, lead = 32_760_763_000 - 12_904_238_000, 5_791_643_000 - 5_691_028_000
    assert f.text.startswith("the other ranks wait for rank1 in collectives: up to 19,856.5 ms more")
    assert f"only 100.6 ms more than any other rank ({100 * lead / wait:.1f}% of that wait)" in f.text
    assert "computes 100.6 ms more than any other rank and" not in f.text and "capture with --backend torch" in f.text
    assert f.at_stake_ns == wait and f.evidence["unexplained_wait_ns"] == wait - lead
    assert f"its compute lead (100.615 ms) is {100 * lead / wait:.1f}% of their extra wait" in straggler_line(row, "GPU time")


@pytest.mark.slow  # about 1 s of CPU here: the default run stays under 90 s
def test_a_straggler_held_back_by_its_host_gets_no_balance_what_if(capsys):
    """whatif-stall: rank 1's host sleeps 10 ms in a host_stall range every other step (its README),
    so it is late with an idle GPU, not more work. 'balance' evens GPU work and moved nothing
    (its saving, from tracelab whatif, is ~0), so the finding said 'what if every rank's work at
    the median rank's (the straggler removed): nothing to gain now' beside 6.85 ms of lateness per
    step; it now says why no such what-if applies. The injected extra-work straggler keeps it."""
    from tracelab.reports.findings.findings import straggler_findings
    scenario = next(s for s in _json(capsys, "whatif", str(DATA / "whatif-stall-2gpu-torch"), "--scenario",
                                     "balance")["scenarios"] if s["name"] == "balance")
    assert scenario["saving_ns"] < 0.01 * scenario["step_ns"]
    stall, = _found("whatif-stall-2gpu-torch", [straggler_findings])
    assert "; evening the ranks' GPU work would not move it: its GPU idles " in stall.text
    assert "what if" not in stall.text and "whatif" not in stall.evidence
    late, = _found("tp-2gpu-late-torch", [straggler_findings])
    assert ": its GPU does 10.7 ms more work per step before its collectives (extra_work)" in late.text
    assert late.evidence["whatif"]["scenario"] == "balance:share"


@pytest.mark.slow
def test_exposed_communication_without_steps_says_the_wait():
    """decode-2gpu-nsys has no steps: rank 1's 'exposed communication' (60.6 ms of its 66.6 ms
    span) was stated bare; it is mostly waiting at the first all-reduce for rank 0, whose trace
    began 57 ms later. The wait, from each SQLite's session epoch plus the i-th all-reduce's start
    (straight from the files), is now in the sentence."""
    import sqlite3

    from tracelab.reports.findings.findings import exposed_findings
    starts = {}
    for r in (0, 1):
        with sqlite3.connect(f"file:{DATA / 'decode-2gpu-nsys' / f'rank{r}.sqlite'}?mode=ro", uri=True) as db:
            (epoch_ns,), = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchall()
            starts[r] = [epoch_ns + s for (s,) in db.execute(
                "SELECT k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
                "WHERE s.value = 'one_shot_all_reduce_kernel' ORDER BY k.start")]
    waits = [max(0, a - b) for a, b in zip(starts[0], starts[1])]
    found, = _found("decode-2gpu-nsys", [exposed_findings])
    assert found.text.startswith(f"rank 1 waits {sum(waits) / 1e6:,.1f} ms in all at its {len(waits)} collectives, "
                                 f"most at allreduce ({waits[0] / 1e6:,.1f} ms of it at its first); ")


def test_the_work_a_balance_would_even_is_the_ranks_own_device():
    """A CPU-only run's straggler held back by idle time was told 'evening the ranks' GPU work would
    not move it' (the README's CPU decode, 2026-11-26): the device is the one verdicts.why names."""
    import pandas as pd

    from tracelab.reports.findings.findings import gating_device
    causes = pd.DataFrame({"gating_rank": [0, 1, 1], "cause": ["idle GPU (+1 busy)", "idle CPU (+0.8 busy, +2.1 idle)",
                                                              "more CPU work"]})
    assert (gating_device(causes, 1), gating_device(causes, 0), gating_device(causes, 5)) == ("CPU", "GPU", "GPU")


def test_a_long_kernel_name_is_cut_where_it_still_names_one_kernel(tmp_path, capsys):
    """rocBLAS/Tensile kernel names run to 800 characters and differ late (..._AFC1_... against
    ..._AFC0_...): a name cut at 70 characters without a mark stood for several kernels, its
    calls and time those of one. Two kernels here share an 80-character start; the finding's
    name, cut and marked '...', begins exactly one kernel's name in the JSON, whose calls and
    time it states."""
    import gzip
    import re
    import shutil

    shutil.copytree(DATA / "decode-compile-1gpu-torch", tmp_path / "run")  # recorded shapes; both kinds of kernel
    path = tmp_path / "run" / "rank0.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    stem = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x64x128_MI16x16x1_SN_LDSB1_AFC"
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and "elementwise_kernel" in e["name"]:
            e["name"] = stem + ("0_AG0_ASEM1" if "unrolled" in e["name"] else "1_AG0_ASEM1")
    assert len({e["name"] for e in doc["traceEvents"] if e.get("name", "").startswith(stem)}) == 2
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
    status, out, _ = run_cli_output(capsys, "roofline", str(tmp_path / "run"))
    shown, calls, ms_ = re.search(r"1\. (\S+) loses [\d.,]+ ms to its roofline on rank 0 \(([\d,]+) calls, ([\d.,]+) ms",
                                  out).groups()
    assert status == 0 and shown.endswith("...")
    named = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith(shown[:-3])]
    assert len({e["name"] for e in named}) == 1
    assert int(calls.replace(",", "")) == len(named)
    assert float(ms_.replace(",", "")) == pytest.approx(sum(e["dur"] for e in named) / 1e3, abs=0.001)


def _printed_findings(out: str) -> list[str]:
    """The numbered findings a table command ends on, as printed (one per item, lines joined)."""
    tail = out[out.rindex("\nfindings"):]
    items = [" ".join(line.strip() for line in item.splitlines()) for item in tail.split("\n  ")[1:]]
    return [item.split(". ", 1)[1] for item in items]


@slow_after(1)
@pytest.mark.parametrize("command, section", [("roofline", "roofline"), ("idle", "idle")])
def test_a_command_ends_on_its_sections_findings_in_the_report_s_words(capsys, command, section):
    """`tracelab roofline` ends on every finding the report proves in its roofline section (the
    fp32 GEMMs of the fixes topic too), `tracelab idle` on the idle section's (the host-bound
    fix that replaces the idle diagnosis in the report): the report's own sentences, in its order."""
    folder = str(DATA / "train-1gpu-steps-torch")
    report = [f.text for f in Session.open([folder]).findings() if f.section == section]
    status, out, err = run_cli_output(capsys, command, folder)
    assert status == 0, err
    assert report and _printed_findings(out) == report
