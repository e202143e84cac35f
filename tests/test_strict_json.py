"""Every `--format json` is strict JSON (issue 22): parsed with a parser that refuses NaN and
Infinity, on one-rank and many-rank inputs of every profiler, and one-rank `steps` says nothing
about clocks or stragglers (no question across ranks applies)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from helpers import strict_json, slow_after

from tracelab.cli import app
from tracelab.reports.jsonout import dumps, records

DATA = Path(__file__).resolve().parent / "data"
ONE_RANK = ["decode-1gpu-torch", "decode-1gpu-nsys", "decode-1gpu-proton", "train-1gpu-steps-torch"]
MANY_RANKS = ["ddp-2gpu-late-nsys", "ddp-2gpu-equal-proton", "gloo-2cpu-late", "tp-2gpu-late-torch"]
SLOW_STRICT = ({("steps", n) for n in ONE_RANK}
               | {("breakdown", n) for n in ("train-1gpu-steps-torch", "ddp-2gpu-late-nsys", "ddp-2gpu-equal-proton",
                                            "tp-2gpu-late-torch")})
COMPARED = [["decode-1gpu-proton", "decode-1gpu-torch", "decode-1gpu-nsys"],  # 5, 5 and 3 steps
            ["train-2gpu-torch", "decode-1gpu-torch"], ["ddp-2gpu-late-torch"]]


def _run(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_parser_refuses_nan():
    with pytest.raises(ValueError):
        strict_json('{"a": NaN}')


@slow_after(1)
@pytest.mark.parametrize("command, name", [
    # one-rank steps JSON is parsed strictly by test_one_rank_steps_has_no_multi_rank_lines too; breakdown's
    # by default on one rank of each profiler and on the CPU ranks, on the rest under -m slow
    pytest.param(c, n, marks=[pytest.mark.slow] if (c, n) in SLOW_STRICT else [], id=f"{c}-{n}")
    for n in ONE_RANK + MANY_RANKS for c in ("breakdown", "steps")])
def test_json_is_strict(command, name):
    strict_json(_run(command, str(DATA / name)))


@slow_after(1)
@pytest.mark.parametrize("names", COMPARED, ids=lambda n: "+".join(n))
def test_compare_json_is_strict(names):
    doc = strict_json(_run("compare", *(str(DATA / n) for n in names)))
    assert doc["rows"]


@slow_after(1)
@pytest.mark.parametrize("name", ONE_RANK)
def test_one_rank_steps_has_no_multi_rank_lines(name):
    result = CliRunner().invoke(app, ["steps", str(DATA / name)])
    assert result.exit_code == 0, result.output
    assert "clock" not in result.stdout and "straggler" not in result.stdout
    doc = strict_json(_run("steps", str(DATA / name)))
    assert doc["straggler"] is None and doc["waits_from_comm_time"] is None


@pytest.mark.slow
def test_two_rank_steps_keeps_them():
    result = CliRunner().invoke(app, ["steps", str(DATA / "ddp-2gpu-late-nsys")])
    assert "clock:" in result.stdout and "straggler" in result.stdout


def test_encoder_turns_every_missing_number_into_null():
    frame = pd.DataFrame({"x": [1.0, np.nan], "y": pd.array([1, None], dtype="Int64")})
    doc = {"nan": float("nan"), "inf": -math.inf, "np": np.float32("nan"), 1: np.int64(3), "rows": records(frame)}
    assert strict_json(dumps(doc)) == {"nan": None, "inf": None, "np": None, "1": 3,
                                   "rows": [{"x": 1.0, "y": 1}, {"x": None, "y": None}]}
