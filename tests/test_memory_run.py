"""tracelab run records memory by default (torch: profile_memory=True; nsys:
--cuda-memory-usage=true), --no-memory turns it off, run.json says which; the train workload's
memory options are refused before launch when wrong."""
from __future__ import annotations

import re

import pytest

from tracelab.run import backends, machine, runner
from tracelab.core.errors import UsageError
from tracelab.run.runner import RunSpec


@pytest.mark.parametrize("memory", [True, False])
def test_memory_flag_reaches_nsys_the_ranks_and_run_json(tmp_path, monkeypatch, memory):
    monkeypatch.setattr(machine, "versions", lambda nsys=None: {})
    nsys = tmp_path / "nsys"
    plan = runner.Plan(RunSpec("train", 2, "nsys", tmp_path, memory=memory), "nsys", "tracelab.workloads.train", {}, 0,
                       nsys)
    cmd = runner.torchrun_command(plan, tmp_path / "run")
    assert ("--cuda-memory-usage=true" in cmd) == memory
    assert runner.rank_env(plan)[backends.MEMORY_ENV] == ("1" if memory else "0")
    assert runner.new_record(plan, cmd)["memory"]["recorded"] == memory


@pytest.mark.parametrize("backend, wanted, recorded, says", [
    ("torch", True, True, "profile_memory=True"), ("torch", False, False, "off (--no-memory)"),
    ("nsys", True, True, "--cuda-memory-usage=true"), ("proton", True, False, "proton records no memory"),
    ("none", True, False, "no profiler")])
def test_run_json_says_how_memory_was_recorded(backend, wanted, recorded, says):
    got = backends.memory_recording(backend, wanted)
    assert got["recorded"] == recorded and says in got["how"]


def test_the_torch_session_reads_the_switch(monkeypatch):
    monkeypatch.delenv(backends.MEMORY_ENV, raising=False)
    assert backends.profile_memory()
    monkeypatch.setenv(backends.MEMORY_ENV, "0")
    assert not backends.profile_memory()


@pytest.mark.parametrize("args, words", [
    (["--extra-memory-mb", "1"], "'1' is not RANK:MB"),
    (["--extra-memory-mb=-1:4"], "the rank must be 0 or more"),
    (["--extra-memory-mb", "a:3"], "'a:3' is not RANK:MB"),
    (["--extra-memory-mb", "1:-4"], "the MB positive"),
    (["--memory-snapshot"], "needs a GPU"),
])
def test_train_memory_options_refused_before_launch(tmp_path, monkeypatch, args, words):
    monkeypatch.setattr(machine, "gpu_count", lambda: 0)
    spec = RunSpec("train", 2, "torch", tmp_path / "runs", workload_args=args)
    with pytest.raises(UsageError, match=re.escape(words)):
        runner.plan(spec)
    assert not (tmp_path / "runs").exists()


def test_train_extra_memory_parsed(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "gpu_count", lambda: 0)
    plan = runner.plan(RunSpec("train", 2, "torch", tmp_path / "runs", workload_args=["--extra-memory-mb", "1:16,0:2.5"]))
    assert plan.spec.workload_args == ["--extra-memory-mb", "1:16,0:2.5"]
