"""The columnar dataset (tracelab/dataset.py, `tracelab export parquet`): one Parquet part per
rank that reads back as the very frames and answers the traces give, a column at a time for
pandas, and a damaged part named in one line."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import tracelab
from tracelab.cli import app
from tracelab.ingest.dataset import export
from tracelab.core.errors import TraceFormatError

from helpers import run_cli

pytest.importorskip("pyarrow")
DATA = Path(__file__).resolve().parent / "data"


@pytest.mark.parametrize("folder", ["ddp-2gpu-late-torch", pytest.param("ddp-2gpu-late-nsys", marks=pytest.mark.slow),
                                    "ddp-2gpu-late-proton", pytest.param("gloo-2cpu-late", marks=pytest.mark.slow)])
def test_a_dataset_reads_back_as_the_traces(tmp_path, folder):
    parts = export([str(DATA / folder)], tmp_path / "ds")
    assert [p.relative_to(tmp_path / "ds").as_posix() for p in parts] == ["rank=0/part-0.parquet",
                                                                         "rank=1/part-0.parquet"]
    again, first = tracelab.load_many(tmp_path / "ds"), tracelab.load_many(DATA / folder)
    for a, b in zip(again, first):
        assert a.rank == b.rank and a.meta.rank_from == "dataset folder"
        pd.testing.assert_frame_equal(a.events, b.events)
        drop = ("path", "rank_from", "rank")
        # the meta round-trips exactly through the part's JSON (devices' index keys whole numbers again)
        assert {k: v for k, v in a.meta.to_dict().items() if k not in drop} == \
            {k: v for k, v in b.meta.to_dict().items() if k not in drop}


@pytest.mark.slow
def test_answers_from_the_dataset_equal_the_traces(tmp_path):
    """Who waits on whom and the breakdown, through the CLI, on the dataset and on the traces. A
    dataset keeps each rank's events, not the host's calls: a GPU gap idle for another stream is a
    dependency only beside its wait call (cudaStreamWaitEvent), so on the dataset that idle is
    `other`, the two together the same."""
    export([str(DATA / "ddp-2gpu-late-nsys")], tmp_path / "ds")
    run = CliRunner()
    for command in (["steps", "--format", "json"], ["breakdown", "--format", "csv"]):
        on_traces = run.invoke(app, [*command, str(DATA / "ddp-2gpu-late-nsys")])
        on_dataset = run.invoke(app, [*command, str(tmp_path / "ds")])
        assert on_traces.exit_code == on_dataset.exit_code == 0, on_dataset.output
        if command[0] == "breakdown":
            assert on_dataset.output == on_traces.output
            continue
        traced, stored = json.loads(on_traces.output), json.loads(on_dataset.output)
        moved = 0
        for a, b in zip(traced["steps"], stored["steps"], strict=True):
            assert b["idle_dependency_ns"] == 0
            assert b["idle_other_ns"] == a["idle_other_ns"] + a["idle_dependency_ns"]
            moved += a["idle_dependency_ns"]
            for row in (a, b):
                del row["idle_dependency_ns"], row["idle_other_ns"]
        assert moved > 0  # the traces' wait calls made some of it a dependency
        assert stored == traced
    steps = run.invoke(app, ["steps", "--format", "json", str(tmp_path / "ds")]).output
    assert json.loads(steps)["straggler"]["rank"] == 1


def test_one_column_of_every_rank_reads_with_pandas_alone(tmp_path):
    export([str(DATA / "ddp-2gpu-late-torch")], tmp_path / "ds")
    durations = pd.read_parquet(tmp_path / "ds", columns=["rank", "dur_ns"])  # rank: from the folder names
    events = tracelab.events(tracelab.load_many(DATA / "ddp-2gpu-late-torch"))
    assert list(durations.columns) == ["rank", "dur_ns"]
    got = durations.groupby(durations["rank"].astype(int))["dur_ns"].sum().to_dict()
    assert got == events.groupby("rank")["dur_ns"].sum().to_dict()


def test_a_damaged_part_is_one_error_naming_it(tmp_path, capsys):
    export([str(DATA / "gloo-2cpu-late")], tmp_path / "ds")
    part = tmp_path / "ds" / "rank=1" / "part-0.parquet"
    part.write_bytes(part.read_bytes()[: len(part.read_bytes()) // 2])
    with pytest.raises(TraceFormatError, match="cannot read it as Parquet") as caught:
        tracelab.load_many(tmp_path / "ds", workers=1)
    assert "rank=1/part-0.parquet" in str(caught.value)
    status, lines = run_cli(capsys, "breakdown", str(tmp_path / "ds"))
    assert status == 2 and len(lines) == 1 and lines[0].startswith("tracelab: error:") and "rank=1" in lines[0]


def test_export_refuses_to_replace_a_folder_without_force(tmp_path, capsys):
    (tmp_path / "ds").mkdir()
    status, lines = run_cli(capsys, "export", "parquet", str(DATA / "gloo-2cpu-late"), "-o", str(tmp_path / "ds"))
    assert status == 2 and len(lines) == 1 and "--force" in lines[0]
    result = CliRunner().invoke(app, ["export", "parquet", str(DATA / "gloo-2cpu-late"), "-o", str(tmp_path / "ds"),
                                      "--force"])
    assert result.exit_code == 0 and len(list((tmp_path / "ds").glob("rank=*/part-0.parquet"))) == 2
