"""CUDA-graph replays in an nsys export, traced back to the calls that captured their nodes.

Under `nsys profile --cuda-graph-trace=node` every replayed kernel, copy and fill carries
`graphNodeId`, its node in the instantiated graph, and CUDA_GRAPH_NODE_EVENTS records each
node's creation (thread, time). Stream capture creates a node inside the launch call that
captured it; instantiating a graph clones its nodes, naming the node cloned
(`originalGraphNodeId`). Following the clones back to the first node gives the thread and the
moment of capture, and the row's scope is the NVTX ranges open there (nsys._scopes): by node
id, exact, whatever the streams. The row's step stays its replay's. A node created before the
process's first CUDA call in the file (captured before the capture range opened: nsys records
node creation, but no ranges, outside it) keeps the replay's scope, and a note says so.
"""
from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd

from tracelab.core.note import Note

ACTIVITY_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
_NODES = """SELECT graphNodeId AS node, originalGraphNodeId AS original, globalTid AS tid, start
            FROM CUDA_GRAPH_NODE_EVENTS WHERE graphNodeId IS NOT NULL AND globalTid IS NOT NULL"""
_KEY = ["globalPid", "correlationId", "stream", "start"]
MAX_CLONES = 64  # a clone of a clone of ...: deeper chains (or a cycle in a damaged file) stop here
PID_MASK = ~0xFFFFFF


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f"PRAGMA table_info({table})")}


def _replayed(con: sqlite3.Connection, tables: set[str]) -> pd.DataFrame:
    """The activity rows of graph nodes: their key (process, correlation, stream, start) and node."""
    parts = [pd.DataFrame(con.execute(
        f"SELECT globalPid, correlationId, streamId, start, graphNodeId FROM {t} "
        "WHERE graphNodeId IS NOT NULL AND globalPid IS NOT NULL AND correlationId IS NOT NULL").fetchall(),
        columns=[*_KEY, "node"]) for t in ACTIVITY_TABLES if t in tables and "graphNodeId" in _columns(con, t)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=[*_KEY, "node"])


def _origins(con: sqlite3.Connection) -> pd.DataFrame:
    """Per node id, the thread and time at which the node it was first cloned from was created."""
    nodes = pd.DataFrame(con.execute(_NODES).fetchall(), columns=["node", "original", "tid", "start"])
    cloned = nodes.dropna(subset=["original"]).drop_duplicates("node").set_index("node")["original"]
    made = nodes[nodes["original"].isna()].sort_values("start").drop_duplicates("node").set_index("node")
    root = pd.Series(nodes["node"].unique(), index=nodes["node"].unique())
    for _ in range(MAX_CLONES):
        parent = root.map(cloned)
        if parent.isna().all():
            break
        root = parent.fillna(root).astype("int64")
    return made[["tid", "start"]].reindex(root.to_numpy()).set_axis(root.index)


def capture_points(con: sqlite3.Connection, tables: set[str], activity: pd.DataFrame,
                   launches: pd.DataFrame) -> tuple[pd.DataFrame, list[Note]]:
    """`launches` (nsys._launches: row, tid, launch_ns) with a replayed row's thread and time
    replaced by its node's capture where the capture is in the file; and the notes."""
    replayed = _replayed(con, tables) if len(launches) else pd.DataFrame()
    if not len(replayed):
        return launches, []
    keys = activity.loc[launches["row"], ["globalPid", "correlationId", "stream", "start"]].reset_index(drop=True)
    node = keys.astype("int64").merge(replayed.astype("int64").drop_duplicates(_KEY), how="left", on=_KEY)["node"]
    origins = _origins(con) if "CUDA_GRAPH_NODE_EVENTS" in tables else pd.DataFrame({"tid": [], "start": []}, dtype="float64")
    at = origins.reindex(node.dropna().astype("int64").to_numpy())
    is_node = node.notna().to_numpy()
    never = np.iinfo(np.int64).min  # a node with no creation event: outside the trace
    tid, start = np.full(len(node), -1, dtype=np.int64), np.full(len(node), never)
    tid[is_node], start[is_node] = at["tid"].fillna(-1).to_numpy(np.int64), at["start"].fillna(never).to_numpy(np.int64)
    inside = is_node & (start >= _first_call_ns(con, tid))
    out = launches.copy()
    out.loc[inside, "tid"], out.loc[inside, "launch_ns"] = tid[inside], start[inside]
    return out, _notes(int(is_node.sum()), int((is_node & ~inside).sum()))


def _first_call_ns(con: sqlite3.Connection, tid: np.ndarray) -> np.ndarray:
    """Per thread id, the start of its process's first CUDA API call in the file (-1: none)."""
    first = dict(con.execute("SELECT globalTid & ?, MIN(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                             "WHERE globalTid IS NOT NULL GROUP BY 1", (PID_MASK,)).fetchall())
    big = np.iinfo(np.int64).max
    processes, at = np.unique(tid & PID_MASK, return_inverse=True)  # looked up once per process
    found = np.array([first.get(int(p), big) for p in processes], dtype=np.int64)[at.reshape(-1)]
    return np.where(tid >= 0, found, big)


def _notes(replayed_rows: int, outside_rows: int) -> list[Note]:
    if not outside_rows:
        return []
    return [Note("graph_nodes_captured_outside", {"outside_rows": int(outside_rows),
                                                  "node_rows": int(replayed_rows)})]
