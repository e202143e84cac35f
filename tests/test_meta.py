"""Meta (tracelab/meta.py): a trace's per-file facts, typed and checked where they enter (a
parser's dict, a dataset part's metadata, a cache entry), and kept exactly through a dataset
part and the Parquet cache: the same keys, in the same order, equal values."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import run_cli

import tracelab
from tracelab.ingest import cache
from tracelab.core.errors import TraceFormatError
from tracelab.core.note import Note
from tracelab.core.schema import Meta, Profile

DATA = Path(__file__).parent / "data"
GOOD = {"path": "rank0.json", "source": "torch", "session_start_ns": 5, "rank": 0, "world_size": 2,
        "devices": {0: {"name": "NVIDIA H100"}}, "trace_start_epoch_ns": None,
        "notes": [{"code": "rank_assumed", "values": {}, "text": "neither the file nor its name gives its rank: shown as rank 0"}]}

# key -> a value of the wrong type for it
BAD = {
    "path null": ("path", None), "source a number": ("source", 3), "rank text": ("rank", "zero"),
    "rank a bool": ("rank", True), "world_size a fraction": ("world_size", 2.5), "devices a list": ("devices", [0]),
    "devices keyed by a word": ("devices", {"gpu": {}}), "notes one text": ("notes", "a note"),
    "notes of numbers": ("notes", [1]), "trace_start_epoch_ns text": ("trace_start_epoch_ns", "1700000000"),
    "scope_metrics a list": ("scope_metrics", []), "graph_capture_calls null": ("graph_capture_calls", None),
    "steps a fraction": ("steps", 1.5),
    "notes of an unknown code": ("notes", [{"code": "no_such_note", "values": {}}]),
    "notes missing a value": ("notes", [{"code": "ranks_on_one_clock", "values": {}}]),
    "notes with values a list": ("notes", [{"code": "rank_assumed", "values": []}]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_wrong_type_names_the_file_and_the_key(case):
    key, value = BAD[case]
    with pytest.raises(TraceFormatError) as e:
        Meta.of({**GOOD, key: value}, "rank0.json")
    assert str(e.value).startswith("rank0.json: ") and f"meta's {key}" in str(e.value)


def test_notes_an_older_tracelab_wrote_as_text_read_as_text_notes():
    meta = Meta.of({**GOOD, "notes": ["a note", "another"]})
    assert meta.notes == [Note("text", {"text": "a note"}), Note("text", {"text": "another"})]
    assert [n.text for n in meta.notes] == ["a note", "another"]
    assert Meta.of(json.loads(json.dumps(meta.to_dict()))) == meta


def test_the_good_dict_is_typed_and_its_other_keys_kept_in_order():
    meta = Meta.of(GOOD)
    assert (meta.rank, meta.world_size, meta.devices[0]["name"], meta.notes) == (0, 2, "NVIDIA H100", [Note("rank_assumed")])
    assert meta.extras == {"session_start_ns": 5} and meta.pid is None and meta.odd_gemms == []
    assert list(meta.to_dict()) == list(GOOD) and meta.to_dict() == GOOD  # defaults never written
    meta.provenance = "rank0.provenance.json"  # a key set later comes last, as a dict's would
    assert list(meta.to_dict()) == [*GOOD, "provenance"]
    back = Meta.of(json.loads(json.dumps(meta.to_dict())))  # devices' keys are text in JSON
    assert back == meta and back.devices == {0: {"name": "NVIDIA H100"}} and back.to_dict() == meta.to_dict()
    assert Profile(DATA, GOOD).meta == Meta.of(GOOD)  # a dict given to a Profile is checked into a Meta
    copy = meta.but(rank=1)
    assert (copy.rank, meta.rank, list(copy.to_dict())) == (1, 0, list(meta.to_dict()))
    with pytest.raises(TraceFormatError):
        meta.but(rank="one")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRACELAB_CACHE", raising=False)
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    monkeypatch.setattr(cache, "RACY_S", 0.05)
    return tmp_path / "cache"


@pytest.mark.parametrize("folder", ["ddp-2gpu-late-torch", "decode-1gpu-nsys", "roofline-1gpu-proton"])
def test_the_parquet_cache_keeps_the_meta_exactly(folder, cache_dir, tmp_path, monkeypatch):
    run = Path(shutil.copytree(DATA / folder, tmp_path / folder))
    time.sleep(0.15)  # settled: past cache.RACY_S
    first = tracelab.load_many(run, workers=1)
    for parser in ("chrome", "nsys", "hatchet"):
        monkeypatch.setattr(f"tracelab.parsers.{parser}.read", lambda *_: pytest.fail("parsed again"))
    again = tracelab.load_many(run, workers=1)
    assert [p.meta for p in again] == [p.meta for p in first]
    assert [p.meta.to_dict() for p in again] == [p.meta.to_dict() for p in first]
    assert [list(p.meta.to_dict()) for p in again] == [list(p.meta.to_dict()) for p in first]
    stored = [json.loads((e / "meta.json").read_text()) for e in cache_dir.iterdir() if (e / "meta.json").exists()]
    assert sorted(m["path"] for doc in stored for m in doc) == sorted(p.meta.path for p in first)


def _part(tmp_path: Path, meta: dict) -> Path:
    """A dataset part of one real rank (tracelab export parquet), its metadata replaced by `meta`."""
    from tracelab.ingest.dataset import export
    from tracelab.parsers.parquet import META_KEY

    path, = export([str(DATA / "decode-1gpu-torch")], tmp_path / "ds")
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, META_KEY: json.dumps(meta).encode()}), path)
    return path


@pytest.mark.parametrize("meta, key", [({"source": "torch", "world_size": "two"}, "world_size"),
                                       ({"source": "torch", "notes": "read me"}, "notes"),
                                       ({"source": "torch", "world_size": 2}, None)])
def test_a_dataset_part_with_a_wrong_meta_is_one_line(meta, key, tmp_path, capsys):
    path = _part(tmp_path, meta)
    status, err = run_cli(capsys, "breakdown", str(path.parent.parent), "--format", "json")
    if key is None:  # the good part beside the bad ones
        assert status == 0, err
        assert tracelab.load(path).meta.world_size == 2
        return
    assert status == 2 and len(err) == 1 and "Traceback" not in "\n".join(err)
    assert err[0].startswith(f"tracelab: error: {path}: ") and f"meta's {key}" in err[0], err


def test_a_dataset_part_an_older_tracelab_wrote_keeps_its_notes_words(tmp_path):
    """A part whose meta holds notes as text (before notes had codes) reads as text notes, said as before."""
    path = _part(tmp_path, {"source": "nsys", "world_size": 2, "notes": ["120 of 120 CUDA-graph node rows were"]})
    assert tracelab.load(path).meta.notes == [Note("text", {"text": "120 of 120 CUDA-graph node rows were"})]
    session = tracelab.Session.open([str(path)])
    assert [n.text for n in session.notes] == [f"{path}: 120 of 120 CUDA-graph node rows were"]
