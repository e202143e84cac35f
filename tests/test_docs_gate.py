"""docs/gate.md's CI recipe run on the CPU: its GitHub Actions job's `run:` steps, with the job's
environment, as a push to main (no baseline yet: the gate step skipped, the run accepted) and
then a pull request (the gate against baseline:main, its JUnit XML, Markdown summary and HTML
page written). The steps' `if:` conditions are the ones this test knows how to decide: a new
one fails the test instead of being guessed. The pull request's workload step, the push's command
again, is not run twice: the push's three runs stand in for it (the gate then weighs the same
runs on both sides)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from helpers import needs

yaml = pytest.importorskip("yaml")
pytestmark = needs("torch")  # found, not imported: collecting this module stays cheap

ROOT = Path(__file__).resolve().parents[1]
CONDITIONS = {  # the recipe's `if:` -> whether it holds, given (the job's folder, a push to main)
    "hashFiles('.baselines/main/CURRENT') != ''": lambda cwd, main: (cwd / ".baselines/main/CURRENT").is_file(),
    "always()": lambda cwd, main: True,
    "github.ref == 'refs/heads/main'": lambda cwd, main: main,
}


def recipe() -> dict:
    text = (ROOT / "docs/gate.md").read_text()
    (block,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    return yaml.safe_load(block)["jobs"]["gate"]


def _job(job: dict, cwd: Path, main: bool, done_before: dict[str, int] | None = None) -> dict[str, int]:
    """Each `run:` step the job would run (its install step aside: this checkout is installed), by name -> exit status;
    a step of `done_before` (name -> exit status) is not run again, its outputs in `cwd` standing."""
    env = {**os.environ, **{k: str(v) for k, v in job["env"].items()},
           "GITHUB_STEP_SUMMARY": str(cwd / "summary.md"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = {}
    for step in job["steps"]:
        if "if" in step:
            assert step["if"] in CONDITIONS, f"the recipe's condition {step['if']!r} is not one this test decides"
        if "run" not in step or step["run"].startswith("pip install") or \
                not CONDITIONS.get(step.get("if"), lambda *_: True)(cwd, main):
            continue
        if step["name"] in (done_before or {}):
            done[step["name"]] = done_before[step["name"]]
            continue
        proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=900)
        done[step["name"]] = proc.returncode
        assert proc.returncode in (0, 1), f"{step['name']}: {proc.stderr[-2000:]}"
    return done


def _runs(folder: Path) -> list[str]:
    """The repeats' run.json under `folder`, each as text, in order."""
    return sorted(f.read_text() for f in folder.rglob("run.json"))


@pytest.mark.slow
def test_the_ci_recipe_runs_end_to_end_on_the_cpu(tmp_path):
    job = recipe()
    on_main = _job(job, tmp_path, main=True)
    assert on_main == {"Run the workload three times": 0, "Accept this run as the baseline": 0}
    assert (tmp_path / ".baselines/main/CURRENT").is_file()
    accepted = _runs(tmp_path / ".baselines/main")
    assert accepted and accepted == _runs(tmp_path / "runs/candidate")  # the store's copy, and the runs left in place
    on_pr = _job(job, tmp_path, main=False, done_before={"Run the workload three times": on_main["Run the workload three times"]})
    assert list(on_pr) == ["Run the workload three times", "Gate against the last accepted run"]
    assert on_pr["Run the workload three times"] == 0 and on_pr["Gate against the last accepted run"] in (0, 1)
    suite = ET.parse(tmp_path / "gate.xml").getroot().find("testsuite")
    assert int(suite.get("tests")) > 0 and "step_time" in {c.get("name") for c in suite.iter("testcase")}
    summary = (tmp_path / "summary.md").read_text()
    assert summary.startswith("### tracelab gate: ") and "measured on the repeats (3 baseline, 3 candidate runs)" \
        in summary
    assert (tmp_path / "gate.html").read_text().startswith("<!DOCTYPE html>")
