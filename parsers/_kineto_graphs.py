"""CUDA-graph replays in a Kineto trace, traced back to the launches that captured them.

A replay's GPU rows carry the correlation id of its `cudaGraphLaunch`, whose scope is the
replay's, not the code that made the kernels. The capture is in the trace when the profiler
ran during it: between `cudaStreamBeginCapture` and `cudaStreamEndCapture` on a thread, the
launch calls (`cudaLaunchKernel`, `cuLaunchKernelEx`, `cudaMemsetAsync`, ...) with no GPU row
of their own are the graph's nodes, in capture order, each inside the user ranges open then.
Kineto writes no graph or node id, so a replay is matched to a capture by its rows: the
latest capture before the launch, on its process, with as many nodes, of the same kinds in
the same order (kernel, memcpy, memset); its rows, in start order, take the nodes' launches
in capture order. That order is exact for a graph captured on one stream; a replay whose
rows ran on several streams may have concurrent branches swapped (`notes` says how many).
A replay with no such capture (captured before the profiler started) keeps its own scope.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

import numpy as np

from tracelab.core.note import Note

from ._steps import name_mask

_API = r"(?:cuda|cu|hip)"  # runtime, driver, ROCm (whose calls Kineto files as cuda_runtime too)
_BEGIN = re.compile(_API + r"StreamBeginCapture\w*")
_END = re.compile(_API + r"StreamEndCapture\w*")
GRAPH_LAUNCH = re.compile(_API + r"GraphLaunch\w*")
# calls that add a node that runs on the GPU when captured (host functions and events do not)
NODE_CALL = re.compile(_API + r"(?:Ext|Module)?(?:Launch\w*Kernel\w*|Memcpy\w*Async\w*|Memset\w*Async\w*)")


@dataclass
class Capture:
    """One stream capture: its process, end, and its nodes' launch indices and kinds in order."""

    pid: int
    end_ns: int
    nodes: np.ndarray
    kinds: tuple[str, ...]


@dataclass
class Replays:
    """Per GPU row, the launch whose scope it takes (-1: its own launch), and what to say."""

    scope_launch: np.ndarray
    notes: list[Note]
    captured: int = 0  # graph captures in the trace (begin to end)
    captured_calls: int = 0  # the launch calls inside them (they ran nothing then)


def _node_kind(call: str) -> str:
    return "memset" if "Memset" in call else "memcpy" if "Memcpy" in call else "kernel"


def captures(names: list[str], pid: np.ndarray, tid: np.ndarray, ts_ns: np.ndarray,
             launch_has_rows: np.ndarray) -> list[Capture]:
    """The stream captures among the launch calls (names, pid, tid, ts_ns): per thread, the
    node calls between a begin and an end capture call that launched no GPU row themselves."""
    begin, end = _matches(names, _BEGIN), _matches(names, _END)
    marks = np.flatnonzero(begin | end | (_matches(names, NODE_CALL) & ~launch_has_rows)).tolist()
    out: list[Capture] = []
    open_at: dict[tuple[int, int], list[int]] = {}  # thread -> node calls of its open capture
    for i in sorted(marks, key=lambda i: int(ts_ns[i])):
        thread = (int(pid[i]), int(tid[i]))
        if begin[i]:
            open_at[thread] = []
        elif end[i]:
            if (nodes := open_at.pop(thread, None)) is not None:
                out.append(Capture(thread[0], int(ts_ns[i]), np.array(nodes, dtype=np.int64),
                                   tuple(_node_kind(names[n]) for n in nodes)))
        elif thread in open_at:
            open_at[thread].append(i)
    return out


def scope_launches(names: list[str], pid: np.ndarray, tid: np.ndarray, ts_ns: np.ndarray, launch: np.ndarray,
                   row_kind: np.ndarray, row_start_ns: np.ndarray, row_stream: np.ndarray) -> Replays:
    """Per GPU row (`launch`: its launch call's index, -1 if none), the launch whose scope it
    takes: a replayed row its capture-time launch (module docstring), any other row its own."""
    has_rows = np.zeros(len(names), dtype=bool)
    has_rows[launch[launch >= 0]] = True
    found = captures(names, pid, tid, ts_ns, has_rows)
    graph_launch = _matches(names, GRAPH_LAUNCH)
    out = replays(graph_launch, pid, ts_ns, launch, row_kind, row_start_ns, row_stream, found)
    out.scope_launch = np.where(out.scope_launch >= 0, out.scope_launch, launch)
    out.captured = len(found)
    out.captured_calls = nodes = sum(len(c.nodes) for c in found)
    one_by_one = int(((launch >= 0) & ~graph_launch[np.maximum(launch, 0)]).sum()) if len(names) else 0
    if found and nodes >= one_by_one:  # a trace mostly of capturing
        out.notes.append(Note("graph_captures", {"captures": len(found), "launch_calls": int(nodes)}))
    return out


def _matches(names: list[str], pattern: re.Pattern) -> np.ndarray:
    """Mask of the names the pattern matches in full (each distinct name tried once)."""
    return name_mask(names, lambda n: pattern.fullmatch(n) is not None)


def replays(graph_launch: np.ndarray, pid: np.ndarray, ts_ns: np.ndarray, launch: np.ndarray, row_kind: np.ndarray,
            row_start_ns: np.ndarray, row_stream: np.ndarray, found: list[Capture]) -> Replays:
    """Per GPU row (`launch` as above), the capture-time launch it takes its scope from (-1:
    none), and notes on replays with no capture or on several streams. `graph_launch`: mask
    of the launch calls that launch a graph."""
    scope_launch = np.full(len(launch), -1, dtype=np.int64)
    by_key = _by_key(found)
    is_replay = (launch >= 0) & graph_launch[np.maximum(launch, 0)] if len(graph_launch) else launch < -1
    rows = np.flatnonzero(is_replay)
    rows = rows[np.lexsort((row_stream[rows], row_start_ns[rows], launch[rows]))]  # by launch, then start
    groups = np.split(rows, np.flatnonzero(np.diff(launch[rows])) + 1) if len(rows) else []
    outside = streams = outside_rows = 0
    for group in groups:
        call = int(launch[group[0]])
        capture = _matching(by_key, int(pid[call]), int(ts_ns[call]), tuple(row_kind[group].tolist()))
        if capture is None:
            outside, outside_rows = outside + 1, outside_rows + len(group)
            continue
        scope_launch[group] = capture.nodes
        streams += len(set(row_stream[group].tolist())) > 1
    return Replays(scope_launch, _notes(len(groups), outside, outside_rows, streams))


def _by_key(found: list[Capture]) -> dict[tuple, tuple[list[int], list[Capture]]]:
    """Captures by (process, node kinds), in the order they ended: their ends, and them."""
    out: dict[tuple, tuple[list[int], list[Capture]]] = {}
    for c in sorted(found, key=lambda c: c.end_ns):
        ends, same = out.setdefault((c.pid, c.kinds), ([], []))
        ends.append(c.end_ns)
        same.append(c)
    return out


def _matching(by_key: dict, pid: int, at_ns: int, kinds: tuple[str, ...]) -> Capture | None:
    """The latest capture of this process ended by `at_ns` whose nodes have these kinds."""
    ends, same = by_key.get((pid, kinds), ([], []))
    at = bisect.bisect_right(ends, at_ns)
    return same[at - 1] if at else None


def _notes(n_replays: int, outside: int, outside_rows: int, streams: int) -> list[Note]:
    notes = []
    if outside:
        notes.append(Note("replays_captured_outside", {"outside": int(outside), "replays": int(n_replays),
                                                       "gpu_rows": int(outside_rows)}))
    if streams:
        notes.append(Note("replays_on_streams", {"replays": int(streams)}))
    return notes
