"""The findings as one number per cause and run (reports/findings, reports/whatif/findings.py):
a run's saving is the one `tracelab whatif --format json` gives it, alone or beside other runs,
and never beside its own upper bound; a fix and the diagnosis it answers are one finding; the
cap keeps every run's first finding; every finding carries a code and JSON values."""
from __future__ import annotations

import html
import json
import re
from functools import lru_cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracelab.cli import app
from tracelab.cli.html_report import write_report
from tracelab.ingest.session import Session
from tracelab.reports.findings import findings as F
from tracelab.reports.findings.finding import CODES
from tracelab.reports.fixes.host import graphs_findings

from helpers import stake_ns, slow_after

DATA = Path(__file__).parent / "data"
SMALL, TRAIN = DATA / "idle-1gpu-small-torch", DATA / "train-1gpu-steps-torch"  # two host-bound runs
HOST = [F.idle_or_share, graphs_findings]  # the diagnosis and the fix of the same cause


def _found(paths: list[Path], sources=None) -> list[F.Finding]:
    paths = [str(p) for p in paths]
    return Session.open(paths).findings(sources=sources)


@lru_cache(maxsize=None)
def _no_host_gaps(run: Path) -> dict:
    """The no-host-gaps row of `tracelab whatif --format json` on the run alone (asked once per run:
    two tests compare against it, neither changes it)."""
    result = CliRunner().invoke(app, ["whatif", str(run), "--scenario", "no-host-gaps", "--format", "json"])
    assert result.exit_code == 0, result.output
    return next(s for s in json.loads(result.output)["scenarios"] if s["name"] == "no-host-gaps")


@pytest.fixture(scope="module")
def beside() -> list[F.Finding]:
    """The host findings of two runs given together (compare's and the report's inputs)."""
    return _found([SMALL, TRAIN], HOST)


@pytest.mark.slow
def test_a_runs_saving_beside_another_run_is_its_whatif_saving(beside):
    """Beside another run, each run's host finding states the replay's saving as `tracelab whatif`
    gives it for that run alone, not the upper bound it said before (the idle before and during
    launches, which the saving, step end to step end, may exceed)."""
    for run in (SMALL, TRAIN):
        (f,) = [f for f in beside if f.run == run.name]
        w = _no_host_gaps(run)
        assert f.values["saving_ns"] == pytest.approx(w["saving_ns"]) and f.values["step_ns"] == pytest.approx(w["step_ns"])
        assert f.at_stake_ns == stake_ns(w)
        assert f"saves {w['saving_ns'] / 1e6:,.2f} ms of {w['step_ns'] / 1e6:,.2f} ms per step" in f.text
        assert "upper bound" not in f.text and "at most" not in f.text and "bound_ns" not in f.values


@pytest.mark.slow
def test_a_run_says_the_same_alone_and_beside_another(beside):
    for run in (SMALL, TRAIN):
        (alone,) = _found([run], HOST)
        (there,) = [f for f in beside if f.run == run.name]
        assert there.text == f"{run.name}: {alone.text}" and there.at_stake_ns == alone.at_stake_ns
        assert {**there.values, "run": ""} == alone.values and there.code == alone.code == "host_bound"


def test_the_saving_against_none_is_the_runs_beside_another_run():
    """The profiled run's step without the profiler is its own run under backend none (run.json's
    median step), the same with another run beside it."""
    import statistics

    none = DATA / "train-1gpu-steps-none"
    rows = next(iter(json.loads((none / "run.json").read_text())["results"].values()))["rows"]
    none_ns = 1e6 * statistics.median(rows[0]["step_ms"])
    (alone,) = _found([TRAIN, none], HOST)
    (there,) = [f for f in _found([TRAIN, none, SMALL], HOST) if f.run == TRAIN.name]
    for f in (alone, there):
        v = f.values
        assert v["unprofiled_step_ns"] == pytest.approx(none_ns) and v["unprofiled_run"] == none.name
        user = (f"saves {v['unprofiled_saving_ns'] / 1e6:,.2f} ms of {none_ns / 1e6:,.2f} ms per step without the "
                f"profiler ({100 * v['unprofiled_saving_ns'] / none_ns:.0f}%; the median step of the same job under "
                f"backend none, {none.name})")
        profiled = f"; under the profiler it saves {v['saving_ns'] / 1e6:,.2f} ms of {v['step_ns'] / 1e6:,.2f} ms"
        assert user + profiled in f.text  # the user's time first
    assert there.text == f"{TRAIN.name}: {alone.text}"


def test_the_words_are_rendered_from_the_values(beside):
    """A program holding a finding's values renders its what-if clause as the terminal says it."""
    from tracelab.reports.whatif.bands import band
    from tracelab.reports.whatif.findings import TEXT, saving_words

    for f in beside:
        assert f.text.endswith(saving_words(f.values, TEXT["no-host-gaps"], band("no-host-gaps")))


def test_one_finding_per_cause_and_run(beside):
    """The idle GPU and the CUDA-graphs fix of one run are one cause (the host's gaps): the fix
    alone is said, per run, whether or not a replay gives its saving."""
    assert sorted(f.run for f in beside) == sorted([SMALL.name, TRAIN.name])
    assert {f.code for f in beside} == {"host_bound"}


def test_without_a_replay_the_bound_is_the_one_number():
    """The fix's own sentence (no replay yet): its upper bound, in its values and in its words."""
    from tracelab.reports.findings.finding import Evidence
    from tracelab.reports.align.align import comparison

    inputs = Session.open([str(SMALL)]).inputs
    (f,) = graphs_findings(Evidence(inputs, comparison(inputs, "kernel")))
    assert f.values["bound_ns"] == f.values["stake_ns_per_step"] and "saving_ns" not in f.values
    assert f"at most {f.values['bound_ns'] / 1e6:,.1f} ms per step" in f.text and "an upper bound" in f.text


def _made(run: str, *stakes: int) -> list[F.Finding]:
    return [F.Finding(f"{run} {n}", n, "runs", code="idle", values={"run": run}) for n in stakes]


@pytest.mark.parametrize("stakes, kept", [
    ({"a": range(10, 19), "b": [1]}, {"a": 7, "b": 1}),  # b's only finding kept, a's eighth and ninth dropped
    ({"a": range(10, 14), "b": range(1, 4)}, {"a": 4, "b": 3}),  # under the cap: all
    ({"a": [9, 8], "b": [7], None: [6]}, {"a": 2, "b": 1, None: 1}),  # a finding across runs is a run of its own
])
def test_the_cap_keeps_each_runs_first_finding(stakes, kept):
    made = sorted((f for run, ns in stakes.items() for f in _made(run, *ns)), key=lambda f: -f.at_stake_ns)
    found = F.capped(made)
    assert len(found) == min(len(made), F.MAX_FINDINGS)
    assert {run: sum(f.run == run for f in found) for run in kept} == kept
    assert [f.at_stake_ns for f in found] == sorted((f.at_stake_ns for f in found), reverse=True)  # rank order kept


@pytest.mark.slow  # three runs of two GPUs, each replayed: several seconds
def test_three_runs_each_keep_a_finding():
    """Two GPU runs beside a run of eight findings-worth: every run keeps at least one, and no
    run states a cause twice."""
    runs = [DATA / "decode-2gpu-torch", DATA / "train-2gpu-torch", DATA / "ddp-2gpu-late-torch"]
    found = _found(runs)
    assert len(found) <= F.MAX_FINDINGS and {r.name for r in runs} <= {f.run for f in found}
    causes = [(f.run, f.code) for f in found]
    assert len(causes) == len(set(causes))


# The codes and JSON values are one rule for every source: the fast run checks it on the cheaper
# captures; the straggler, the alternation and exposed communication (whose own tests in
# test_findings*.py find them on these captures, fast) and the four-run profiler cost under -m slow.
SLOW_CODES = {"straggler", "alternating", "profiler_cost", "exposed_comm"}
TABLE = [  # (inputs, a code they must give): a finding of every kind of source, on real captures
    ([DATA / "ddp-2gpu-late-torch"], "straggler"),
    ([DATA / "tp-2gpu-alternating-torch"], "alternating"),
    ([DATA / "tp-2gpu-late-proton"], "straggler_totals"),
    ([DATA / "gloo-2cpu-late"], "cpu_comm"),
    ([DATA / "idle-1gpu-large-torch"], "roofline"),
    ([DATA / "train-1gpu-steps-torch", DATA / "train-1gpu-steps-none"], "host_bound"),
    ([DATA / "train-1gpu-steps-torch"], "tf32"),
    ([DATA / f"train-1gpu-steps-{b}" for b in ("none", "torch", "nsys", "proton")], "profiler_cost"),
    ([DATA / "train-2cpu-memory-torch"], "memory_imbalance"),
    ([DATA / "decode-2gpu-torch"], "exposed_comm"),
]


@slow_after(1)
@pytest.mark.parametrize("paths, code", [
    pytest.param(p, c, id=f"{p[0].name}-{c}", marks=[pytest.mark.slow] if c in SLOW_CODES else []) for p, c in TABLE])
def test_every_finding_has_a_code_and_json_values(paths, code):
    found = _found(paths)
    assert code in {f.code for f in found}
    for f in found:
        assert f.code in CODES and "run" in f.values
        doc = json.loads(json.dumps(f.as_json(), allow_nan=False))
        assert doc["code"] == f.code and doc["text"] == f.text and isinstance(doc["values"], dict)
        if "rank" in f.evidence and "rank" in f.values:
            assert f.values["rank"] == f.evidence["rank"]


@pytest.mark.slow
def test_the_report_carries_the_findings_as_json(tmp_path):
    """The report's findings block: the sentences on the page and, for programs, the same findings'
    code, values and text."""
    page = write_report([str(TRAIN)], tmp_path / "r.html").read_text()
    block = page.split('<section id="findings">', 1)[1].split("</section>", 1)[0]
    data = json.loads(block.split('id="tracelab-findings">', 1)[1].split("</script>", 1)[0])
    said = [html.unescape(t) for t in re.findall(r'<li><a href="#[\w-]+">(.*?)</a></li>', block)]
    assert [d["text"] for d in data] == said and all(d["code"] in CODES for d in data)
    (host,) = [d for d in data if d["code"] == "host_bound"]
    w = _no_host_gaps(TRAIN)
    assert host["values"]["saving_ns"] == pytest.approx(w["saving_ns"]) and host["values"]["rank"] == 0


def test_nothing_to_gain_names_the_step_without_the_profiler_where_known():
    """A saving of nothing still says which step it is of: the profiled replay's, and the step
    the user runs (without the profiler) where the run folder measured it."""
    from tracelab.reports.whatif.findings import saving_words

    v = {"window": "per step", "step_ns": 10_990_000.0, "saving_ns": 0.0, "saving_share": 0.0}
    assert "without the profiler" not in saving_words(v, "x")
    words = saving_words({**v, "unprofiled_step_ns": 8_030_712.0, "unprofiled_source": "measured"}, "x")
    assert "nothing to gain now (0.00 ms of 10.99 ms per step" in words and "8.03 ms without the profiler" in words
