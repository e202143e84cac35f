"""Seeded fuzzing of the three formats (issue 11): truncations, byte flips, type
confusions, out-of-range numbers, deep nesting, bad encodings, SQLite values of the wrong
storage class, gzip bombs. Every case must keep the README's promise: the command succeeds
(the change was harmless), or it exits 2 with exactly one line on stderr naming the file,
with no traceback and no warning. Cases are made from tests/data's small traces in
tmp_path; the seed is in the test id, so a failure replays with that id alone.

A default run tries CASES_PER_CATEGORY seeds per category; `pytest -m slow` tries SLOW_CASES more."""
from __future__ import annotations

import gzip
import random
import sqlite3
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest

import malformed as m
from tracelab.cli.terminal import printable

CASES_PER_CATEGORY = 2  # per category in the default run; the slow set adds SLOW_CASES more seeds
SLOW_CASES = 70  # seeds 2..71: the default and slow runs together try the 72 seeds a category they did

HOSTILE: list[Any] = [None, "", "x", "\x1b[2J", "\u202e", -1, 0, 1.5, True, [], {}, [1, 2], {"a": 1},
                      2**63, -(2**63) - 1, 10**30, -(10**30), 1e300, -1e300, 2**62, "1e999", "9" * 40]
KINETO_CATS = ["kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "user_annotation", "gpu_user_annotation",
               "cpu_op", "cuda_driver"]
KINETO_FIELDS = ["ts", "dur", "pid", "tid", "name", "cat", "ph", "args", "args.device", "args.stream",
                 "args.correlation", "args.In msg nelems", "args.dtype"]
HATCHET_METRICS = ["time (ns)", "count", "device_id", "flops16", "bytes", "Time (ns)", "DeviceId"]
SQL_VALUES = ["NULL", "'text'", "X'00ff'", "1.5", "-1", "0", "99999", "9223372036854775807",
              "-9223372036854775808", "CAST(X'c328ff' AS TEXT)", "'\x1b[2J'"]
SQL_COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                   "demangledName", "shortName"],
    "CUPTI_ACTIVITY_KIND_MEMCPY": ["start", "end", "deviceId", "streamId", "bytes", "copyKind", "srcKind"],
    "CUPTI_ACTIVITY_KIND_MEMSET": ["start", "end", "deviceId", "bytes", "memKind"],
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "globalTid", "correlationId"],
    "NVTX_EVENTS": ["start", "end", "globalTid", "text", "textId", "eventType"],
    "StringIds": ["value", "id"],
}


def _set_path(doc: dict, dotted: str, value: Any) -> None:
    if dotted.startswith("args."):
        if not isinstance(doc.get("args"), dict):
            doc["args"] = {}
        doc["args"][dotted[5:]] = value
    else:
        doc[dotted] = value


def _kineto_confusion(rng: random.Random, folder: Path) -> Path:
    doc = m.kineto_doc()
    cat = rng.choice(KINETO_CATS)
    events = [e for e in doc["traceEvents"] if e.get("cat") == cat]
    for event in rng.sample(events, min(len(events), rng.randint(1, 3))):
        _set_path(event, rng.choice(KINETO_FIELDS), rng.choice(HOSTILE))
    return m.write_json(folder, "rank0.pt.trace.json", doc, gz=rng.random() < 0.3)


def _kineto_top_level(rng: random.Random, folder: Path) -> Path:
    doc = m.kineto_doc()
    key = rng.choice(["distributedInfo", "baseTimeNanoseconds", "deviceProperties", "schemaVersion",
                      "traceEvents", "distributedInfo.rank", "distributedInfo.world_size"])
    if key.startswith("distributedInfo."):
        doc["distributedInfo"][key.split(".")[1]] = rng.choice(HOSTILE)
    else:
        doc[key] = rng.choice(HOSTILE)
    return m.write_json(folder, "rank0.pt.trace.json", doc)


def _hatchet_confusion(rng: random.Random, folder: Path) -> Path:
    doc = m.hatchet_doc()
    node = rng.choice(m.kernel_nodes(doc[0]))
    where = rng.choice(["metric", "metric", "name", "children", "frame", "metrics"])
    if where == "metric":
        node["metrics"][rng.choice(HATCHET_METRICS)] = rng.choice(HOSTILE)
    elif where == "name":
        node["frame"]["name"] = rng.choice(HOSTILE)
    else:
        node[where] = rng.choice(HOSTILE + [[rng.choice(HOSTILE)]])
    return m.write_json(folder, "rank0.hatchet", doc)


def _nsys_types(rng: random.Random, folder: Path) -> Path:
    table = rng.choice(list(SQL_COLUMNS))
    column, value = rng.choice(SQL_COLUMNS[table]), rng.choice(SQL_VALUES)
    where = "eventType IN (59, 60)" if table == "NVTX_EVENTS" and rng.random() < 0.7 else "1"
    try:
        return m.nsys_value(table, column, value, where)(folder)
    except sqlite3.IntegrityError:  # a UNIQUE id made equal to another: keep the file, the case still counts
        return folder / "rank0.sqlite"


def _good_bytes(kind: str, rng: random.Random, folder: Path) -> bytes:
    if kind == "kineto":
        return m.KINETO.read_bytes() if rng.random() < 0.5 else gzip.decompress(m.KINETO.read_bytes())
    if kind == "hatchet":
        return m.HATCHET.read_bytes()
    return m.NSYS.read_bytes()


_NAMES = {"kineto": "rank0.pt.trace.json.gz", "hatchet": "rank0.hatchet", "nsys": "rank0.sqlite"}


def _named(kind: str, data: bytes) -> str:
    return _NAMES[kind] if kind != "kineto" or data[:2] == b"\x1f\x8b" else "rank0.pt.trace.json"


def _truncation(kind: str) -> Callable[[random.Random, Path], Path]:
    def make(rng: random.Random, folder: Path) -> Path:
        data = _good_bytes(kind, rng, folder)
        cut = data[: rng.randrange(1, len(data))]
        (path := folder / _named(kind, data)).write_bytes(cut)
        return path
    return make


def _flips(kind: str) -> Callable[[random.Random, Path], Path]:
    def make(rng: random.Random, folder: Path) -> Path:
        data = bytearray(_good_bytes(kind, rng, folder))
        start = 100 if kind == "nsys" else 0  # keep SQLite's header: flips inside pages, not "not a database"
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(start, len(data))] = rng.randrange(256)
        (path := folder / _named(kind, bytes(data))).write_bytes(bytes(data))
        return path
    return make


def _nesting(rng: random.Random, folder: Path) -> Path:
    depth = rng.choice([500, 5_000, 100_000])
    if rng.random() < 0.5:
        body = b'{"traceEvents": [{"cat": "kernel", "args": ' + b"[" * depth + b"]" * depth + b"}]}"
        (path := folder / "rank0.pt.trace.json").write_bytes(body)
    else:
        frame = '{"frame": {"name": "n"}, "metrics": {}, "children": ['
        text = frame * (depth // 3) + "]}" * (depth // 3)
        (path := folder / "rank0.hatchet").write_text(f"[{text}, {{}}]")
    return path


def _encoding(rng: random.Random, folder: Path) -> Path:
    data = gzip.decompress(m.KINETO.read_bytes()) if rng.random() < 0.5 else m.HATCHET.read_bytes()
    name = "rank0.pt.trace.json" if data.lstrip().startswith(b"{") else "rank0.hatchet"
    junk = rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x00", b"\x1b[2J"])
    spots = [i for i in range(len(data)) if data[i:i + 9] == b'"name": "']
    at = rng.choice(spots) + 9
    (path := folder / name).write_bytes(data[:at] + junk + data[at:])
    return path


def _bomb(rng: random.Random, folder: Path) -> Path:
    inflated = rng.choice([3, 5, 9]) * 1024**2
    head = rng.choice([b'{"traceEvents": [', b'[{"frame": {"name": "', b"", b"{"])
    path = folder / "rank0.pt.trace.json.gz"
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(head + b" " * inflated)
    return path


LABELS = ["thread \u00b2", "stream \u0663", "gpu \U0001d7d8", "\u2167", "7\u00b9", "stream 7", "", " 12 ", "-3",
          "stream 99999999999999999999999"]  # digits str.isdigit accepts and int() does not, among plain ones


def _labels(rng: random.Random, folder: Path) -> Path:
    """pid/tid labels of a few events made text: names with non-ASCII digits among plain ones."""
    doc = m.kineto_doc()
    events = [e for e in doc["traceEvents"] if e.get("cat") in KINETO_CATS]
    for event in rng.sample(events, rng.randint(1, 6)):
        event[rng.choice(["pid", "tid"])] = rng.choice(LABELS)
    return m.write_json(folder, "rank0.pt.trace.json", doc)


def _members(rng: random.Random, folder: Path) -> Path:
    """The trace as 1-6 gzip members cut anywhere (zcat reads it whole), some with junk after."""
    data = gzip.decompress(m.KINETO.read_bytes())
    cuts = sorted(rng.sample(range(1, len(data)), rng.randint(0, 5)))
    edges = [0, *cuts, len(data)]
    body = b"".join(gzip.compress(data[a:b], rng.choice([1, 9])) for a, b in zip(edges, edges[1:]))
    junk = rng.choice([b"", b"", b"\0" * 8, b"junk", gzip.compress(b"")[:5]])
    (path := folder / "rank0.pt.trace.json.gz").write_bytes(body + junk)
    return path


CATEGORIES: dict[str, Callable[[random.Random, Path], Path]] = {
    "kineto pid/tid labels": _labels,
    "gzip members": _members,
    "kineto type confusion": _kineto_confusion,
    "kineto top-level fields": _kineto_top_level,
    "hatchet type confusion": _hatchet_confusion,
    "nsys column storage classes": _nsys_types,
    **{f"{kind} truncation": _truncation(kind) for kind in _NAMES},
    **{f"{kind} byte flips": _flips(kind) for kind in _NAMES},
    "deep nesting": _nesting,
    "bad encodings in names": _encoding,
    "gzip bombs (limit 2 MiB)": _bomb,
}


def _cases(seeds: range, marks=()) -> list:
    return [pytest.param(category, seed, id=f"{category}-{seed}", marks=marks)
            for category in CATEGORIES for seed in seeds]


@pytest.mark.parametrize("category, seed", _cases(range(CASES_PER_CATEGORY))
                         + _cases(range(CASES_PER_CATEGORY, CASES_PER_CATEGORY + SLOW_CASES), pytest.mark.slow))
def test_fuzzed_trace_keeps_the_promise(category, seed, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRACELAB_CACHE", "0")
    monkeypatch.setenv("TRACELAB_MAX_TRACE_BYTES", str(2 * 1024**2))  # bombs are bombs at test scale
    rng = random.Random(f"{category}/{seed}")
    path = CATEGORIES[category](rng, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        status, lines = m.run_cli(capsys, "breakdown", str(path), "--format", "csv")
    if status == 0:
        return
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"tracelab: error: {printable(str(path))}"), lines[0]
