"""Each malformed value the parsers meet gives one line on stderr, exit status 2, naming the
file and the field at fault (issue 11). The traces are made from the good ones in tests/data,
one change each (tests/malformed.py), in tmp_path."""
from __future__ import annotations

import warnings

import pytest

import malformed as m

K, MC, MS, RT, NV = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                     "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
BIG = 10**30  # beyond int64 (and uint64)
DEEP = 100_000
RANGES = "eventType IN (59, 60)"  # NVTX push/pop and start/end ranges, the rows the parser reads


def _deep_event(data: bytes) -> bytes:
    """A Kineto trace whose first event holds an array nested DEEP levels."""
    return data.replace(b'"traceEvents": [', b'"traceEvents": [{"cat": "kernel", "x": '
                        + b"[" * DEEP + b"]" * DEEP + b"}, ", 1)


def _bad_utf8_name(data: bytes) -> bytes:
    return data.replace(b'"name": "void', b'"name": "\xff\xfe void', 1)


def _children(value):
    def change(doc):
        m.kernel_nodes(doc[0])[0]["children"] = [value]
    return change


def _kernel_name(name):
    def change(doc):
        m.kernel_nodes(doc[0])[0]["frame"]["name"] = name
    return change


def _rank(value):
    def change(doc):
        doc["distributedInfo"]["rank"] = value
    return change



# case -> (maker, fragment of the field the line must name)
CASES = {
    # Kineto / Chrome JSON
    "kineto: 100k-deep nesting": (m.with_bytes(m.kineto(lambda d: None), _deep_event), "nested"),
    "kineto: ts beyond int64": (m.kineto_event("kernel", ts=BIG), "ts"),
    "kineto: launch ts beyond int64": (m.kineto_event("cuda_runtime", ts=BIG), "ts"),
    "kineto: dur beyond int64": (m.kineto_event("kernel", dur=BIG), "dur"),
    "kineto: dur 1e300": (m.kineto_event("kernel", dur=1e300), "dur: expected `float` <="),  # not "negative dur"
    "kineto: annotation dur 1e300": (m.kineto_event("user_annotation", dur=1e300), "dur"),
    "kineto: pid beyond int64": (m.kineto_event("kernel", pid=BIG), "pid"),
    "kineto: tid beyond int64": (m.kineto_event("cuda_runtime", tid=BIG), "tid"),
    "kineto: device beyond int16": (m.kineto_event("kernel", pid=40_000, args_device=40_000), "device"),
    "kineto: correlation beyond int64": (m.kineto_event("kernel", args_correlation=BIG), "correlation"),
    "kineto: nelems beyond float": (m.kineto_event("kernel", **{"args_In msg nelems": 10**400,
                                                                "args_dtype": "Float"}), "nelems"),
    "kineto: rank beyond int64": (m.kineto(_rank(BIG)), "rank"),
    "kineto: rank beyond int32": (m.kineto(_rank(2**40)), "rank"),
    "kineto: invalid UTF-8 in a name": (m.with_bytes(m.kineto(lambda d: None), _bad_utf8_name), "UTF-8"),
    # proton hatchet JSON
    "hatchet: 100k-deep nesting": (m.raw(b"[" * DEEP + b"]" * DEEP, "rank0.hatchet"), "nested"),
    "hatchet: time beyond int64": (m.hatchet_metric(time_ns=BIG), "time (ns)"),
    "hatchet: time 1e300": (m.hatchet_metric(time_ns=1e300), "time (ns)"),
    "hatchet: count beyond int64": (m.hatchet_metric(count=BIG), "count"),
    "hatchet: count not whole": (m.hatchet_metric(count=2.5), "count"),
    "hatchet: flops beyond float": (m.hatchet_metric(flops16=10**400), "flops16"),
    "hatchet: bytes beyond float": (m.hatchet_metric(bytes=10**400), "bytes"),
    "hatchet: device id beyond int16": (m.hatchet_metric(device_id="99999"), "device_id"),
    "hatchet: device id beyond int64": (m.hatchet_metric(device_id=BIG), "device_id"),
    "hatchet: device id a word": (m.hatchet_metric(device_id="gpu"), "device_id"),
    "hatchet: children holding a number": (m.hatchet(_children(5)), "children"),
    "hatchet: frame name over the limit": (m.hatchet(_kernel_name("k" * 2_000_000)), "TRACELAB_MAX_NAME_CHARS"),
    "kineto: annotation name over the limit": (m.kineto_event("user_annotation", name="k" * 2_000_000),
                                               "TRACELAB_MAX_NAME_CHARS"),
    "hatchet: children holding a string": (m.hatchet(_children("x")), "children"),
    "hatchet: invalid UTF-8 in a name": (m.with_bytes(m.hatchet(lambda d: None),
                                                      lambda b: b.replace(b'"name": "_Z', b'"name": "\xc3\x28_Z', 1)),
                                         "UTF-8"),
    # nsys SQLite
    **{f"nsys: {t} {c} {kind}": (m.nsys_value(t, c, v), c)
       for t, columns in {K: ("start", "end", "deviceId", "streamId", "globalPid", "correlationId"),
                          MC: ("start", "end", "deviceId", "streamId", "bytes"),
                          MS: ("start", "deviceId", "bytes")}.items()
       for c in columns
       for kind, v in {"text": "'abc'", "blob": "X'00ff'", "real": "1.5"}.items()},
    **{f"nsys: {t} {c} NULL": (m.nsys_value(t, c, "NULL"), c)
       for t, columns in {K: ("start", "end", "deviceId", "streamId"), MC: ("start",), MS: ("end",)}.items()
       for c in columns},
    "nsys: end before start": (m.nsys_value(K, "end", "start - 1"), "end"),
    "nsys: start at INT64 min": (m.nsys_value(K, "start", "-9223372036854775808"), "start"),
    "nsys: end at INT64 max": (m.nsys_value(K, "end", "9223372036854775807"), "end"),
    "nsys: deviceId beyond int16": (m.nsys_value(K, "deviceId", "99999"), "deviceId"),
    "nsys: bytes text that is not UTF-8": (m.nsys_value(MC, "bytes", "CAST(X'c328ff' AS TEXT)"), "bytes"),
    "nsys: name ids missing from StringIds": (m.nsys(f"UPDATE {K} SET demangledName = 987654321, "
                                                     f"shortName = 987654321 WHERE {m.first_row(K)}"), "name"),
    "nsys: NULL name": (m.nsys(*m.loosen("StringIds"), "INSERT INTO StringIds (id, value) VALUES (987654321, NULL)",
                               f"UPDATE {K} SET demangledName = 987654321, shortName = 987654321 "
                               f"WHERE {m.first_row(K)}"), "name"),
    "nsys: invalid UTF-8 in a name": (m.nsys(f"UPDATE StringIds SET value = CAST(X'c328ff' AS TEXT) WHERE id = "
                                             f"(SELECT demangledName FROM {K} WHERE {m.first_row(K)})"), "UTF-8"),
    "nsys: runtime globalTid text": (m.nsys_value(RT, "globalTid", "'abc'"), "globalTid"),
    "nsys: runtime correlationId real": (m.nsys_value(RT, "correlationId", "2.5"), "correlationId"),
    "nsys: runtime start beyond": (m.nsys_value(RT, "start", "9223372036854775807.0"), "start"),
    "nsys: NVTX start text": (m.nsys_value(NV, "start", "'abc'", RANGES), "start"),
    "nsys: NVTX end before start": (m.nsys_value(NV, "end", "start - 5", RANGES), "end"),
    "nsys: NVTX globalTid blob": (m.nsys_value(NV, "globalTid", "X'00'", RANGES), "globalTid"),
    "nsys: NVTX text over the name limit": (m.nsys_value(NV, "text", "printf('%.2000000c', 'x')", RANGES),
                                            "TRACELAB_MAX_NAME_CHARS"),
    "nsys: StringIds value over the name limit": (m.nsys("UPDATE StringIds SET value = printf('%.2000000c', 'k') "
                                                         "WHERE id = (SELECT MAX(id) FROM StringIds)"),
                                                  "TRACELAB_MAX_NAME_CHARS"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_malformed_value_gives_one_line_naming_file_and_field(case, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRACELAB_CACHE", "0")
    make, field = CASES[case]
    path = make(tmp_path)
    before = path.read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning before the error line is a failure too
        status, lines = m.run_cli(capsys, "breakdown", str(path))
    assert status == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"tracelab: error: {path}: "), lines[0]
    assert field.lower() in lines[0].lower(), lines[0]
    assert path.read_bytes() == before


@pytest.mark.parametrize("make", [m.kineto(lambda d: None), m.hatchet(lambda d: None), m.nsys()],
                         ids=["kineto", "hatchet", "nsys"])
def test_unchanged_copies_still_load(make, tmp_path, capsys, monkeypatch):
    """The makers themselves break nothing: with no change the trace loads (exit 0)."""
    monkeypatch.setenv("TRACELAB_CACHE", "0")
    status, lines = m.run_cli(capsys, "breakdown", str(make(tmp_path)), "--format", "csv")
    assert status == 0, lines
