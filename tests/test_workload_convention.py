"""One workload convention: every workload module offers parse(argv) -> args (checked, the
world read from torchrun's environment), run(args, d) and main = harness.main(...), so bad
options are one line from rank 0 and `tracelab run` checks them the same way."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from tracelab.core.errors import UsageError
from tracelab.run.runner import WORKLOADS
from tracelab.run.workload_options import parse_workload_args

NAMES = [n for n in WORKLOADS if importlib.util.find_spec(WORKLOADS[n].program) is not None]
# an option each workload refuses on any machine, and the option the refusal names
BAD = {"decode": ["--new-tokens", "0"], "train": ["--steps", "0"], "allreduce": ["--sizes", "0"],
       "overlap": ["--iters", "0"]}


@pytest.mark.parametrize("name", NAMES)
def test_every_workload_has_parse_run_main(name):
    module = importlib.import_module(WORKLOADS[name].program)
    args = module.parse([])
    assert args.timeout_s > 0 and args.backend == "none"
    assert callable(module.run) and callable(module.main)
    assert not hasattr(module, "check") or name == "decode"  # decode's check is parse's helper


@pytest.mark.parametrize("name", [n for n in NAMES if BAD.get(n)])
def test_bad_option_is_a_usage_error_for_the_runner(name):
    with pytest.raises(UsageError, match=BAD[name][0]):
        parse_workload_args(name, WORKLOADS[name], BAD[name], 1, gpu=False)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in NAMES if BAD.get(n)])
def test_bad_option_is_one_line_from_the_workload_alone(name):
    proc = subprocess.run([sys.executable, "-m", WORKLOADS[name].program, *BAD[name]], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"tracelab {name}: error: {BAD[name][0]}") and proc.stderr.count("\n") == 1


def test_decode_reads_the_world_from_the_environment(monkeypatch):
    decode = importlib.import_module(WORKLOADS["decode"].program)
    monkeypatch.setenv("WORLD_SIZE", "3")  # the tiny model's 8 key/value heads do not split 3 ways
    with pytest.raises(UsageError, match="--ranks"):
        decode.parse([])
