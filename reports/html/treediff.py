"""Tree diff of two proton profiles, like proton-viewer --diff-profile: the trees are
aligned node by node with llnl-hatchet's GraphFrame.unify, then subtracted.
llnl-hatchet is optional (pip install 'tracelab[tree]'); it is imported only here. The
trees come from tracelab.parsers.hatchet.tree, the one reader of the format.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracelab.core.errors import ToolMissingError, TraceFormatError


def tree_diff(first: dict, second: dict, names: tuple[str, str] = ("first", "second")) -> pd.DataFrame:
    """Two proton trees (tracelab.parsers.hatchet.tree) aligned node by node (hatchet's
    unify), then subtracted, like proton-viewer --diff-profile. One row per node, parents
    before children: node, parent (-1 at the root), depth, name, is_kernel, first_ns and
    second_ns (inclusive time; NaN where the node is only in the other tree), delta_ns
    (second - first, a missing node counting 0), only_in ("first", "second" or "").
    `names` name the trees in errors."""
    try:
        import hatchet
    except ImportError:
        raise ToolMissingError("llnl-hatchet", "tree diffs need it: pip install 'tracelab[tree]'") from None
    frames = []
    for root, name in zip((first, second), names):
        gf = hatchet.GraphFrame.from_literal([root])
        if "time (ns)" not in gf.dataframe.columns:
            raise TraceFormatError(name, "no 'time (ns)' metric in the tree")
        gf.update_inclusive_columns()
        frames.append(gf)
    first_gf, second_gf = frames
    first_gf.unify(second_gf)
    return _tree_rows(first_gf, second_gf)


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
