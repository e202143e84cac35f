"""The corpus of issue 29: malformed inputs and faults by class, each keeping the promise
(tests/promise.py): exit 2, one line on stderr naming what is at fault, no traceback, the
inputs untouched, no partial or temporary file left. Each table maps a case to a maker of
its inputs in tmp_path (returning the command line) and a fragment the line must hold.
This module: values read from a file, checked where they enter (by type and range)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import malformed as m
from promise import assert_refused, one_process, spread
from helpers import slow_after

TORCH2 = m.DATA / "decode-2gpu-torch"
PROTON2 = m.DATA / "decode-2gpu-proton"
WRONG = {"text": "x", "fraction": 1.5, "list": [1], "object": {"a": 1}, "bool": True, "huge": 1e300}


def _on_first(cat: str, **fields):
    def change(doc):
        event = m.first(doc["traceEvents"], cat)
        for key, value in fields.items():
            if key.startswith("args_"):
                event.setdefault("args", {})[key[5:].replace("_", " ")] = value
            else:
                event[key] = value
    return m.kineto(change)


def _device_props(field, value):
    def change(doc):
        doc["deviceProperties"][0][field] = value
    return m.kineto(change)


def _top(key, value):
    def change(doc):
        doc[key] = value
    return m.kineto(change)


def _dist(key, value):
    def change(doc):
        doc["distributedInfo"][key] = value
    return m.kineto(change)


def _hatchet_device(key, props):
    def change(doc):
        doc[1] = {"CUDA": {key: props}}
    return m.hatchet(change)


def _scope_named(name):
    def change(doc):
        doc[0]["children"][0]["frame"]["name"] = name
    return m.hatchet(change)


DEVICE_FIELDS = {"id": ("text", "fraction", "list", "object", "bool", "huge"),
                 "computeMajor": ("text", "list", "huge", "fraction"),
                 "numSms": ("text", "object", "huge"), "totalGlobalMem": ("text", "list", "fraction"),
                 "warpSize": ("text", "huge"), "sharedMemPerMultiprocessor": ("object",),
                 "name": ("list", "object", "fraction")}
HATCHET_WORK = ("flops", "flops8", "flops16", "flops32", "flops64", "bytes")

KINETO = {
    "args.dtype a list": (_on_first("kernel", args_dtype=[1], args_In_msg_nelems=4), "dtype"),
    "args.dtype an object": (_on_first("kernel", args_dtype={"a": 1}, args_In_msg_nelems=4), "dtype"),
    "args.dtype a number": (_on_first("kernel", args_dtype=7), "dtype"),
    "args.Process Group Name a list": (_on_first("kernel", **{"args_Process_Group_Name": [0]}), "Process Group"),
    "deviceProperties id null": (_device_props("id", None), "deviceProperties[0].id"),
    "deviceProperties an object": (_top("deviceProperties", {"id": 0}), "deviceProperties"),
    "deviceProperties a string": (_top("deviceProperties", "H100"), "deviceProperties"),
    "deviceProperties id beyond int16": (_device_props("id", 70000), "deviceProperties[0].id"),
    "deviceProperties warpSize negative": (_device_props("warpSize", -32), "warpSize"),
    "distributedInfo.rank text": (_dist("rank", "zero"), "distributedInfo.rank"),
    "distributedInfo.rank a bool": (_dist("rank", True), "distributedInfo.rank"),
    "distributedInfo.rank 1.5": (_dist("rank", 1.5), "distributedInfo.rank"),
    "distributedInfo.world_size 0": (_dist("world_size", 0), "world_size"),
    "distributedInfo.world_size a list": (_dist("world_size", [2]), "world_size"),
    "distributedInfo.backend a number": (_dist("backend", 7), "distributedInfo.backend"),
    "distributedInfo.backend an object": (_dist("backend", {"name": "nccl"}), "distributedInfo.backend"),
    **{f"deviceProperties {field} {kind}": (_device_props(field, WRONG[kind]), f"deviceProperties[0].{field}")
       for field, kinds in DEVICE_FIELDS.items() for kind in kinds},
}
HATCHET = {
    "device key with a superscript digit": (_hatchet_device("\u00b2", {"arch": "90"}), "device info"),
    "device key a word": (_hatchet_device("gpu", {"arch": "90"}), "device info"),
    "device key negative": (_hatchet_device("-1", {"arch": "90"}), "device info"),
    "device_id with a superscript digit": (m.hatchet_metric(device_id="\u00b2"), "device_id"),
    "device_id 1.5": (m.hatchet_metric(device_id=1.5), "device_id"),
    "device_id a bool": (m.hatchet_metric(device_id=True), "device_id"),
    "device_id a list": (m.hatchet_metric(device_id=[0]), "device_id"),
    "flops8 + flops16 past a float": (m.hatchet_metric(flops8=1.7e308, flops16=1.7e308), "flops"),
    **{f"{key} {kind}": (m.hatchet_metric(**{key: value}), key)
       for key in HATCHET_WORK for kind, value in {"negative": -1, "huge": 1e300, "text": "x", "list": [1]}.items()},
}


def _nsys_meta(table, column, value, name="rank0.sqlite"):
    return m.nsys_value(table, column, value)


NSYS_META = {
    "TARGET_INFO_GPU without id": (m.nsys(*m.loosen("TARGET_INFO_GPU"), "ALTER TABLE TARGET_INFO_GPU DROP COLUMN id"),
                                   "TARGET_INFO_GPU has no column id"),
    **{f"TARGET_INFO_GPU {col} {kind}": (_nsys_meta("TARGET_INFO_GPU", col, value), f"TARGET_INFO_GPU row 1: {col}")
       for col in ("id", "clockRate", "memoryBandwidth", "smCount", "totalMemory", "computeMajor")
       for kind, value in {"text": "'fast'", "real": "2.5", "negative": "-5"}.items()
       if not (col == "id" and kind == "negative")},
    "TARGET_INFO_GPU id beyond int16": (_nsys_meta("TARGET_INFO_GPU", "id", "99999"), "id"),
    "TARGET_INFO_GPU id NULL": (_nsys_meta("TARGET_INFO_GPU", "id", "NULL"), "id"),
    "TARGET_INFO_GPU name a blob": (_nsys_meta("TARGET_INFO_GPU", "name", "X'00ff'"), "name"),
    "TARGET_INFO_CUDA_DEVICE cudaId text": (_nsys_meta("TARGET_INFO_CUDA_DEVICE", "cudaId", "'zero'"), "cudaId"),
    "TARGET_INFO_CUDA_DEVICE gpuId real": (_nsys_meta("TARGET_INFO_CUDA_DEVICE", "gpuId", "0.5"), "gpuId"),
    "TARGET_INFO_CUDA_DEVICE pid text": (_nsys_meta("TARGET_INFO_CUDA_DEVICE", "pid", "'me'"), "pid"),
    "utcEpochNs text": (_nsys_meta("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", "'today'"), "utcEpochNs"),
    "utcEpochNs real": (_nsys_meta("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", "0.5"), "utcEpochNs"),
    "utcEpochNs beyond 2**62": (_nsys_meta("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", "9223372036854775807"),
                                "utcEpochNs"),
    "ANALYSIS_DETAILS startTime text": (_nsys_meta("ANALYSIS_DETAILS", "startTime", "'soon'"), "startTime"),
    "ANALYSIS_DETAILS stopTime blob": (_nsys_meta("ANALYSIS_DETAILS", "stopTime", "X'01'"), "stopTime"),
    "PROCESSES pid text": (_nsys_meta("PROCESSES", "pid", "'p'"), "pid"),
    "PROCESSES name a blob": (_nsys_meta("PROCESSES", "name", "X'05'"), "name"),
    "META_DATA_EXPORT value a blob": (_nsys_meta("META_DATA_EXPORT", "value", "X'00'"), "value"),
}
FILES = {**{f"kineto: {k}": v for k, v in KINETO.items()}, **{f"hatchet: {k}": v for k, v in HATCHET.items()},
         **{f"nsys: {k}": v for k, v in NSYS_META.items()}}


@pytest.mark.parametrize("case", spread(list(FILES), 3))
def test_value_checked_where_it_enters(case, tmp_path, capsys, monkeypatch):
    one_process(monkeypatch)
    make, fragment = FILES[case]
    path = make(tmp_path)
    line = assert_refused(capsys, tmp_path, ["breakdown", str(path)], fragment)
    assert line.startswith(f"tracelab: error: {path}: "), line


def _kineto_tid(cat, label):
    return _on_first(cat, tid=label)


# values that mean nothing harmful: read as the format says, exit 0
ACCEPTED = {
    "kineto: kernel tid label with a superscript digit": _kineto_tid("kernel", "stream \u00b2"),
    "kineto: runtime tid label with a superscript digit": _kineto_tid("cuda_runtime", "thread \u00b2"),
    "kineto: runtime pid label with an Arabic-Indic digit": _on_first("cuda_runtime", pid="proc \u0663"),
    "kineto: deviceProperties id 3.0": _device_props("id", 3.0),
    "hatchet: device_id as text": m.hatchet_metric(device_id="0"),
}


@slow_after(1)
@pytest.mark.parametrize("case", list(ACCEPTED))
def test_harmless_value_loads(case, tmp_path, capsys, monkeypatch):
    one_process(monkeypatch)
    path = ACCEPTED[case](tmp_path)
    status, _, err = m.run_cli_output(capsys, "breakdown", str(path), "--format", "csv")
    assert status == 0, err
    assert "Traceback" not in err
