"""Kineto decoding (parsers/_kineto_json): the one-pass tagged union on `cat` gives the same
frame as the slow way (every event's `cat` decoded, then the chosen events again), whatever
events it refuses; `ts` read from its text in numpy equals a Decimal walk of the same text;
decoding in place leaves the file's bytes as they were. Truths come from the slow way and
from Decimal, not from the code under test."""
from __future__ import annotations

import gzip
import json
import random
from decimal import Decimal
from pathlib import Path

import msgspec
import pytest

from tracelab.core import limits
from tracelab.core.errors import TraceFormatError
from tracelab.parsers._kineto_json import (Launches, Ops, Picked, array_layout, decode, pick, pick_runs, read_bytes, read_events,
                                          ts_ns, uncategorised_tail)
from tracelab.parsers._kineto_union import Source
from tracelab.parsers import chrome

from helpers import DATA, shared_trace, slow_beyond

OWN_TRACES = sorted(DATA.glob("*-torch/rank*.pt.trace.json.gz")) + sorted(DATA.glob("gloo-2cpu-*/rank*.json.gz"))
PUBLIC = ["hta/trace_filter/sampled_rank-0.json.gz", "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
          "hta/triton_example/triton_example.json.gz", "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
          "hta/rank_unavailable/rank_not_found.json.gz",
          pytest.param("hta/trace_diff/control/control.json.gz", marks=pytest.mark.slow)]


def _slow_way(monkeypatch):
    """The union switched off: every chunk goes the slow way."""
    monkeypatch.setattr("tracelab.parsers._kineto_json.MISSES_PER_CHUNK", 0)


def _read_both(path: Path, monkeypatch, chunk: int | None = None, run_bytes: int | None = None):
    if chunk:
        monkeypatch.setattr("tracelab.parsers._kineto_json.CHUNK_EVENTS", chunk)
    if run_bytes:
        monkeypatch.setattr("tracelab.parsers._kineto_json.RUN_BYTES", run_bytes)
    fast = chrome.read(path)
    with monkeypatch.context() as m:
        _slow_way(m)
        slow = chrome.read(path)
    return fast, slow


def _same(a, b) -> None:
    assert a.events.equals(b.events) and a.events.dtypes.equals(b.events.dtypes)
    assert a.meta.but(path="") == b.meta.but(path="")


def test_own_captures_found():
    assert len(OWN_TRACES) >= 20


# The default run reads both ways one capture of each kind (GPU, CPU, memory, gloo, CUDA graphs, compiled);
# every capture, the larger ones and the second ranks included, in the slow set
OWN_FAST = {DATA / folder / "rank0.pt.trace.json.gz" for folder in (
    "train-2gpu-torch", "train-cpu-torch", "train-2cpu-memory-torch", "gloo-2cpu-late", "graph-1gpu-torch",
    "decode-compile-1gpu-torch")}


@pytest.mark.parametrize("path", slow_beyond(OWN_TRACES, OWN_FAST), ids=lambda p: f"{p.parent.name}/{p.name.split('.')[0]}")
def test_the_union_gives_the_slow_ways_frame_on_our_captures(path, monkeypatch):
    _same(*_read_both(path, monkeypatch))


@pytest.mark.parametrize("relpath", PUBLIC)
@pytest.mark.parametrize("run_bytes", [None, pytest.param(20_000, marks=pytest.mark.slow)], ids=["default-runs", "small-runs"])
def test_the_union_gives_the_slow_ways_frame_on_public_traces(relpath, monkeypatch, run_bytes):
    fast, slow = _read_both(shared_trace(relpath), monkeypatch, chunk=997, run_bytes=run_bytes)  # chunks anywhere
    _same(fast, slow)
    assert len(fast.events) > 0


def _event(i: int, cat: str | None, **extra) -> dict:
    e = {"ph": "X", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 1000 + i, "dur": 1.5,
         "args": {"device": 0, "stream": 7, "correlation": i}, **extra}
    if cat is not None:
        e["cat"] = cat
    return e


def _write(tmp_path: Path, events: list[dict], name: str = "rank0.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events}))
    return path


@pytest.mark.parametrize("chunk,run_bytes", [(1, None), (2, None), (3, None), (7, None), (64, None), (64, 300),
                                             (64, 2000), (2, 5000)])
def test_events_without_cat_and_unknown_categories_anywhere(tmp_path, monkeypatch, chunk, run_bytes):
    """Refused events (no cat, categories never seen, a cat that is not a string is not
    among them: it is an error) at the start, middle and end of chunks, in runs (of msgspec's
    split, and cut from the bytes: run_bytes)."""
    rng = random.Random(chunk)
    cats = ["kernel", "gpu_memcpy", None, "my_new_category", "cpu_op", "cuda_runtime", "another_one", "ac2g"]
    events = [_event(i, rng.choice(cats)) for i in range(300)] + [{"ph": "M", "name": "process_name", "pid": 0}]
    path = _write(tmp_path, events)
    fast, slow = _read_both(path, monkeypatch, chunk=chunk, run_bytes=run_bytes)
    _same(fast, slow)
    want = sorted(e["name"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy"))
    assert sorted(fast.events["name"].astype(str)) == want


def test_more_categories_than_the_union_learns(tmp_path, monkeypatch):
    monkeypatch.setattr("tracelab.parsers._kineto_union.MAX_SKIPPED_CATEGORIES", 40)
    events = [_event(i, "kernel" if i % 3 == 0 else f"cat{i}") for i in range(600)]
    fast, slow = _read_both(_write(tmp_path, events), monkeypatch, chunk=50)
    _same(fast, slow)
    assert len(fast.events) == 200


@pytest.mark.parametrize("bad,where", [
    ({"dur": "long"}, "dur"), ({"ts": None}, "ts"), ({"ts": "soon"}, "ts"), ({"name": 5}, "name"),
    ({"ts": 1e300}, "beyond"), ({"pid": 2**70}, "pid"),
])
@pytest.mark.parametrize("at", [0, 5, 299])
@pytest.mark.parametrize("run_bytes", [None, 3000])
def test_a_bad_chosen_event_is_named_exactly(tmp_path, monkeypatch, bad, where, at, run_bytes):
    monkeypatch.setattr("tracelab.parsers._kineto_json.CHUNK_EVENTS", 64)
    if run_bytes:
        monkeypatch.setattr("tracelab.parsers._kineto_json.RUN_BYTES", run_bytes)
    events = [_event(i, "kernel" if i % 2 == 0 else "cpu_op") for i in range(300)]
    events[at] = {**_event(at, "kernel"), **bad}
    with pytest.raises(TraceFormatError, match=rf"traceEvents\[{at}\] \(kernel( 'k{at}')?\): .*{where}"):
        chrome.read(_write(tmp_path, events))


def _kineto_text(events: list[dict], before: str = '"schemaVersion": 1,', after: str = '"traceName": "t"') -> str:
    """A trace as Kineto's writer lays it out: each event opened and closed on its own line."""
    body = ",\n".join("  {\n    " + json.dumps(e)[1:-1] + "\n  }" for e in events)
    return "{\n  " + before + '\n  "traceEvents": [\n' + body + "\n  ],\n  " + after + "\n}\n"


def _layout_used(monkeypatch) -> list:
    """The runs each read cut from the bytes and decoded to the end (appended as they finish)."""
    done, real = [], pick_runs

    def spy(path, data, runs, *rest):
        out = real(path, data, runs, *rest)
        done.append(len(runs))
        return out

    monkeypatch.setattr("tracelab.parsers._kineto_json.pick_runs", spy)
    return done


@pytest.mark.parametrize("writer", ["kineto", "json.dumps", "compact", "crlf", "one-per-line"])
def test_runs_cut_from_the_bytes_give_the_slow_ways_frame(tmp_path, monkeypatch, writer):
    """Kineto's layout, json.dumps' with and without spaces, Kineto's with CRLF line ends and one
    event per line: cut into runs where one event ends and the next begins; metadata events (no
    cat) at the end, top-level fields on both sides."""
    events = [_event(i, "kernel" if i % 3 else "cuda_runtime") for i in range(400)]
    events += [{"ph": "M", "name": "thread_name", "pid": 0, "tid": i, "args": {"name": f"t{i}"}} for i in range(20)]
    path = tmp_path / "rank0.json"
    if writer in ("kineto", "crlf"):
        text = _kineto_text(events, after='"baseTimeNanoseconds": 1700000000000000000')
        path.write_bytes((text.replace("\n", "\r\n") if writer == "crlf" else text).encode())
    elif writer == "one-per-line":
        path.write_text('{"traceEvents": [\n' + ",\n".join(map(json.dumps, events)) + '\n], "baseTimeNanoseconds": 17}')
    else:
        doc = {"distributedInfo": {"rank": 3, "world_size": 8}, "traceEvents": events, "baseTimeNanoseconds": 17}
        path.write_text(json.dumps(doc, separators=(",", ":") if writer == "compact" else None))
    used = _layout_used(monkeypatch)
    fast, slow = _read_both(path, monkeypatch, run_bytes=2000)
    _same(fast, slow)
    assert used and used[0] > 5  # the fast read went by runs
    want = [e["name"] for e in events if e.get("cat") == "kernel"]
    assert sorted(fast.events["name"].astype(str)) == sorted(want)
    assert fast.meta.trace_start_epoch_ns == slow.meta.trace_start_epoch_ns


def test_a_separator_inside_an_event_reads_the_general_way(tmp_path, monkeypatch):
    """`}, {` inside args (a list of objects) is cut too; that run is no array of whole events:
    the read starts again the general way and gives the same frame."""
    events = [_event(i, "kernel", args={"device": 0, "stream": 7, "correlation": i,
                                         "parts": [{"a": j} for j in range(40)]}) for i in range(200)]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events}))
    used = _layout_used(monkeypatch)
    fast, slow = _read_both(path, monkeypatch, run_bytes=3000)
    _same(fast, slow)
    assert not used and len(fast.events) == 200


@pytest.mark.parametrize("damage,words", [
    (lambda t: t.replace('"name": "k150"', '"name": "k150",,'), "not valid JSON"),
    (lambda t: t[:len(t) * 2 // 3], "not valid JSON"),
    (lambda t: t.replace('"traceName": "t"', '"traceName": "t", "late": [1, 2'), "not valid JSON"),
    (lambda t: t.replace('"schemaVersion": 1,', '"schemaVersion": [1,'), "not valid JSON"),
    (lambda t: t + "trailing", "not valid JSON"),
])
def test_damage_anywhere_in_a_cut_trace_is_named_as_before(tmp_path, monkeypatch, damage, words):
    monkeypatch.setattr("tracelab.parsers._kineto_json.RUN_BYTES", 2000)
    path = tmp_path / "rank0.json"
    path.write_text(damage(_kineto_text([_event(i, "kernel") for i in range(300)])))
    with pytest.raises(TraceFormatError, match=words):
        chrome.read(path)


def test_a_trace_events_key_inside_another_value_is_not_cut(tmp_path, monkeypatch):
    """The first `"traceEvents": [` in the text is inside another field: not the events."""
    monkeypatch.setattr("tracelab.parsers._kineto_json.RUN_BYTES", 1000)
    decoy = [_event(i, "kernel") for i in range(50)]
    events = [_event(i + 1000, "kernel") for i in range(100)]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"schemaVersion": {"traceEvents": decoy}, "traceEvents": events}))
    assert sorted(chrome.read(path).events["name"]) == sorted(e["name"] for e in events)


def test_a_bad_event_of_a_category_not_chosen_is_not_read(tmp_path):
    events = [_event(i, "kernel") for i in range(10)] + [{**_event(10, "python_function"), "dur": "long", "ts": None}]
    assert len(chrome.read(_write(tmp_path, events)).events) == 10


@pytest.mark.parametrize("run_bytes", [None, 2000])
def test_a_launchs_args_rows_do_not_read_are_not_checked(tmp_path, monkeypatch, run_bytes):
    """A launch call's args other than its correlation and External id are skipped unread (a
    wrong type there refuses nothing); its correlation still finds its kernel, and a wrong type
    in the correlation is still named."""
    if run_bytes:
        monkeypatch.setattr("tracelab.parsers._kineto_json.RUN_BYTES", run_bytes)
    odd = {"device": [1], "stream": {"s": 7}, "In msg nelems": -5, "dtype": 3, "Process Group Name": [0]}
    kernels = [_event(i, "kernel", ts=2000 + 10 * i) for i in range(60)]
    calls = [{**_event(i, "cuda_runtime", ts=1995 + 10 * i, name="cudaLaunchKernel"),
              "args": {"correlation": i, "External id": i, **odd}} for i in range(60)]
    events = chrome.read(_write(tmp_path, [e for pair in zip(calls, kernels) for e in pair])).events
    first_ns = min(k["ts"] for k in kernels) * 1000  # the GPU rows start at 0
    by_name = events.set_index("name")["launch_start_ns"]
    assert [int(by_name[k["name"]]) for k in kernels] == [c["ts"] * 1000 - first_ns for c in calls]
    calls[7]["args"]["correlation"] = [7]
    with pytest.raises(TraceFormatError, match=r"traceEvents\[14\] \(cuda_runtime 'cudaLaunchKernel'\): .*correlation"):
        chrome.read(_write(tmp_path, [e for pair in zip(calls, kernels) for e in pair]))


def test_decoding_in_place_puts_every_byte_back(tmp_path, monkeypatch):
    src = DATA / "train-2gpu-torch" / "rank0.pt.trace.json.gz"
    data = read_bytes(src)
    before = bytes(data)
    trace = decode(src, data)
    source = Source(data, trace.traceEvents)
    assert source.data is not None  # msgspec's raw values are views of the bytearray
    groups = [(set(chrome.GPU_KINDS), Picked), (chrome.LAUNCHES, Launches), (chrome.CPU_OPS, Ops)]
    pick(src, data, trace.traceEvents, groups)
    assert bytes(data) == before
    monkeypatch.setattr("tracelab.parsers._kineto_json.RUN_BYTES", 10_000)
    assert array_layout(data) is not None
    read_events(src, data, groups)  # by runs cut from the bytes
    assert bytes(data) == before


def test_bytes_input_is_joined_not_decoded_in_place(monkeypatch):
    src = DATA / "decode-2gpu-torch" / "rank0.pt.trace.json.gz"
    data = bytes(read_bytes(src))
    trace = decode(src, data)
    assert Source(data, trace.traceEvents).data is None
    groups = [(set(chrome.GPU_KINDS), Picked)]
    got = pick(src, data, trace.traceEvents, groups)[0]
    in_place = read_bytes(src)
    want = pick(src, in_place, decode(src, in_place).traceEvents, groups)[0]
    assert got.ts_ns.tolist() == want.ts_ns.tolist() and got.name == want.name and len(got.name) > 100


# ts: numpy against Decimal, on the layouts Kineto writes and on every other JSON number


def _decimal(text: str) -> int:
    return int(Decimal(text).scaleb(3).to_integral_value())


def _numbers(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        kind = rng.randrange(8)
        whole = str(rng.randrange(10 ** rng.randrange(1, 16)))  # below 2**62 ns
        if kind == 0:
            out.append(whole)
        elif kind == 1:
            out.append(f"{whole}.{rng.randrange(10 ** (d := rng.randrange(1, 4))):0{d}d}")
        elif kind == 2:
            out.append(f"-{whole}.{rng.randrange(1000):03d}")
        elif kind == 3:
            out.append(f"{whole}.{rng.randrange(10 ** 6):06d}")  # more decimals: rounded half even
        elif kind == 4:
            out.append(f"{rng.randrange(1, 10)}.{rng.randrange(1000)}e{rng.randrange(0, 12)}")
        elif kind == 5:
            out.append(f"{whole}.0")
        elif kind == 6:
            out.append("0." + f"{rng.randrange(1000):03d}")
        else:
            out.append(f"{rng.randrange(1, 4)}{rng.randrange(10 ** 15):015d}.{rng.randrange(1000):03d}")
    return out


@pytest.mark.parametrize("seed", range(6))
def test_ts_ns_of_mixed_numbers_equals_decimal(seed):
    texts = _numbers(random.Random(seed), 2000)
    want = [_decimal(t) for t in texts]
    assert ts_ns([t.encode() for t in texts]) == want
    raws = msgspec.json.decode(("[" + ",".join(texts) + "]").encode(), type=list[msgspec.Raw])
    assert ts_ns(raws) == want


@pytest.mark.parametrize("layout", ["{:013d}.{:03d}", "{:016d}", "{:016d}.{:01d}", "{:04d}.{:02d}", "-{:05d}.{:03d}"])
def test_ts_ns_of_one_layout_equals_decimal(layout):
    rng = random.Random(layout)
    texts = [layout.format(rng.randrange(10 ** 12), rng.randrange(10)) for _ in range(3000)]
    assert ts_ns([t.encode() for t in texts]) == [_decimal(t) for t in texts]


def test_ts_ns_where_one_text_breaks_the_layout():
    texts = ["1234.567"] * 50 + ["123.4567", "12345.67", "1234567", "1.234567e3"] + ["1234.567"] * 50
    assert ts_ns([t.encode() for t in texts]) == [_decimal(t) for t in texts]


def test_ts_ns_at_and_past_the_limit():
    bound_us = Decimal(limits.MAX_TIME_NS) / 1000
    ok = [str(bound_us), "-" + str(bound_us), "4611686018427387.903", "9999999999999.999"]
    assert ts_ns([t.encode() for t in ok]) == [_decimal(t) for t in ok]
    for past in ["4611686018427387.905", "9999999999999999.999", "99999999999999999999", "1e400", "-1e17"]:
        with pytest.raises(ValueError, match="beyond"):
            ts_ns([b"1.5", past.encode()])
    for odd in ["null", "true", '"soon"', "[1]"]:
        with pytest.raises(ValueError, match="ts: "):
            ts_ns([b"1.5", odd.encode()])
    assert ts_ns([b'"12.5"']) == [12500]  # a number written as a string, as Decimal reads it


def test_ts_of_a_real_trace_equal_a_decimal_walk_of_every_chosen_event():
    path = DATA / "train-2gpu-torch" / "rank1.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    want = [_decimal(str(e["ts"])) for e in doc["traceEvents"] if e.get("cat") in chrome.LAUNCHES]
    data = read_bytes(path)
    got = pick(path, data, decode(path, data).traceEvents, [(chrome.LAUNCHES, Launches)])[0].ts_ns.tolist()
    assert got == want and len(got) > 500


@pytest.mark.parametrize("chunk", [7, 64, 16384])
def test_the_tail_of_metadata_goes_the_slow_way_and_misses_nothing(tmp_path, monkeypatch, chunk):
    """Kineto's ending: metadata events (no cat) among a few categorised ones, read the slow way
    at once (uncategorised_tail); a kernel there whose key is written escaped (`"c\\u0061t"`:
    no `"cat"` in its text) is still picked, in its place."""
    events = [_event(i, "kernel" if i % 2 == 0 else "cpu_op") for i in range(200)]
    tail = [{"ph": "M", "name": "process_name", "pid": i, "tid": 0, "args": {"name": "x"}} for i in range(30)]
    tail[3] = _event(900, "Trace")
    tail[11] = _event(901, "kernel")
    tail[20] = {**_event(902, None), "ESCAPED": "kernel"}
    path = _write(tmp_path, events + tail)
    path.write_text(path.read_text().replace('"ESCAPED"', '"c\\u0061t"'))
    assert uncategorised_tail(decode(path, read_bytes(path)).traceEvents) < 200
    fast, slow = _read_both(path, monkeypatch, chunk=chunk)
    _same(fast, slow)
    want = [f"k{i}" for i in range(0, 200, 2)] + ["k901", "k902"]
    assert fast.events.sort_values("start_ns", kind="stable")["name"].astype(str).tolist() == want


@pytest.mark.parametrize("seed", range(4))
def test_runs_cut_anywhere_read_as_the_general_way_does(tmp_path, monkeypatch, seed):
    """Separators inside names (strings) and inside args (lists of objects), either writer:
    whatever the cut finds, the frame is the general way's (runs too big to cut: RUN_BYTES huge)."""
    rng = random.Random(seed)
    names = ["k", "a}, {b", "x},{y", "plain"]
    events = []
    for i in range(300):
        extra = {"name": f"{rng.choice(names)}{i}"}
        if rng.random() < 0.1:
            extra["args"] = {"device": 0, "stream": 7, "correlation": i, "l": [{"q": j} for j in range(3)]}
        events.append(_event(i, rng.choice(["kernel", "cuda_runtime", "cpu_op", None]), **extra))
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events}, separators=rng.choice([(",", ":"), (", ", ": ")])))
    monkeypatch.setattr("tracelab.parsers._kineto_json.RUN_BYTES", rng.choice([500, 1500, 4000]))
    cut = chrome.read(path)
    monkeypatch.setattr("tracelab.parsers._kineto_json.RUN_BYTES", 1 << 40)
    _same(cut, chrome.read(path))
    assert len(cut.events) == sum(e.get("cat") == "kernel" for e in events)
