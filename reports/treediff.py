"""Tree diff of two proton profiles, like proton-viewer --diff-profile: the trees are
aligned node by node with llnl-hatchet's GraphFrame.unify, then subtracted.
llnl-hatchet is optional (pip install 'tracelab[tree]'); it is imported only here.
"""
from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import ToolMissingError, TraceFormatError


_LEGACY_METRICS = {"Time (ns)": "time (ns)", "Count": "count", "DeviceId": "device_id", "DeviceType": "device_type"}
_LAUNCH_METADATA = "__proton_launch_metadata"


def _proton_root(path: Path) -> dict:
    """The tree of a proton hatchet file, legacy metric names renamed, launch-metadata
    frames replaced by their children (they are proton's bookkeeping, not scopes)."""
    try:
        data = path.read_bytes()
        doc = json.loads(gzip.decompress(data) if data.startswith(b"\x1f\x8b") else data)
    except (OSError, EOFError, zlib.error, ValueError) as e:
        raise TraceFormatError(path, f"not proton hatchet JSON ({e})") from None
    if not isinstance(doc, list) or not doc or not isinstance(doc[0], dict) or "frame" not in doc[0]:
        raise TraceFormatError(path, "not a proton hatchet profile: expected [root, device_info]")
    return _clean(doc[0], path)


def _clean(node: dict, path: Path) -> dict:
    try:
        frame = {"name": str(node["frame"]["name"]), "type": node["frame"].get("type", "function")}
        metrics = {_LEGACY_METRICS.get(k, k): v for k, v in node.get("metrics", {}).items()
                   if isinstance(v, (int, float, str)) and not k.endswith(("(exc)", "(pty)"))}
        children = []
        for child in node.get("children", []):
            child = _clean(child, path)
            children.extend(child["children"] if child["frame"]["name"] == _LAUNCH_METADATA else [child])
    except (KeyError, TypeError, AttributeError) as e:
        raise TraceFormatError(path, f"a malformed tree node ({type(e).__name__}: {e})") from None
    return {"frame": frame, "metrics": metrics, "children": children}


def tree_diff(path_a: str | Path, path_b: str | Path) -> pd.DataFrame:
    """Two proton trees aligned node by node (hatchet's unify), then subtracted, like
    proton-viewer --diff-profile. One row per node, parents before children:
    node, parent (-1 at the root), depth, name, is_kernel, first_ns and second_ns
    (inclusive time; NaN where the node is only in the other tree), delta_ns (second - first,
    a missing node counting 0), only_in ("first", "second" or "")."""
    try:
        import hatchet
    except ImportError:
        raise ToolMissingError("llnl-hatchet", "tree diffs need it: pip install 'tracelab[tree]'") from None
    frames = []
    for path in (Path(path_a), Path(path_b)):
        gf = hatchet.GraphFrame.from_literal([_proton_root(path)])
        if "time (ns)" not in gf.dataframe.columns:
            raise TraceFormatError(path, "no 'time (ns)' metric in the tree")
        gf.update_inclusive_columns()
        frames.append(gf)
    first, second = frames
    first.unify(second)
    return _tree_rows(first, second)


def _by_node(gf, column: str) -> dict[int, float]:
    """column of a GraphFrame keyed by id(node): unify adds missing rows only to `self`."""
    values = gf.dataframe[column] if column in gf.dataframe.columns else pd.Series(np.nan, index=gf.dataframe.index)
    return {id(node): value for node, value in values.items()}


def _tree_rows(first, second) -> pd.DataFrame:
    a, b = _by_node(first, "time (ns) (inc)"), _by_node(second, "time (ns) (inc)")
    dev_a, dev_b = _by_node(first, "device_id"), _by_node(second, "device_id")
    ids: dict[int, int] = {}
    rows = []
    for node in first.graph.traverse(order="pre"):
        if id(node) in ids:
            continue
        ids[id(node)] = len(rows)
        rows.append({"node": len(rows), "parent": ids[id(node.parents[0])] if node.parents else -1,
                     "depth": node._depth, "name": str(node.frame.get("name")),
                     "is_kernel": pd.notna(dev_a.get(id(node))) or pd.notna(dev_b.get(id(node))),
                     "first_ns": a.get(id(node), np.nan), "second_ns": b.get(id(node), np.nan)})
    out = pd.DataFrame(rows).astype({"first_ns": "float64", "second_ns": "float64"})
    out["delta_ns"] = out["second_ns"].fillna(0) - out["first_ns"].fillna(0)
    out["only_in"] = np.select([out["first_ns"].isna(), out["second_ns"].isna()], ["second", "first"], "")
    return out
