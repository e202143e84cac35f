"""A Kineto trace with no kernel, memcpy or memset may still hold device activity tracelab does
not read (CUPTI range-profiler kernels, an MTIA accelerator's events): it is never called a trace
"without GPU activity"; a note names each such category with its count (parsers/_kineto_unread)."""
from __future__ import annotations

import gzip
import json
import random

import pytest

from tracelab import load
from tracelab.core.errors import TraceFormatError
from tracelab.core.note import texts
from tracelab.parsers._kineto_unread import unread_counts

from helpers import shared_trace
from helpers import run_cli_output
from malformed import kineto_doc, write_json

CUPTI = "hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz"


def _cats(doc: dict) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in doc["traceEvents"]:
        counts[e.get("cat")] = counts.get(e.get("cat"), 0) + 1
    return counts


@pytest.mark.slow
def test_cupti_profiler_ranges_are_noted_not_taken_for_no_gpu(capsys):
    path = shared_trace(CUPTI)
    n = _cats(json.loads(gzip.decompress(path.read_bytes())))["cuda_profiler_range"]  # 77, counted from the JSON
    profile = load(path)
    assert [note.values for note in profile.meta.notes] == [{"events": n, "category": "cuda_profiler_range"}]
    [text] = texts(profile.meta.notes)
    assert text.startswith(f"{n:,} cuda_profiler_range events") and "not the kernels' run times" in text
    assert (profile.events["kind"] == "cpu_op").all()  # read as CPU operators, the ranges no rows
    status, out, err = run_cli_output(capsys, "breakdown", str(path))
    assert status == 0
    assert "no GPU kernel, memcpy or memset in this trace" in " ".join(out.split())
    assert "no GPU activity" not in out
    assert f"note: {path}: {n} cuda_profiler_range events" in err


def _cpu_trace_with(tmp_path, cat: str, n: int, compact: bool):
    """The good trace's CPU operators only, plus n events of `cat` (no GPU rows)."""
    doc = kineto_doc()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") in ("cpu_op", "user_annotation") or "cat" not in e]
    t0 = min(e["ts"] for e in doc["traceEvents"] if "ts" in e and e.get("cat"))
    doc["traceEvents"] += [{"ph": "X", "cat": cat, "name": "event_wait", "pid": 17, "tid": 3, "ts": t0 + i, "dur": 1.5,
                            "args": {"stream": 108}} for i in range(n)]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(doc, separators=(",", ":") if compact else None))
    return path


@pytest.mark.parametrize("cat", ["mtia_ccp_events", "hpu_op", "cuda_profiler_range"])
def test_each_unread_category_is_counted_in_any_json_spacing(tmp_path, cat):
    n = random.Random(cat).randint(3, 40)
    for compact in (False, True):
        path = _cpu_trace_with(tmp_path, cat, n, compact)
        assert unread_counts(path.read_bytes()) == {cat: _cats(json.loads(path.read_bytes()))[cat]} == {cat: n}
        notes = texts(load(path).meta.notes)
        assert len([x for x in notes if cat in x]) == 1 and notes[0].startswith(f"{n} {cat} events")


def test_a_trace_with_kernels_gets_no_such_note(tmp_path):
    doc = kineto_doc()
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    doc["traceEvents"].append({**kernels[0], "cat": "cuda_profiler_range"})  # beside real kernels: not said
    profile = load(write_json(tmp_path, "rank0.pt.trace.json", doc))
    assert (profile.events["kind"] == "kernel").sum() == len(kernels)
    assert not [x for x in texts(profile.meta.notes) if "cuda_profiler_range" in x]


def test_only_unread_device_events_is_refused_with_the_reason(tmp_path):
    doc = {"traceEvents": [{"ph": "X", "cat": "mtia_ccp_events", "name": "dma_request", "pid": 9, "tid": 801,
                            "ts": 1000 + i, "dur": 8.1, "args": {"size": 16}} for i in range(5)]}
    path = write_json(tmp_path, "rank0.pt.trace.json", doc)
    with pytest.raises(TraceFormatError, match=r"nothing to report; 5 mtia_ccp_events events .* MTIA accelerator"):
        load(path)
