"""A kernel differing between repeats of one config (same workload, config and profiler) is the
machine's drift, not a change the user made: said as such, beyond the floor of how far two runs of one
job move by chance, and ranked after the findings about the job."""
from __future__ import annotations

import gzip
import json
import math

from tracelab.ingest.session import Session
from tracelab.reports.runs import findings_runs

from helpers import DATA

REPEATS = DATA / "repeats-cpu-torch"


def _op_ns(run: str, name: str) -> float:
    """The sum of the CPU operator `name`'s durations in a repeat's trace, straight from its JSON."""
    events = json.load(gzip.open(REPEATS / run / "rank0.pt.trace.json.gz"))["traceEvents"]
    return 1000.0 * sum(e["dur"] for e in events if e.get("ph") == "X" and e.get("name", "").endswith(name))


def test_repeats_differ_by_drift_said_as_such_and_ranked_after_the_job() -> None:
    infos = [json.loads((REPEATS / r / "run.json").read_text()) for r in ("repeat-1", "repeat-2")]
    assert infos[0]["config"] == infos[1]["config"] and infos[0]["backend"] == infos[1]["backend"]
    session = Session.open([str(REPEATS)])  # the folder of repeats: each repeat's run.json read
    assert [name for name, _ in session.run_infos] == ["repeat-1", "repeat-2"]
    [f] = [f for f in session.findings() if f.code == "difference"]
    kernel = f.values["kernel"]
    a_ns, b_ns = _op_ns("repeat-1", kernel), _op_ns("repeat-2", kernel)
    assert abs(f.values["delta_ns"] - (b_ns - a_ns)) < 1e3 and abs(math.log(b_ns / a_ns)) > findings_runs.REPEAT_FLOOR_LOG
    assert f.values["repeats"] and f.evidence["measurement"] and f.text.startswith("between repeats of one config")
    # beside a run with findings about its job, the drift comes after them though more time is at stake
    mixed = Session.open([str(REPEATS), str(DATA / "stall-2cpu-torch")]).findings()
    drift = [k for k, g in enumerate(mixed) if g.code == "difference"]
    job = [g for g in mixed if not g.evidence.get("measurement")]
    assert drift and job and drift[0] == len(job) and max(g.at_stake_ns for g in job) < mixed[drift[0]].at_stake_ns


def test_drift_within_the_floor_between_repeats_is_no_finding(monkeypatch) -> None:
    [f] = Session.open([str(REPEATS)]).findings()
    ratio = f.values["ratio"]
    monkeypatch.setattr(findings_runs, "REPEAT_FLOOR_LOG", abs(math.log(ratio)) * 1.01 + 1.0)
    assert not [g for g in Session.open([str(REPEATS)]).findings() if g.code == "difference"]
