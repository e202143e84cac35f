"""Issue 29's corpus, folders: a run folder's own files (run.json, the ranks' results), the
Parquet cache's entries and the links among the inputs. Each case keeps the promise
(tests/promise.py); a cache entry that does not validate is a miss, never a rank dropped."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import malformed as m
from promise import assert_refused, one_process, spread

TORCH2 = m.DATA / "decode-2gpu-torch"
PROTON1 = m.DATA / "decode-1gpu-proton"
ALLREDUCE = m.DATA / "allreduce-2gpu-torch"


def _run_json(doc_change, src=TORCH2):
    def make(tmp: Path) -> Path:
        run = Path(shutil.copytree(src, tmp / "run"))
        doc = json.loads((run / "run.json").read_text())
        doc = doc_change(doc)
        (run / "run.json").write_text(json.dumps(doc))
        return run
    return make


def _set(**fields):
    def change(doc):
        doc.update(fields)
        return doc
    return change


def _config(**fields):
    def change(doc):
        doc.setdefault("config", {}).update(fields)
        return doc
    return change


def _rank_file(name: str, content: str, src=ALLREDUCE, drop_results: bool = True):
    def make(tmp: Path) -> Path:
        run = Path(shutil.copytree(src, tmp / "run"))
        if drop_results:
            doc = json.loads((run / "run.json").read_text())
            doc.pop("results", None)
            doc.pop("figures", None)
            (run / "run.json").write_text(json.dumps(doc))
        (run / name).write_text(content)
        return run
    return make


RUN_FILES = {
    "run.json a list": (_run_json(lambda d: [1, 2]), "not a JSON object"),
    "run.json a number": (_run_json(lambda d: 5), "not a JSON object"),
    "run.json null": (_run_json(lambda d: None), "not a JSON object"),
    "run.json results a string": (_run_json(_set(results="x")), "results"),
    "run.json results a list": (_run_json(_set(results=[1])), "results"),
    "run.json results of a rank a list": (_run_json(_set(results={"0": [1]})), "results['0']"),
    "run.json results rows a number": (_run_json(_set(results={"0": {"rows": 5}})), "rows"),
    "run.json results sample_s text": (_run_json(_set(results={"0": {"sample_s": ["a"]}})), "sample_s"),
    "run.json results sample_s NaN": (_run_json(_set(results={"0": {"sample_s": [float("nan")]}})), "sample_s"),
    "run.json figures a string": (_run_json(_set(figures="x")), "figures"),
    "run.json devices an object": (_run_json(_set(devices={"name": "H100"})), "devices"),
    "run.json devices holding a number": (_run_json(_set(devices=[5])), "devices[0]"),
    "run.json device name a list": (_run_json(_set(devices=[{"name": ["H100"]}])), "devices[0].name"),
    "run.json workload a number": (_run_json(_set(workload=5)), "workload"),
    "run.json backend a list": (_run_json(_set(backend=["torch"])), "backend"),
    "run.json profiled_steps text": (_run_json(_set(profiled_steps="3")), "profiled_steps"),
    "run.json profiled_steps negative": (_run_json(_set(profiled_steps=-3)), "profiled_steps"),
    "run.json config a list": (_run_json(_set(config=[1])), "config"),
    "run.json config.samples text": (_run_json(_config(samples="x")), "config.samples"),
    "run.json config.new_tokens 1e300": (_run_json(_config(new_tokens=1e300)), "config.new_tokens"),
    "run.json not JSON": (_run_json(lambda d: d, src=TORCH2), ""),  # replaced below
    "rank0.figures.json a list": (_rank_file("rank0.figures.json", "[1]"), "rank0.figures.json"),
    "rank0.figures.json not JSON": (_rank_file("rank0.figures.json", "{"), "rank0.figures.json"),
    "rank0.figures.json rows a string": (_rank_file("rank0.figures.json", '{"rows": "x"}'), "rows"),
    "rank1.results.json a string": (_rank_file("rank1.results.json", '"x"'), "rank1.results.json"),
    "rank1.results.json step_ms of text": (_rank_file("rank1.results.json", '{"rows": [{"step_ms": ["a"]}]}'),
                                           "step_ms"),
}


def _not_json(tmp: Path) -> Path:
    run = Path(shutil.copytree(TORCH2, tmp / "run"))
    (run / "run.json").write_bytes(b"{\"workload\": ")
    return run


RUN_FILES["run.json not JSON"] = (_not_json, "cannot read it as JSON")


@pytest.mark.parametrize("case", spread(list(RUN_FILES), 4))
def test_run_folder_file_checked(case, tmp_path, capsys, monkeypatch):
    one_process(monkeypatch)
    make, fragment = RUN_FILES[case]
    run = make(tmp_path)
    line = assert_refused(capsys, tmp_path, ["report", str(run), "-o", str(tmp_path / "r.html")], fragment)
    assert str(run) in line


def _link(target: str, name: str = "rank2.pt.trace.json"):
    def make(tmp: Path) -> Path:
        run = Path(shutil.copytree(TORCH2, tmp / "run"))
        os.symlink(target, run / name)
        return run
    return make


LINKS = {
    "dangling link among a folder's traces": (_link("nowhere.json"), "symbolic link to nothing"),
    "looping link among a folder's traces": (_link("rank2.pt.trace.json"), "loop"),
    "link to a missing folder's file": (_link("/nonexistent/rank2.json.gz"), "symbolic link to nothing"),
    "two links looping": (lambda tmp: (_link("b.json", "a.json")(tmp), os.symlink("a.json", tmp / "run" / "b.json"),
                                       tmp / "run")[-1], "loop"),
}


@pytest.mark.parametrize("command", ["breakdown", "steps"])
@pytest.mark.parametrize("case", spread(list(LINKS), 2))
def test_broken_link_is_one_line(case, command, tmp_path, capsys, monkeypatch):
    one_process(monkeypatch)
    make, fragment = LINKS[case]
    run = make(tmp_path)
    assert_refused(capsys, tmp_path, [command, str(run)], fragment)


def test_broken_link_given_by_name(tmp_path, capsys):
    os.symlink("nowhere.json", tmp_path / "rank0.json")
    assert_refused(capsys, tmp_path, ["breakdown", str(tmp_path / "rank0.json")], "symbolic link to nothing")


# ---- the cache: an entry that does not validate is a miss ---------------------------------

BAD_METAS = {"[]": "[]", "a rank as text": '[{"rank": "zero", "path": "p", "source": "torch"}]',
             "an object": '{"rank": 0}', "null": "null", "not JSON": "[{", "a list of numbers": "[1]",
             "no path": '[{"rank": 0, "source": "torch"}]',
             "rank 1.5": '[{"rank": 1.5, "path": "p", "source": "torch"}]',
             "two metas for one part": None, "empty file": ""}


@pytest.fixture
def cached_run(tmp_path, monkeypatch):
    """A 2-rank run folder whose traces are cached (any size), and the cache folder."""
    from tracelab.ingest import cache

    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    monkeypatch.setattr(cache, "RACY_S", -1.0)
    monkeypatch.setenv("TRACELAB_CACHE", "1")
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(tmp_path / "cache"))
    run = Path(shutil.copytree(TORCH2, tmp_path / "run"))
    return run, tmp_path / "cache"


def _breakdown_ranks(capsys, run: Path) -> list[str]:
    from tracelab.ingest.loading import load_many

    return [str(p.rank) for p in load_many(run, workers=1)]


@pytest.mark.parametrize("case", spread(list(BAD_METAS), 4))
def test_cache_entry_that_does_not_validate_is_a_miss(case, cached_run, capsys):
    pytest.importorskip("pyarrow")
    run, cache_dir = cached_run
    assert _breakdown_ranks(capsys, run) == ["0", "1"]
    entries = sorted(p for p in cache_dir.iterdir() if not p.name.startswith("."))
    assert len(entries) == 2
    meta = entries[0] / "meta.json"
    if BAD_METAS[case] is None:
        meta.write_text(json.dumps(json.loads(meta.read_text()) * 2))
    else:
        meta.write_text(BAD_METAS[case])
    assert _breakdown_ranks(capsys, run) == ["0", "1"]  # the rank is parsed again, not dropped
    good = json.loads(meta.read_text())  # and the entry written again, right
    assert isinstance(good, list) and len(good) == 1 and isinstance(good[0]["rank"], int)
    assert _breakdown_ranks(capsys, run) == ["0", "1"]


def test_cache_part_missing_is_a_miss(cached_run, capsys):
    pytest.importorskip("pyarrow")
    run, cache_dir = cached_run
    _breakdown_ranks(capsys, run)
    entry = next(p for p in cache_dir.iterdir() if not p.name.startswith("."))
    (entry / "0.parquet").write_bytes(b"PAR1 damaged")
    assert _breakdown_ranks(capsys, run) == ["0", "1"]


def test_tree_diff_of_an_empty_frame_name(tmp_path, capsys):
    pytest.importorskip("hatchet")

    def change(doc):
        doc[0]["children"][0]["frame"]["name"] = ""
    path = m.hatchet(change)(tmp_path)
    assert_refused(capsys, tmp_path, ["compare", "--tree", str(path), str(PROTON1 / "rank0.hatchet")], "empty name")
