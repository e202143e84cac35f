"""--top has one meaning in every command: the N largest rows, 0 all of them, negative refused."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tracelab
from tracelab.cli import app

RUN = Path(__file__).resolve().parent / "data" / "train-2gpu-torch"
FILES = [str(RUN / f"rank{r}.pt.trace.json.gz") for r in (0, 1)]


def _json(*args: str) -> dict | list:
    result = CliRunner().invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _kernels_per_rank() -> dict[int, int]:
    return {p.rank: p.events["kernel"].nunique() for p in tracelab.load_many(FILES)}


def test_breakdown_top_0_is_every_kernel():
    doc = _json("breakdown", *FILES, "--top", "0")
    rows = doc["breakdown"]
    per_rank = {}
    for row in rows:
        per_rank[row["rank"]] = per_rank.get(row["rank"], 0) + 1
    assert per_rank == _kernels_per_rank()
    assert all(row["kernel"] != "(rest)" for row in rows)


def test_compare_top_0_is_every_kernel():
    rows = _json("compare", *FILES, "--by", "kernel", "--top", "0")["rows"]
    kernels = set().union(*(set(p.events["kernel"].astype(str)) for p in tracelab.load_many(FILES)))
    assert len(rows) == len(kernels)


@pytest.mark.parametrize("command", [["breakdown", *FILES], ["compare", *FILES], ["run", "train", "--ranks", "1"]])
def test_negative_top_is_refused_before_any_work(command):
    result = CliRunner().invoke(app, [*command, "--top", "-1"])
    assert result.exit_code == 2 or "--top" in str(result.exception), result.output
    assert "--top" in (result.output + str(result.exception))
