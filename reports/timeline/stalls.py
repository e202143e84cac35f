"""Host stalls: a rank's untraced host time after a sync or between steps, while its device
idles. Pure: one rank's events and host frame in, a frame of stalls (STALL_COLUMNS) out.

On a GPU trace a stall is a stretch in which no host thread of the rank runs a traced CPU
operator, launch call or synchronising call (any thread: the autograd thread's work counts), no
data-loader range or operator is open (that time is the loader's: reports/fixes/loader.py) and
no GPU op runs, and which either
- begins after a synchronising call (cudaStreamSynchronize, cudaDeviceSynchronize, a blocking
  device-to-host copy, the sync inside an `aten::item`) with nothing launched since: the host
  waited for the GPU to drain, then did work the profiler does not see (Python, a sleep, I/O)
  before launching more; `after` names that call (and the `.item()`-like operator around it), or
- holds a step boundary (a step range's start or end): the host between steps, its next batch
  not ready; `after` is BETWEEN_STEPS.
A gap of launches without a sync before it is the launches' own host time (CUDA graphs and
torch.compile take that off), not a stall.

On a CPU-only trace there is no device to drain and no sync call: the CPU operators are the
device's work. A stall there is a stretch in which no CPU operator runs on any thread (a gloo
collective's range on its worker thread counts as running) and no loader is open, within the
trace's operators; `after` names the operator that ended last before it, or BETWEEN_STEPS.

Only stretches of at least MIN_STALL_NS count (the Python between two operators takes
microseconds, a stall milliseconds), and only from the device's first work on and, in a trace with
step ranges, only where it ends inside a step (the step it delays; before the first step the
profiler's window opens and the job sets up, after the last the profiler flushes: their time,
not the steps').
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracelab.core.regexes import searched
from tracelab.core.schema import RankData, kind_mask

from .intervals import covered, merge_intervals, timed

STALL_COLUMNS = ["step", "start_ns", "end_ns", "stall_ns", "after"]
MIN_STALL_NS = 1_000_000
BETWEEN_STEPS = "between steps"
LOADER = re.compile(r"DataLoader|_DataLoaderIter|dataloader", re.IGNORECASE)  # a data loader's ranges and operators
# operators whose sync is a host read of a device value (`.item()`, `.cpu()`, `.tolist()`)
READS = frozenset({"aten::item", "aten::_local_scalar_dense", "aten::to", "aten::_to_copy", "aten::copy_",
                   "aten::tolist", "aten::nonzero", "aten::cpu"})
_STEP_NUMBER = re.compile(r"(\d+)(?!.*\d)")


def shared_stalls(rank: RankData) -> pd.DataFrame:
    """host_stalls of one rank, made once for the digests that read them (idle, whatif, fixes)."""
    return rank.shared("timeline.stalls", lambda: host_stalls(rank.events, rank.host, shared_loader_rows(rank)))


def shared_loader_rows(rank: RankData) -> np.ndarray:
    """loader_rows of the rank's host frame, made once for the stalls and the loader digest."""
    return rank.shared("timeline.loader_rows", lambda: loader_rows(rank.host))


def loader_rows(host: pd.DataFrame | None) -> np.ndarray:
    """Per row of the host frame, whether it is a data loader's range or operator (LOADER in its
    name): each distinct name searched once (bool array; empty where there is no host frame)."""
    if host is None or not len(host):
        return np.zeros(0, dtype=bool)
    return searched(LOADER, host["name"]) & kind_mask(host, ("cpu_op", "range"))


def host_stalls(events: pd.DataFrame, host: pd.DataFrame | None, loader: np.ndarray | None = None) -> pd.DataFrame:
    """The stalls of one rank (module docstring), by start, on the rank's own clock; `loader`: the
    host frame's loader_rows where the caller made them (made here otherwise)."""
    if host is None or not len(host):
        return _empty()
    loader = loader_rows(host) if loader is None else loader
    gpu = timed(events)
    if len(gpu) and gpu["start_ns"].notna().any():
        return _gpu_stalls(gpu, host, loader)
    cpu = events[(events["kind"] == "cpu_op") & events["start_ns"].notna()]
    return _cpu_stalls(cpu, host, loader)


def _empty() -> pd.DataFrame:
    return pd.DataFrame({"step": pd.Series(dtype="int64"), "start_ns": pd.Series(dtype="int64"),
                         "end_ns": pd.Series(dtype="int64"), "stall_ns": pd.Series(dtype="int64"),
                         "after": pd.Series(dtype=object)})


def _rows(host: pd.DataFrame, kinds: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, name) of the host frame's rows of `kinds`."""
    on = kind_mask(host, kinds)
    start = host["start_ns"].to_numpy(dtype=np.int64)[on]
    return start, start + host["dur_ns"].to_numpy(dtype=np.int64)[on], np.asarray(host["name"].array, dtype=object)[on]


def _loader(host: pd.DataFrame, loader: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of the host rows `loader` marks (loader_rows)."""
    start = host["start_ns"].to_numpy(dtype=np.int64)[loader]
    return start, start + host["dur_ns"].to_numpy(dtype=np.int64)[loader]


def _free(busy: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The gaps of at least MIN_STALL_NS between the union of the `busy` intervals, inside its
    first start and last end."""
    u0, u1 = merge_intervals(np.concatenate([s for s, _ in busy]), np.concatenate([e for _, e in busy]))
    g0, g1 = u1[:-1], u0[1:]
    long = g1 - g0 >= MIN_STALL_NS
    return g0[long], g1[long]


def _step_bounds(host: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, number) of the host's step ranges, by start."""
    start, end, name = _rows(host, ("step",))
    found = [_STEP_NUMBER.search(str(n)) for n in name]
    num = np.array([int(m.group(1)) if m else -1 for m in found], dtype=np.int64)
    order = np.argsort(start, kind="stable")
    return start[order], end[order], num[order]


def _holds(t: np.ndarray, g0: np.ndarray, g1: np.ndarray) -> np.ndarray:
    """Per gap [g0, g1], whether one of the sorted times `t` lies in it."""
    return np.searchsorted(t, g1, side="right") > np.searchsorted(t, g0, side="left")


def _frame(host: pd.DataFrame, g0: np.ndarray, g1: np.ndarray, after: np.ndarray, since_ns: int) -> pd.DataFrame:
    """The stalls of at least MIN_STALL_NS among gaps [g0, g1) with their `after` ("": no stall),
    from `since_ns` (the device's first work) on, each in the step whose range holds its end (the
    step it delays; between steps, where the gap holds a step boundary, the next step), else -1."""
    s0, s1, num = _step_bounds(host)
    between = _holds(np.sort(np.r_[s0[1:], s1]), g0, g1)  # the first step's start: the trace's, no boundary
    after = np.where(between, BETWEEN_STEPS, after)
    step = np.full(len(g0), -1, np.int64)
    if len(s0):
        i = np.maximum(np.searchsorted(s0, g1, side="left") - 1, 0)  # the latest step begun before the gap's end
        step = np.where((g1 > s0[0]) & (g1 <= s1[i]), num[i], -1)
        nxt = np.searchsorted(s0, g0, side="left")  # between steps: the step after it, the one it delays
        step = np.where(between & (step < 0) & (nxt < len(s0)), num[np.minimum(nxt, len(s0) - 1)], step)
    keep = (after != "") & (g1 - g0 >= MIN_STALL_NS) & (g0 >= since_ns)
    if len(s0):  # a stall delays a step: none before the first (the profiler's window opening) or after the last
        keep &= (g0 >= s0[0]) & (step >= 0)
    g0, g1, after, step = g0[keep], g1[keep], after[keep], step[keep]
    return pd.DataFrame({"step": step.astype(np.int64), "start_ns": g0.astype(np.int64), "end_ns": g1.astype(np.int64),
                         "stall_ns": (g1 - g0).astype(np.int64), "after": after.astype(object)})


def _gpu_stalls(gpu: pd.DataFrame, host: pd.DataFrame, loader: np.ndarray) -> pd.DataFrame:
    g_start = gpu["start_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    ok = ~np.isnan(g_start)
    g_start = g_start[ok].astype(np.int64)
    g_end = g_start + gpu["dur_ns"].to_numpy(dtype=np.int64)[ok]
    known = gpu["launch_start_ns"].notna().to_numpy()
    l_start = gpu["launch_start_ns"].to_numpy(dtype=np.float64, na_value=np.nan)[known].astype(np.int64)
    l_end = l_start + gpu["launch_dur_ns"].to_numpy(dtype=np.float64, na_value=0.0)[known].astype(np.int64)
    o_start, o_end, o_name = _rows(host, ("cpu_op",))
    y_start, y_end, y_name = _rows(host, ("sync",))
    g0, g1 = _free([(o_start, o_end), (y_start, y_end), (l_start, l_end), _loader(host, loader), (g_start, g_end)])
    return _frame(host, g0, g1, _after_sync(g0, y_end, y_name, l_start, (o_start, o_end, o_name)), int(g_start.min()))


def _after_sync(g0: np.ndarray, y_end: np.ndarray, y_name: np.ndarray, l_start: np.ndarray,
                ops: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """Per gap start, the sync call that ended last before it with no launch begun since
    (READS' operator around it named first: "aten::item (cudaStreamSynchronize)"), "" none."""
    out = np.full(len(g0), "", dtype=object)
    if not len(y_end) or not len(g0):
        return out
    order = np.argsort(y_end, kind="stable")
    y_end, y_name = y_end[order], y_name[order]
    k = np.searchsorted(y_end, g0, side="right") - 1
    ok = k >= 0
    launches = np.sort(l_start)
    ok &= ~_holds(launches, y_end[np.maximum(k, 0)] + 1, g0)  # nothing launched since the sync returned
    for j in np.flatnonzero(ok):
        out[j] = _read_around(int(y_end[k[j]]), str(y_name[k[j]]), ops)
    return out


def _read_around(end_ns: int, sync: str, ops: tuple[np.ndarray, np.ndarray, np.ndarray]) -> str:
    """`sync`, with the outermost READS operator holding its end before it where there is one."""
    start, end, name = ops
    holding = np.flatnonzero((start <= end_ns) & (end >= end_ns))
    holding = [i for i in holding[np.argsort(start[holding], kind="stable")].tolist() if str(name[i]) in READS]
    return f"{name[holding[0]]} ({sync})" if holding else sync


def _cpu_stalls(cpu: pd.DataFrame, host: pd.DataFrame, loader: np.ndarray) -> pd.DataFrame:
    start = cpu["start_ns"].to_numpy(dtype=np.int64)
    end = start + cpu["dur_ns"].to_numpy(dtype=np.int64)
    if not len(start):
        return _empty()
    g0, g1 = _free([(start, end), _loader(host, loader)])
    order = np.argsort(end, kind="stable")  # the operator that ended last before each gap
    k = np.searchsorted(end[order], g0, side="right") - 1
    names = cpu["name"].astype(str).to_numpy(dtype=object)[order]
    after = np.where(k >= 0, names[np.maximum(k, 0)], "").astype(object)
    return _frame(host, g0, g1, after, int(start.min()))


def stall_union(stalls: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The stalls as sorted disjoint (starts, ends)."""
    return merge_intervals(stalls["start_ns"].to_numpy(dtype=np.int64), stalls["end_ns"].to_numpy(dtype=np.int64))


def stall_ns_in(start: np.ndarray, end: np.ndarray, stalls: pd.DataFrame) -> np.ndarray:
    """Per interval [start, end), the ns of stalls inside it."""
    return covered(start, end, *stall_union(stalls))
