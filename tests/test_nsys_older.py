"""nsys exports from 2021 on, each shape as the nsys of its time wrote it (tests/helpers.NSYS_SHAPES):
nsys 2021.1's TARGET_INFO_CUDA_GPU (keyed by deviceId) and no ENUM tables, NVTX texts inline
without textId, nsys 2022.2's EXPORT_META_DATA, nsys 2024.5's META_DATA_EXPORT and ENUM tables,
and one without any GPU table. Each is read into the same names, devices, steps, scopes and
version as the tables say, recomputed here with sqlite3; what a shape lacks is said in a note."""
from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

import tracelab
from helpers import NSYS_SHAPES, nsys_export
from tracelab.core.errors import TraceFormatError

# nsys's memory kinds as nsys 2021.1.1's own reports name them without ENUM tables (0-3 unchanged since)
MEMORY_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array"}
COPY_KINDS = {1: "HtoD", 2: "DtoH", 8: "DtoD"}  # CUpti_ActivityMemcpyKind


def _export(tmp_path: Path, shape: str) -> Path:
    """Two ProfilerStep ranges, each a `forward` range around a kernel and a pageable HtoD copy."""
    ops, ranges = [], []
    for step in (1, 2):
        t = step * 1_000_000
        ranges += [(t, t + 900_000, f"ProfilerStep#{step}"), (t + 10_000, t + 400_000, "forward")]
        ops.append({"kind": "kernel", "name": "void gemm<float>(float*)", "start": t + 30_000, "end": t + 230_000,
                    "stream": 7, "call": (t + 20_000, t + 25_000, "cudaLaunchKernel_v7000")})
        ops.append({"kind": "memcpy", "name": "", "start": t + 500_000, "end": t + 520_000, "stream": 7,
                    "copy_kind": 1, "src_kind": 0, "dst_kind": 2, "call": (t + 450_000, t + 530_000, "cudaMemcpy_v3020")})
    return nsys_export(tmp_path / f"{shape}.sqlite", shape, ops, ranges, device="NVIDIA A100-SXM4-80GB")


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _truth(path: Path) -> dict:
    """What the tables say, by sqlite3 alone: per GPU op in start order its name, step and scope
    (the NVTX ranges open at its launch call's start), the device's name and the nsys version."""
    with closing(sqlite3.connect(path)) as con:
        tables = _tables(con)
        nvtx = {r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
        text = "COALESCE(n.text, s.value)" if "textId" in nvtx else "n.text"
        join = "LEFT JOIN StringIds s ON s.id = n.textId" if "textId" in nvtx else ""
        ranges = con.execute(f"SELECT n.start, n.end, {text} FROM NVTX_EVENTS n {join}").fetchall()
        kinds = (dict(con.execute("SELECT id, label FROM ENUM_CUDA_MEM_KIND")) if "ENUM_CUDA_MEM_KIND" in tables
                 else MEMORY_KINDS)
        ops = con.execute("""
            SELECT k.start, s.value, r.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
            JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)""").fetchall()
        ops += [(start, f"Memcpy {COPY_KINDS[kind]} ({kinds[src]} -> {kinds[dst]})", call) for start, kind, src, dst, call
                in con.execute("""SELECT m.start, m.copyKind, m.srcKind, m.dstKind, r.start FROM CUPTI_ACTIVITY_KIND_MEMCPY m
                                  JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)""")]
        gpu = next((t for t in ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU") if t in tables), None)
        meta = next((t for t in ("META_DATA_EXPORT", "EXPORT_META_DATA") if t in tables), None)
        device = con.execute(f"SELECT name FROM {gpu}").fetchone()[0] if gpu else None
        version = (con.execute(f"SELECT value FROM {meta} WHERE name = 'EXPORT_PRODUCT_VERSION'").fetchone()[0]
                   if meta else None)
    rows = []
    for start, name, call in sorted(ops):
        open_ = [t for s, e, t in sorted(ranges) if s <= call < e]
        step = [int(t.split("#")[1]) for t in open_ if t.startswith("ProfilerStep#")]
        rows.append((name, step[0] if step else None, "/".join(t for t in open_ if not t.startswith("ProfilerStep#"))))
    return {"rows": rows, "device": device, "version": version, "gpu_table": gpu, "meta_table": meta}


@pytest.mark.parametrize("shape", sorted(NSYS_SHAPES))
def test_each_nsys_shape_reads_as_its_tables_say(tmp_path, shape):
    path = _export(tmp_path, shape)
    truth = _truth(path)
    p = tracelab.load(path)
    ev = p.events.sort_values("start_ns")
    got = list(zip(ev["name"], ev["step"].astype("object").where(ev["step"].notna(), None), ev["scope"]))
    assert got == truth["rows"]
    assert p.meta.devices[0].get("name") == truth["device"]
    assert p.meta.profiler_version == truth["version"]
    missing = [n.values["tables"] for n in p.meta.notes if n.code == "nsys_tables_missing"]
    expected = [t for t, there in (("TARGET_INFO_GPU", truth["gpu_table"]), ("META_DATA_EXPORT", truth["meta_table"]))
                if not there]
    assert missing == ([expected] if expected else [])


def test_the_older_gpu_table_gives_the_device_its_properties(tmp_path):
    """nsys 2021.1's TARGET_INFO_CUDA_GPU: SMs, clock (Hz) and compute capability under its own column names."""
    path = _export(tmp_path, "2021.1")
    with closing(sqlite3.connect(path)) as con:
        sms, clock_hz, major, minor = con.execute("SELECT numMultiprocessors, coreClockRate, computeCapabilityMajor, "
                                                  "computeCapabilityMinor FROM TARGET_INFO_CUDA_GPU").fetchone()
    device = tracelab.load(path).meta.devices[0]
    assert (device["num_sms"], device["clock_khz"], device["arch"]) == (sms, clock_hz / 1e3, f"{major}{minor}")


def test_an_older_gpu_table_without_its_key_is_refused_naming_it(tmp_path):
    path = _export(tmp_path, "2021.1")
    with closing(sqlite3.connect(path)) as con:
        con.execute("ALTER TABLE TARGET_INFO_CUDA_GPU RENAME COLUMN deviceId TO gpuIndex")
        con.commit()
    with pytest.raises(TraceFormatError, match="TARGET_INFO_CUDA_GPU has no column deviceId"):
        tracelab.load(path)
