"""Reports are DataFrame -> DataFrame analyses and render(...) -> str renderers: once the
loading layer (tracelab.ingest.inputs, tracelab.load) has read the files, labelling, comparing and
rendering touch no file or folder."""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

import tracelab
from tracelab.ingest import inputs
from tracelab.reports.align import align as compare
from tracelab.reports.html import html
from tracelab.reports import ranks as session
from tracelab.reports.compare import compare_text as text

DATA = Path(__file__).resolve().parent / "data"
RUNS = [DATA / "train-2gpu-torch", DATA / "train-2gpu-proton"]


@contextmanager
def _no_filesystem():
    """Any look at a path outside the Python installation (where libraries keep their own
    files) fails the test."""
    def guard(original):
        def check(path, *args, **kwargs):
            if not str(path).startswith((sys.prefix, sys.base_prefix)):
                raise AssertionError(f"a report touched the filesystem: {path}")
            return original(path, *args, **kwargs)
        return check

    with pytest.MonkeyPatch.context() as m:
        for name in ("exists", "is_dir", "is_file", "stat", "open", "read_text", "read_bytes", "iterdir",
                     "glob", "rglob"):
            m.setattr(Path, name, guard(getattr(Path, name)))
        for name in ("exists", "isdir", "isfile"):
            m.setattr(os.path, name, guard(getattr(os.path, name)))
        yield


@pytest.mark.slow
def test_label_compare_and_render_read_no_file() -> None:
    groups = [tracelab.load_many(r) for r in RUNS]
    info = inputs.run_info(RUNS)
    with _no_filesystem():
        labelled = session.label(RUNS, [True, True], groups)
        c = compare.comparison(labelled, "kernel")
        text.compare_tables(c, ["kernel"], 5)
        page = html.render(labelled, [str(r) for r in RUNS], info, "t")
    assert [i.label for i in labelled] == ["torch/rank0", "torch/rank1", "proton/rank0", "proton/rank1"]
    assert page.startswith("<!DOCTYPE html>") and info["workload"] in page


@pytest.mark.parametrize("folders, names", [
    ([False, False], ["x/a", "y/a"]),                  # files: their stems
    ([True, True], ["x/a.json.gz", "y/a.json.gz"]),    # folders: their whole names
])
def test_folders_come_from_the_caller(folders, names) -> None:
    """Whether a path is a folder is the caller's word: the paths need not exist."""
    run = tracelab.load_many(DATA / "train-2gpu-torch")
    got = session.label(["/x/a.json.gz", "/y/a.json.gz"], folders, [run, run])
    assert [i.label for i in got] == [f"{n}/rank{r}" for n in names for r in (0, 1)]


def test_the_loading_layer_looks_at_the_paths() -> None:
    groups = [tracelab.load_many(r) for r in RUNS]
    assert [i.label for i in inputs.label_inputs(RUNS, groups)] == \
        [i.label for i in session.label(RUNS, [True, True], groups)]
    assert inputs.run_info(RUNS)["workload"] == "train"
    assert inputs.run_info([RUNS[0] / "rank0.pt.trace.json.gz"]) is None
