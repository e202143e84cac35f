"""proton hatchet parser: real examples and a legacy conversion, totals from an
independent walk of the JSON, synthetic trees for the corner cases, broken inputs."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
from helpers import shared_trace

import tracelab
from tracelab.core.errors import TraceFormatError
from tracelab.parsers import hatchet

DATA = Path(__file__).resolve().parent / "data"
# Triton's proton-viewer examples (public, found by helpers.shared_trace) and our legacy conversion
FILES = [f"proton/{name}" for name in ("cuda.json", "frame.json", "hip.json", "triton.json")] + \
    sorted((DATA / "proton-legacy").glob("*.hatchet"))

# file name -> the (name, scope) of each kernel row, read by eye from the file
SCOPES = {
    "cuda.json": {("foo0", ""), ("foo1", "")},
    "hip.json": {("foo0", ""), ("foo1", "")},
    "frame.json": {("/home/user/projects/example.py/test.py:foo@1", "test0"), ("test1", "")},
    "triton.json": {("cuda_kernel", "scope"), ("triton_kernel", "scope")},  # not under __proton_launch_metadata
    "triton-legacy.hatchet": {("cuda_kernel", "scope"), ("triton_kernel", "scope")},
}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _expected(path: Path) -> dict:
    """Totals straight from the JSON: every node with a device id is one kernel row."""
    out = {"rows": 0, "time_ns": 0, "count": 0, "flops": 0.0, "bytes": 0.0, "by_device": {}}

    def visit(node: dict) -> None:
        m = node.get("metrics", {})
        device = m.get("device_id", m.get("DeviceId"))
        if device is not None:
            t = m.get("time (ns)", m.get("Time (ns)"))
            out["rows"] += 1
            out["time_ns"] += t
            out["count"] += m.get("count", m.get("Count"))
            out["flops"] += sum(v for k, v in m.items() if k.startswith("flops"))
            out["bytes"] += m.get("bytes", 0.0)
            out["by_device"][int(device)] = out["by_device"].get(int(device), 0) + t
        for child in node.get("children", []):
            visit(child)

    visit(json.loads(path.read_text())[0])
    return out


@pytest.mark.parametrize("path", FILES, ids=lambda p: Path(p).name)
def test_totals_match_the_json(path: Path | str) -> None:
    path = shared_trace(path) if isinstance(path, str) else path
    before = _sha(path)
    profile = hatchet.read(path)
    df, want = profile.events, _expected(path)
    assert len(df) == want["rows"]
    assert df["dur_ns"].sum() == want["time_ns"]
    assert df["count"].sum() == want["count"]
    assert df["flops"].fillna(0).sum() == pytest.approx(want["flops"])
    assert df["bytes"].fillna(0).sum() == pytest.approx(want["bytes"])
    assert df.groupby("device")["dur_ns"].sum().to_dict() == want["by_device"]
    assert set(zip(df["name"], df["scope"])) == SCOPES[path.name]
    assert (df["source"] == "proton").all() and (df["kind"] == "kernel").all()
    assert df["start_ns"].isna().all() and df["stream"].isna().all() and (df["rank"] == -1).all()
    assert profile.meta.source == "proton" and profile.meta.rank is None
    assert _sha(path) == before


def test_metric_generations() -> None:
    legacy = hatchet.read(DATA / "proton-legacy" / "triton-legacy.hatchet")
    current = hatchet.read(shared_trace("proton/triton.json"))
    assert legacy.meta.extras["metric_names"] == "triton-3.0/3.1"
    assert current.meta.extras["metric_names"] == "triton-3.2+"
    columns = ["name", "scope", "device", "dur_ns", "count", "bytes"]
    assert legacy.events[columns].equals(current.events[columns])


def test_device_info() -> None:
    devices = hatchet.read(shared_trace("proton/cuda.json")).meta.devices
    assert set(devices) == {0, 1}
    # arch 89, 10501 MHz GDDR6X on a 384-bit bus: the RTX 4090's published 1008 GB/s
    assert devices[0]["memory_bandwidth_gb_s"] == pytest.approx(1008.096)
    assert devices[1] == {"type": "CUDA", "arch": "90", "num_sms": 132, "clock_khz": 1980000,
                          "memory_clock_khz": 2619000, "bus_width_bits": 6144,
                          "memory_bandwidth_gb_s": pytest.approx(2 * 2619e6 * 6144 / 8 / 1e9)}
    assert hatchet.read(shared_trace("proton/hip.json")).meta.devices[1]["type"] == "HIP"


def test_load_detects_and_ranks_by_name(tmp_path: Path) -> None:
    target = tmp_path / "rank3.hatchet"
    target.write_bytes((shared_trace("proton/cuda.json")).read_bytes())
    profile = tracelab.load(target)
    assert profile.meta.rank == 3 and (profile.events["rank"] == 3).all()


# ---- synthetic trees for the corner cases --------------------------------------


def _node(name: str, metrics: dict | None = None, children: list | None = None) -> dict:
    return {"frame": {"name": name, "type": "function"}, "metrics": metrics or {}, "children": children or []}


def _kernel(name: str, time_ns: float, **extra) -> dict:
    return _node(name, {"time (ns)": time_ns, "count": 2, "device_id": "0", "device_type": "CUDA", **extra})


def _write(tmp_path: Path, doc, name: str = "p.hatchet") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_same_kernel_in_two_scopes_and_no_double_count(tmp_path: Path) -> None:
    tree = _node("ROOT", {"time (ns)": 0, "count": 0}, [
        # a scope whose own metrics hold time: it is not a kernel row
        _node("attn", {"time (ns)": 999, "count": 5, "flops16": 1e12}, [_kernel("gemm", 100)]),
        _node("mlp", {}, [_node("up", {}, [_kernel("gemm", 300, flops16=2e9, flops8=1e9)])]),
    ])
    profile = hatchet.read(_write(tmp_path, [tree]))
    df = profile.events.set_index("scope")
    assert sorted(df.index) == ["attn", "mlp/up"]
    assert df.loc["attn", "dur_ns"] == 100 and df.loc["mlp/up", "dur_ns"] == 300
    assert math.isnan(df.loc["attn", "flops"]) and df.loc["mlp/up", "flops"] == 3e9
    assert profile.meta.devices == {}
    # the width of the scope's FLOPs (flops16) is kept as its dtype class: the roofline's peak
    assert profile.meta.scope_metrics == {"attn": {"flops": 1e12, "dtype": "16-bit"}}
    assert df.loc["mlp/up", "dtype"] == "16-bit"  # 2e9 of its 3e9 FLOPs are flops16


def test_suffixed_metrics(tmp_path: Path) -> None:
    kernel = _node("k", {"time (ns) (inc)": 70, "time (ns) (exc)": 5, "count (inc)": 1,
                         "device_id": "1", "bytes (pty)": 8.0})
    df = hatchet.read(_write(tmp_path, [_node("ROOT", {}, [kernel])])).events
    assert df["dur_ns"].tolist() == [70] and df["device"].tolist() == [1]
    assert df["bytes"].isna().all()


BROKEN = {
    "empty": b"",
    "truncated": json.dumps([_node("ROOT", {}, [_kernel("k", 1)])]).encode()[:40],
    "object": b'{"traceEvents": []}',
    "empty list": b"[]",
    "list of garbage": b'[1, "two", null]',
    "root without frame": b'[{"metrics": {}, "children": []}]',
    "no kernels": json.dumps([_node("ROOT", {"time (ns)": 0}, [_node("scope")])]).encode(),
    "device id not a number": json.dumps([_node("ROOT", {}, [_kernel("k", 1, device_id="gpu0")])]).encode(),
    "kernel without time": json.dumps([_node("ROOT", {}, [_node("k", {"device_id": "0", "count": 1})])]).encode(),
    "negative time": json.dumps([_node("ROOT", {}, [_kernel("k", -5)])]).encode(),
    "children not a list": b'[{"frame": {"name": "ROOT"}, "metrics": {}, "children": 3}]',
    "device info not an object": json.dumps([_node("ROOT", {}, [_kernel("k", 1)]), [1]]).encode(),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_input(tmp_path: Path, case: str) -> None:
    path = tmp_path / "broken.hatchet"
    path.write_bytes(BROKEN[case])
    before = _sha(path)
    with pytest.raises(TraceFormatError) as err:
        hatchet.read(path)
    assert err.value.where == str(path) and err.value.reason
    assert _sha(path) == before
    if case == "no kernels":
        assert "no kernels recorded" in err.value.reason
