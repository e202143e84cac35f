"""Where the memory went (issue 32): the memory frame of Kineto `[memory]` events, nsys
CUDA_GPU_MEMORY_USAGE_EVENTS and snapshot pickles; `tracelab memory` per step and rank against a
plain walk of the raw JSON; the findings (imbalance on a 2-rank CPU capture where rank 1 holds
16 MiB more, and not on its twin); broken inputs; a pickle that would run code."""
from __future__ import annotations

import gzip
import itertools
import json
import pickle
import shutil
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracelab
from tracelab.ingest import cache
from tracelab.core import schema
from tracelab.core.errors import TracelabError, TraceFormatError
from tracelab.reports.memory import across, memory as analysis
from tracelab.reports.memory.memory_text import JSON_STEP_KEYS

from helpers import (slow_after, memory_digest, memory_snapshot, memory_steps, nsys_with_memory, run_cli, run_cli_output,
                     strict_json)

DATA = Path(__file__).parent / "data"
IMBALANCED = DATA / "train-2cpu-memory-torch"
EQUAL = DATA / "train-2cpu-memory-equal-torch"


@lru_cache(maxsize=None)
def _doc(path: Path) -> dict:
    """The trace's JSON, once per test process: the walks only read it, _edited copies what it changes."""
    return json.loads(gzip.decompress(path.read_bytes()))


def _raw(path: Path) -> list[dict]:
    return _doc(path)["traceEvents"]


def _walk(path: Path) -> dict:
    """Per step N (the `step N` range), from the raw events alone: allocated at start and end,
    the peak; and the blocks live at the rank's highest peak, per address replayed."""
    events = _raw(path)
    memory = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    steps = {int(e["name"].split()[1]): (e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("cat") == "user_annotation" and e["name"].startswith("step ")}
    out = {}
    for n, (t0, t1) in sorted(steps.items()):
        mine = [m for m in memory if t0 <= m["ts"] <= t1]
        totals = [m["args"]["Total Allocated"] for m in mine]
        start = totals[0] - mine[0]["args"]["Bytes"]
        out[n] = {"start": start, "end": totals[-1], "peak": max([start, *totals])}
    return {"steps": out, "memory": memory}


def _live_at(memory: list[dict], peak_bytes: int) -> int:
    """Bytes of the blocks allocated and not freed when the total first reaches `peak_bytes`."""
    live: dict[int, int] = {}
    for m in memory:
        a = m["args"]
        if a["Bytes"] > 0:
            live[a["Addr"]] = a["Bytes"]
        else:
            live.pop(a["Addr"], None)
        if a["Total Allocated"] == peak_bytes:
            return sum(live.values())
    raise AssertionError("peak not reached")


@slow_after(1)
@pytest.mark.parametrize("folder", [IMBALANCED, EQUAL])
def test_memory_frame_holds_every_memory_event(folder):
    for rank in (0, 1):
        path = folder / f"rank{rank}.pt.trace.json.gz"
        raw = [e for e in _raw(path) if e.get("name") == "[memory]"]
        mem = tracelab.load(path).memory
        assert len(mem) == len(raw) > 100
        assert int(mem["bytes"].sum()) == sum(e["args"]["Bytes"] for e in raw)
        assert sorted(mem["total_allocated_bytes"].astype(int)) == sorted(e["args"]["Total Allocated"] for e in raw)
        assert mem["total_reserved_bytes"].isna().all()  # the CPU allocator caches nothing
        assert (mem["device"] == -1).all()
        assert {"forward", "backward", "forward/layers.0"} <= set(mem["scope"])
        assert mem["step"].dropna().astype(int).unique().tolist() == [0, 1, 2]


@pytest.mark.slow  # about 1 s of CPU here: the default run stays under 90 s
def test_steps_against_a_walk_of_the_json(capsys):
    status, out, _ = run_cli_output(capsys, "memory", str(IMBALANCED), "--format", "json", "--top", "3")
    assert status == 0
    doc = json.loads(out)
    assert list(doc) == ["steps"] and len(doc["steps"]) == 6
    for row in doc["steps"]:
        assert list(row) == [*JSON_STEP_KEYS, "top"]
        want = _walk(IMBALANCED / f"rank{row['rank']}.pt.trace.json.gz")["steps"][row["step"]]
        assert (row["allocated_start_bytes"], row["allocated_end_bytes"], row["peak_allocated_bytes"]) == (
            want["start"], want["end"], want["peak"])
        assert row["reserved_bytes"] is None and row["held_back_bytes"] is None
        assert {t["by"] for t in row["top"]} <= {"scope", "op", "before_trace"}


def test_live_at_the_peak_against_a_replay():
    path = IMBALANCED / "rank1.pt.trace.json.gz"
    walk = _walk(path)
    peak = max(s["peak"] for s in walk["steps"].values())
    digest = analysis.rank_memory(tracelab.load(path).memory, None, 1, top=None)
    top = digest.top[digest.top["step"] == digest.steps["step"].iloc[0]]
    for by in ("scope", "op"):
        assert top.loc[top["by"] == by, "bytes"].sum() == _live_at(walk["memory"], peak)
    scopes = dict(zip(top.loc[top["by"] == "scope", "name"], top.loc[top["by"] == "scope", "bytes"]))
    assert scopes["extra_memory"] == 16 * 2**20  # --extra-memory-mb 1:16
    assert top.loc[top["by"] == "before_trace", "bytes"].item() == 0  # CPU totals count the profiled window only


@pytest.mark.slow
def test_imbalance_found_where_one_rank_holds_more_and_not_on_its_twin(capsys):
    status, out, _ = run_cli_output(capsys, "memory", str(IMBALANCED))
    assert status == 0 and "rank 1 peaks at 26.77 MiB of memory, 149% above the other ranks' median" in out
    status, out, _ = run_cli_output(capsys, "memory", str(EQUAL))
    assert status == 0 and "finding:" not in out


@pytest.mark.slow
def test_every_command_ends_on_the_memory_finding(capsys):
    status, out, _ = run_cli_output(capsys, "breakdown", str(IMBALANCED))
    assert status == 0 and "rank 1 peaks at 26.77 MiB" in out


@pytest.mark.slow
def test_compare_of_two_runs_peaks(capsys):
    status, out, _ = run_cli_output(capsys, "memory", str(EQUAL), str(IMBALANCED), "--format", "csv")
    assert status == 0
    steps = pd.read_csv(__import__("io").StringIO(out))
    assert set(steps["input"]) == {str(EQUAL), str(IMBALANCED)}
    digests = [(str(f), {r: analysis.rank_memory(tracelab.load(f / f"rank{r}.pt.trace.json.gz").memory, None, r)
                         for r in (0, 1)}) for f in (EQUAL, IMBALANCED)]
    runs = across.combine(digests).runs.set_index(["input", "rank"])
    assert runs.loc[(str(IMBALANCED), 1), "delta_bytes"] == 16 * 2**20
    assert runs.loc[(str(IMBALANCED), 0), "delta_bytes"] == 0


def _edited(tmp_path: Path, edit) -> Path:
    """The imbalanced run's rank 0 with edit() applied to its first memory event's args (a copy of that event)."""
    doc = _doc(IMBALANCED / "rank0.pt.trace.json.gz")
    events = doc["traceEvents"]
    at = next(i for i, e in enumerate(events) if e.get("name") == "[memory]")
    first = {**events[at], "args": dict(events[at]["args"])}
    edit(first["args"])
    out = tmp_path / "rank0.pt.trace.json"
    out.write_text(json.dumps({**doc, "traceEvents": [*events[:at], first, *events[at + 1:]]}))
    return out


@pytest.mark.parametrize("edit, says", [
    (lambda a: a.update({"Bytes": "many"}), "Bytes"),
    (lambda a: a.update({"Total Allocated": -5}), "Total Allocated -5 is negative"),
    (lambda a: a.update({"Total Reserved": 1.5}), "Total Reserved"),
    (lambda a: a.pop("Bytes"), "no Bytes"),
])
def test_broken_memory_events_are_one_line(tmp_path, capsys, edit, says):
    path = _edited(tmp_path, edit)
    status, err = run_cli(capsys, "memory", str(path))
    assert status == 2 and len(err) == 1 and str(path) in err[0] and says in err[0], err


def test_cache_keeps_the_memory_frame(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    monkeypatch.setattr(cache, "RACY_S", -1.0)
    path = tmp_path / "rank0.pt.trace.json.gz"
    shutil.copy(IMBALANCED / "rank0.pt.trace.json.gz", path)
    fresh = tracelab.load(path).memory
    assert any((tmp_path / "cache").glob("*/0.memory.parquet"))
    cached = tracelab.load(path).memory
    pd.testing.assert_frame_equal(fresh, cached)
    schema.validate_memory(cached)


@pytest.mark.slow
def test_traces_without_memory_say_so(capsys):
    status, out, _ = run_cli_output(capsys, "memory", str(DATA / "ddp-2gpu-equal-proton"))
    assert status == 0 and "proton records no memory events" in out
    status, out, _ = run_cli_output(capsys, "memory", str(DATA / "gloo-2cpu-equal"), "--format", "json")
    doc = json.loads(out)
    assert status == 0 and doc["steps"] == [] and {n["code"] for n in doc["notes"]} == {"no_memory_events"}


def test_allocator_calls_from_the_host_frame():
    """graph-1gpu: 15 cudaMalloc and 3 cudaFree (which synchronise), torch and nsys alike."""
    for path in (DATA / "graph-1gpu-torch/rank0.pt.trace.json.gz", DATA / "graph-1gpu-nsys/rank0.sqlite"):
        host = tracelab.load(path).host
        calls = analysis.AllocatorCalls(host).between(int(host["start_ns"].min()), int(host["start_ns"].max()))
        assert (calls["alloc_calls"], calls["alloc_sync_calls"]) == (18, 3), path
        mask = analysis.is_allocator(host)
        assert calls["alloc_ns"] == int(host.loc[mask, "dur_ns"].sum())


# ---- nsys: CUDA_GPU_MEMORY_USAGE_EVENTS -----------------------------------------------------------



NSYS_ROWS = [(-5_000, 0x1000, 2**30, 2, 0),  # before the capture: weights' segment
             (1_000, 0x9000, 2**20, 1, 0),  # pinned host: not the GPU's
             (2_000, 0x5000, 512 * 2**20, 2, 0), (3_000, 0x6000, 64 * 2**20, 2, 0), (4_000, 0x5000, 512 * 2**20, 2, 1)]


@pytest.mark.slow
def test_nsys_memory_is_reserved_only(tmp_path, capsys):
    path = nsys_with_memory(tmp_path, NSYS_ROWS)
    mem = tracelab.load(path).memory
    assert mem["total_allocated_bytes"].isna().all()
    assert mem["total_reserved_bytes"].astype(int).tolist() == [2**30, 2**30 + 512 * 2**20, 2**30 + 576 * 2**20,
                                                                  2**30 + 64 * 2**20]
    status, out, _ = run_cli_output(capsys, "memory", str(path), "--format", "json")
    assert status == 0
    row = json.loads(out)["steps"][0]
    assert row["peak_allocated_bytes"] is None and row["reserved_bytes"] == 2**30 + 576 * 2**20
    status, out, _ = run_cli_output(capsys, "memory", str(path))
    assert "allocated unknown" in out


def test_nsys_broken_memory_table_is_one_line(tmp_path, capsys):
    path = nsys_with_memory(tmp_path, [(0, 1, 4096, 2, 7)])
    status, err = run_cli(capsys, "memory", str(path))
    assert status == 2 and len(err) == 1 and "memoryOperationType" in err[0]


# ---- snapshot pickles -----------------------------------------------------------------------------



def test_snapshot_replayed(tmp_path):
    path = tmp_path / "rank0.memory.pickle"
    path.write_bytes(pickle.dumps(memory_snapshot(), protocol=4))
    mem = tracelab.load(path).memory
    mib = 2**20
    assert mem["bytes"].tolist() == [8 * mib, 2 * mib, -2 * mib]
    assert mem["total_allocated_bytes"].astype(int).tolist() == [12 * mib, 14 * mib, 12 * mib]  # 4 MiB from before
    assert mem["total_reserved_bytes"].astype(int).tolist() == [20 * mib] * 3
    assert mem["time_ns"].tolist() == [0, 10_000, 20_000]
    assert mem["op"].iloc[0] == "forward (lm.py:60)" and mem["scope"].iloc[0] == "train.py:step/lm.py:forward"
    digest = analysis.rank_memory(mem, None, 0)
    row = digest.steps.iloc[0]
    assert (row["peak_allocated_bytes"], row["reserved_bytes"], row["held_back_bytes"]) == (14 * mib, 20 * mib, 6 * mib)
    before = digest.top[digest.top["by"] == "before_trace"]["bytes"].item()
    assert before == 4 * mib


@pytest.mark.parametrize("name, rank", [("snap.pickle", None), ("rank3.memory.pickle", 3)])
def test_a_snapshot_without_a_rank_is_said_to_be_a_snapshot(capsys, tmp_path, name, rank):
    """A snapshot whose name gives no rank is said as what it is (a snapshot with no rank), never
    "shown as rank 0" as if a rank of the job; one whose name gives a rank has it and no note."""
    path = tmp_path / name
    path.write_bytes(pickle.dumps(memory_snapshot(), protocol=4))
    status, out, err = run_cli_output(capsys, "memory", str(path), "--format", "json")
    assert status == 0, err
    assert {s["rank"] for s in json.loads(out)["steps"]} == {0 if rank is None else rank}
    assert "shown as rank 0" not in err
    assert ("a memory snapshot with no rank" in err) is (rank is None) and (str(path) in err) is (rank is None)


class _Boom:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        import os
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused(tmp_path, capsys):
    marker = tmp_path / "ran"
    path = tmp_path / "rank0.memory.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[_Boom(str(marker))]]}, protocol=4))
    with pytest.raises(TracelabError, match="posix.system|os.system") as caught:
        tracelab.load(path)
    assert isinstance(caught.value, TraceFormatError) and not marker.exists()
    status, err = run_cli(capsys, "memory", str(path))
    assert status == 2 and len(err) == 1 and "refused" in err[0] and not marker.exists()


@pytest.mark.parametrize("doc, says", [
    ({"no": "segments"}, "no 'segments' list"),
    ({"segments": [], "device_traces": [[{"action": "alloc", "size": "big"}]]}, "size"),
    ({"segments": [], "device_traces": [[{"action": "alloc", "size": 10, "addr": 1}]]}, "disagree"),
    ({"segments": [], "device_traces": [[{"action": "alloc", "size": -3, "addr": 1}]]}, "negative"),
    (["not", "a", "dict"], "no 'segments' list"),
])
def test_broken_snapshots_are_one_line(tmp_path, capsys, doc, says):
    path = tmp_path / "rank0.memory.pickle"
    path.write_bytes(pickle.dumps(doc, protocol=4))
    status, err = run_cli(capsys, "memory", str(path))
    assert status == 2 and len(err) == 1 and says in err[0], err


# ---- the rules on hand-made digests ---------------------------------------------------------------

@pytest.mark.parametrize("peaks, flagged", [((100, 100, 111), [2]), ((100, 100, 110), []), ((100, 130), [1]),
                                            ((100,), [])])
def test_imbalance_rule(peaks, flagged):  # peaks in MiB: past the 8 MiB floor
    m = across.combine([("run", {r: memory_digest(memory_steps(r, p * 2**20)) for r, p in enumerate(peaks)})])
    assert [f[2]["rank"] for f in m.found] == flagged


def test_fragmentation_and_allocator_rules():
    mib = 2**20
    m = across.combine([("run", {0: memory_digest(memory_steps(0, 100 * mib, reserved=121 * mib)),
                                 1: memory_digest(memory_steps(1, 100 * mib, reserved=120 * mib))})])
    assert [f[2]["rank"] for f in m.found] == [0] and "expandable_segments:True" in m.found[0][0]
    m = across.combine([("run", {0: memory_digest(memory_steps(0, 100, calls=(5, 0, 0))), 1: memory_digest(memory_steps(1, 100, calls=(5, 2, 0)))})])
    assert [(f[2]["rank"], f[2]["alloc_calls"], f[1]) for f in m.found] == [(1, 2, 2000)]


def test_a_steps_allocator_calls_are_those_inside_its_host_range():
    """cudaMalloc runs before the allocator reports the block: the step's span is its host range."""
    mem = schema.memory_frame({"time_ns": [100, 200, 1100], "addr": [1, 1, 2], "bytes": [64, -64, 32],
                               "total_allocated_bytes": [64, 0, 32], "total_reserved_bytes": [2048, 2048, 2048],
                               "device": 0, "step": [1, 1, 2]}, 3)
    host = schema.host_frame(["step", "alloc", "step", "alloc", "sync"], ["step 1", "cudaMalloc", "step 2", "cudaMalloc",
                             "cudaFree"], 1, [50, 60, 1000, 990, 1050], [300, 30, 300, 5, 20])
    steps = analysis.rank_memory(mem, host, 0).steps.set_index("step")
    assert steps.loc[1, ["alloc_calls", "alloc_ns", "alloc_sync_calls"]].tolist() == [1, 30, 0]
    assert steps.loc[2, ["alloc_calls", "alloc_ns", "alloc_sync_calls"]].tolist() == [1, 20, 1]  # 990 is before it
    assert steps.loc[1, "held_back_bytes"] == 2048 - 64


def _peaks(levels_bytes: list[int], reserved_bytes: list[int] | None = None) -> pd.DataFrame:
    n = len(levels_bytes)
    return pd.DataFrame({"input": [""] * n, "rank": range(n), "device": [0] * n,
                         "peak_allocated_bytes": levels_bytes,
                         "peak_reserved_bytes": reserved_bytes or [np.nan] * n,
                         "step": [0] * n, "peak_during": [""] * n})


def test_a_few_allocator_blocks_are_no_finding():
    """The README's CPU decode: 0.49 MiB against 0.42 MiB is 18% but 70 KiB: no finding; the
    same 18% of 1 GiB is one, and 9 MiB over a 40% floor of reserved is fragmentation only
    past MIN_EXCESS_BYTES."""
    small = _peaks([int(0.42 * 2**20), int(0.49 * 2**20)])
    assert across.imbalance(small) == []
    big = _peaks([2**30, int(1.18 * 2**30)])
    (text, _, ev), = across.imbalance(big)
    assert ev["rank"] == 1 and ev["peak_bytes"] - ev["others_median_bytes"] >= across.MIN_EXCESS_BYTES
    assert across.fragmentation(_peaks([2**20], [2**20 + 2**21])) == []  # 200% over, 2 MiB: no finding
    (text, _, ev), = across.fragmentation(_peaks([2**30], [int(1.5 * 2**30)]))
    assert ev["reserved_bytes"] - ev["allocated_bytes"] == 2**29


def test_no_memory_events_prints_the_note_not_empty_tables(capsys):
    """HTA's sampled rank has no [memory] event (counted in the raw JSON): three empty tables stood
    above the note saying so; the note alone is printed."""
    from helpers import shared_trace
    path = shared_trace("hta/trace_filter/sampled_rank-0.json.gz")
    with gzip.open(path, "rt") as f:
        assert not [e for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"]
    status, out, err = run_cli_output(capsys, "memory", str(path))
    assert status == 0, err
    lines = " ".join(out.split())
    assert lines.startswith("note: ") and "no memory events in the trace" in lines and "peak per rank" not in lines


@pytest.mark.slow
def test_reserved_over_allocated_claims_the_excess_not_that_it_is_unusable(capsys):
    """Kineto's totals say how much is reserved and not allocated, not whether a later request fits
    those cached blocks: the finding states the excess, recomputed here from the JSON's CUDA samples
    at the allocation peak, and names fragmentation only as the condition for its suggestion."""
    from helpers import shared_trace
    path = shared_trace("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz")
    with gzip.open(path, "rt") as f:
        samples = [e["args"] for e in json.load(f)["traceEvents"]
                   if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1]
    peak = max(samples, key=lambda a: a["Total Allocated"])
    excess_mib = (peak["Total Reserved"] - peak["Total Allocated"]) / 2**20
    status, out, _ = run_cli_output(capsys, "memory", str(path))
    assert status == 0 and f"keeps {excess_mib:.2f} MiB in free cached blocks" in out, out
    assert "cannot use" not in out and "expandable_segments:True" in out


def _untimed_snapshot() -> dict:
    """memory_snapshot() as an older PyTorch wrote it: no time_us on its actions."""
    snap = memory_snapshot()
    for action in snap["device_traces"][0]:
        del action["time_us"]
    return snap


def _peak_event(snap: dict) -> tuple[int, int]:
    """Straight from the snapshot: (1-based place of the alloc/free_requested action after which the
    allocated total is highest, how many such actions), the total before them being the active
    blocks' at the dump less their sum."""
    actions = [a for a in snap["device_traces"][0] if a["action"] in ("alloc", "free_requested")]
    signed = [a["size"] if a["action"] == "alloc" else -a["size"] for a in actions]
    active = sum(b["size"] for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    totals = list(itertools.accumulate(signed, initial=active - sum(signed)))[1:]
    return totals.index(max(totals)) + 1, len(actions)


def test_snapshot_without_timestamps_shows_no_time(tmp_path, capsys):
    path = tmp_path / "rank0.memory.pickle"
    snap = _untimed_snapshot()
    path.write_bytes(pickle.dumps(snap, protocol=4))
    event, events = _peak_event(snap)
    assert [n.code for n in tracelab.load(path).meta.notes] == ["snapshot_untimed"]
    status, out, err = run_cli_output(capsys, "memory", str(path), "--format", "json")
    assert status == 0
    doc = strict_json(out)
    (step,) = doc["steps"]
    assert step["peak_at_ns"] is None
    said = f"its peak is at memory event {event:,} of {events:,}"
    (note,) = doc["notes"]
    assert note["code"] == "peak_at_event" and (note["values"]["event"], note["values"]["events"]) == (event, events)
    assert said in note["text"] and "no timestamps" in err
    status, out, _ = run_cli_output(capsys, "memory", str(path))
    assert status == 0 and said in " ".join(out.split())  # rich wraps long lines


def test_timed_snapshot_keeps_its_peak_time(tmp_path, capsys):
    path = tmp_path / "rank0.memory.pickle"
    path.write_bytes(pickle.dumps(memory_snapshot(), protocol=4))
    assert not tracelab.load(path).meta.notes
    status, out, err = run_cli_output(capsys, "memory", str(path), "--format", "json")
    assert status == 0 and "memory event" not in out + err and strict_json(out)["steps"][0]["peak_at_ns"] == 10_000
