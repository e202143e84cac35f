"""Scope trees, like proton-viewer's: every scope path and the kernels under it, with
inclusive time, calls and share of the root; and the tree of differences between two
inputs, aligned on the path (like proton-viewer --diff-profile). Pure: events frames in,
node frames out; `tree_html` renders nested <details> that open and close offline.
"""
from __future__ import annotations

import html

import pandas as pd

from ..fmt import ms

CHILDREN_SHOWN = 40  # per node; the rest are one "N more" line
OPEN_DEPTH = 1  # levels open when the page loads: none, each opens on click (a tree is long)


def scope_tree(events: pd.DataFrame) -> pd.DataFrame:
    """One row per node (every prefix of scope/kernel paths): path (a tuple), depth, name,
    is_kernel, time_ns (inclusive: the kernels under it) and count. Sorted parents first."""
    leaves = (events.assign(scope=events["scope"].fillna("").astype(str), kernel=events["kernel"].astype(str))
              .groupby(["scope", "kernel"], sort=False)[["dur_ns", "count"]].sum())
    time: dict[tuple, int] = {}
    count: dict[tuple, int] = {}
    for (scope, kernel), row in leaves.iterrows():
        path = tuple(p for p in scope.split("/") if p) + (kernel,)
        for depth in range(1, len(path) + 1):
            key = path[:depth] if depth < len(path) else path + ("",)  # a kernel leaf never merges with a scope
            time[key] = time.get(key, 0) + int(row["dur_ns"])
            count[key] = count.get(key, 0) + int(row["count"])
    rows = [{"path": k if k[-1] else k[:-1], "key": k, "depth": len(k) - (0 if k[-1] else 1),
             "name": (k if k[-1] else k[:-1])[-1], "is_kernel": not k[-1], "time_ns": t, "count": count[k]}
            for k, t in time.items()]
    return pd.DataFrame(rows, columns=["path", "key", "depth", "name", "is_kernel", "time_ns", "count"])


def tree_diff(first: pd.DataFrame, second: pd.DataFrame) -> pd.DataFrame:
    """Two scope trees aligned on their node keys: first_ns, second_ns (0 where a node is
    only in the other) and delta_ns = second - first."""
    a, b = scope_tree(first).set_index("key"), scope_tree(second).set_index("key")
    out = a[["path", "depth", "name", "is_kernel"]].combine_first(b[["path", "depth", "name", "is_kernel"]])
    out["first_ns"] = a["time_ns"].reindex(out.index).fillna(0).astype("int64")
    out["second_ns"] = b["time_ns"].reindex(out.index).fillna(0).astype("int64")
    out["delta_ns"] = out["second_ns"] - out["first_ns"]
    out["time_ns"] = out[["first_ns", "second_ns"]].max(axis=1)
    return out.reset_index()


def _children(nodes: pd.DataFrame) -> dict[tuple, list[dict]]:
    """Parent path -> its children (records), largest first."""
    kids: dict[tuple, list[dict]] = {}
    for rec in nodes.sort_values("time_ns", ascending=False, kind="stable").to_dict("records"):
        kids.setdefault(tuple(rec["path"][:-1]), []).append(rec)
    return kids


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _cells(rec: dict, root_ns: float, diff: bool) -> str:
    if diff:
        delta_ms = round(rec["delta_ns"] / 1e6, 3)
        sign = "slower" if delta_ms > 0 else "faster" if delta_ms < 0 else ""
        return (f'<span class="v">{rec["first_ns"] / 1e6:,.3f}</span><span class="v">{rec["second_ns"] / 1e6:,.3f}</span>'
                f'<span class="v {sign}">{delta_ms:+,.3f}</span>'.replace("+0.000", "0.000").replace("-0.000", "0.000"))
    share = rec["time_ns"] / root_ns if root_ns else 0.0
    return (f'<span class="v">{rec["time_ns"] / 1e6:,.3f}</span><span class="v">{100 * share:.1f}%</span>'
            f'<span class="v">{rec["count"]:,}</span><span class="box"><span class="bar" style="width:{round(120 * share)}px">'
            "</span></span>")


def _node(rec: dict, kids: dict, root_ns: float, diff: bool) -> str:
    indent = f' style="padding-left:{14 * (rec["depth"] - 1)}px"'  # numbers stay in columns; names step in
    name = f'<span class="{"k" if rec["is_kernel"] else "s"}"{indent}>{_e(rec["name"])}</span>'
    line = _cells(rec, root_ns, diff) + name
    mine = [] if rec["is_kernel"] else kids.get(tuple(rec["path"]), [])
    if not mine:
        return f'<div class="leaf">{line}</div>'
    return (f'<details{" open" if rec["depth"] < OPEN_DEPTH else ""}><summary>{line}</summary>'
            + _level(mine, kids, root_ns, diff) + "</details>")


def _level(recs: list[dict], kids: dict, root_ns: float, diff: bool) -> str:
    shown = "".join(_node(r, kids, root_ns, diff) for r in recs[:CHILDREN_SHOWN])
    if len(recs) > CHILDREN_SHOWN:
        rest = sum(r["time_ns"] for r in recs[CHILDREN_SHOWN:])
        shown += f'<div class="leaf note">{len(recs) - CHILDREN_SHOWN} more ({ms(rest)})</div>'
    return f'<div class="kids">{shown}</div>'


def tree_html(nodes: pd.DataFrame, diff: bool = False) -> str:
    """Nested <details>: per node its time (ms), share of all and calls (or, for a diff,
    both times and the delta), children largest first."""
    kids = _children(nodes)
    top = kids.get((), [])
    root_ns = float(sum(r["time_ns"] for r in top))
    head = ("<span class=\"v\">first (ms)</span><span class=\"v\">second (ms)</span><span class=\"v\">delta (ms)</span>"
            if diff else "<span class=\"v\">time (ms)</span><span class=\"v\">share</span><span class=\"v\">calls</span>"
                         "<span class=\"box\"></span>")
    return f'<div class="tree"><div class="leaf head">{head}scope / kernel</div>{_level(top, kids, root_ns, diff)}</div>'


TREE_STYLE = """
.tree{font-size:13px}.tree summary,.tree .leaf{white-space:nowrap}.tree .leaf{padding-left:16px}
.tree .v{display:inline-block;width:84px;text-align:right;margin-right:8px;font-variant-numeric:tabular-nums}
.tree .box{display:inline-block;width:124px;margin-right:4px}
.tree .bar{display:inline-block;height:9px;background:#4c78a8;vertical-align:middle}
.tree .head{font-weight:600;color:#444}.tree .k{color:#555}.tree .s{font-weight:600}
.tree .slower{color:#c0392b}.tree .faster{color:#1e8449}
"""
