"""One reader per format: the hatchet parser serves both the events (read) and the call
tree (tree) that the tree diff aligns; both decode and check the file the same way."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracelab.core.errors import TraceFormatError
from tracelab.parsers import hatchet

DATA = Path(__file__).resolve().parent / "data"
FILES = [DATA / "proton-legacy" / "triton-legacy.hatchet", DATA / "decode-1gpu-proton" / "rank0.hatchet"]


def _nodes(node: dict):
    yield node
    for child in node["children"]:
        yield from _nodes(child)


def _raw_kernel_ns(node: dict) -> int:
    """Kernel time straight from the file's JSON: nodes carrying a device id, either spelling."""
    metrics = node.get("metrics", {})
    own = metrics.get("time (ns)", metrics.get("Time (ns)", 0)) if ("device_id" in metrics or "DeviceId" in metrics) else 0
    return own + sum(_raw_kernel_ns(c) for c in node.get("children", []))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.parent.name)
def test_tree_and_events_agree_with_the_file(path: Path) -> None:
    root = hatchet.tree(path)
    nodes = list(_nodes(root))
    kernels = [n for n in nodes if "device_id" in n["metrics"]]
    raw = json.loads(path.read_text())[0]
    assert sum(n["metrics"]["time (ns)"] for n in kernels) == _raw_kernel_ns(raw)
    assert sum(n["metrics"]["time (ns)"] for n in kernels) == int(hatchet.read(path).events["dur_ns"].sum())
    assert not any(n["frame"]["name"] == hatchet.LAUNCH_METADATA for n in nodes)
    assert not any(k in n["metrics"] for n in nodes for k in ("Time (ns)", "Count", "DeviceId"))


BROKEN = {
    "children not a list": [{"frame": {"name": "ROOT"}, "metrics": {}, "children": {"a": 1}}, {}],
    "node without a name": [{"frame": {"name": "ROOT"}, "metrics": {}, "children": [{"frame": {}, "metrics": {}}]}, {}],
    "metrics not an object": [{"frame": {"name": "ROOT"}, "metrics": {},
                               "children": [{"frame": {"name": "k"}, "metrics": [1], "children": []}]}, {}],
    "not a tree": {"traceEvents": []},
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_tree_refuses_what_read_refuses_with_the_same_reason(case: str, tmp_path: Path) -> None:
    path = tmp_path / "rank0.hatchet"
    path.write_text(json.dumps(BROKEN[case]))
    with pytest.raises(TraceFormatError) as from_read:
        hatchet.read(path)
    with pytest.raises(TraceFormatError) as from_tree:
        hatchet.tree(path)
    assert str(from_tree.value) == str(from_read.value)
