"""Vectorised pieces of the Kineto parser (parsers/chrome.py): integer ids from pid/tid
labels, launches by correlation id, annotation scopes, top-level CPU operators,
collective payloads, device table."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tracelab.core import limits

from ._steps import main_threads


def to_ints(labels: list, fallback: list | None = None) -> np.ndarray:
    """Integer ids for pid/tid labels: the integer itself; else the integer `fallback`
    (args "device"/"stream"); else the number in a label such as "stream 7"; else a
    stable negative id, -1 - the label's place among such labels sorted."""
    try:
        return np.array(labels, dtype=np.int64)
    except (TypeError, ValueError):
        pass
    if fallback is not None:
        labels = [lab if isinstance(lab, int) or not isinstance(fb, int) else fb
                  for lab, fb in zip(labels, fallback)]
    found = {lab: _number_in(lab) for lab in set(labels)}
    unnumbered = sorted((lab for lab, n in found.items() if n is None), key=str)
    found.update({lab: -1 - i for i, lab in enumerate(unnumbered)})
    return np.array([found[lab] for lab in labels], dtype=np.int64)


def joined_ids(*parts: tuple[Any, str]) -> np.ndarray:
    """to_ints of the (collector, "pid" or "tid") columns joined, one id space: each column's
    integers (the collector's, made once) where every column is integers, the usual case."""
    arrays = [collector.ids(column) for collector, column in parts]
    if all(a is not None for a in arrays):
        return np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
    return to_ints([label for collector, column in parts for label in getattr(collector, column)])


def _number_in(label: Any) -> int | None:
    if isinstance(label, int):
        return label
    digits = limits.ascii_digits(str(label or ""))
    return None if digits is None else int(digits)


def launch_index(row_correlation: np.ndarray, launch_correlation: np.ndarray) -> np.ndarray:
    """Per row, the index of the launch event with the row's correlation id, -1 where
    there is none (ids < 0 mean "no id"); of launches sharing an id, the first."""
    known = np.flatnonzero(launch_correlation >= 0)
    ids, first = np.unique(launch_correlation[known], return_index=True)
    if not len(ids):
        return np.full(len(row_correlation), -1, dtype=np.int64)
    pos = np.minimum(np.searchsorted(ids, row_correlation), len(ids) - 1)
    found = (ids[pos] == row_correlation) & (row_correlation >= 0)
    return np.where(found, known[first[pos]], -1)


def scopes(pid: np.ndarray, tid: np.ndarray, at_ns: np.ndarray, ranges: dict, depth: np.ndarray | None = None
           ) -> np.ndarray:
    """Per row, the names of the ranges on its pid and tid (GPU: device and stream; CPU:
    process and thread) that hold its time (range start <= at_ns < range end), outermost
    first, joined by "/"; "" where none does.

    Ranges of one depth on one pid and tid never overlap, so each depth is one searchsorted."""
    if not len(ranges["name"]) or not len(at_ns):
        return np.full(len(at_ns), "", dtype=object)
    depth = _depths(ranges) if depth is None else depth  # given: _depths(ranges) made already
    hit = np.full((len(at_ns), int(depth.max()) + 1), -1, dtype=np.int64)
    for p, t in set(zip(ranges["pid"].tolist(), ranges["tid"].tolist())):
        rows = np.flatnonzero((pid == p) & (tid == t))
        same = (ranges["pid"] == p) & (ranges["tid"] == t)
        for d in range(hit.shape[1]):
            idx = np.flatnonzero(same & (depth == d))
            idx = idx[np.argsort(ranges["start_ns"][idx], kind="stable")]
            pos = np.searchsorted(ranges["start_ns"][idx], at_ns[rows], side="right") - 1
            inside = pos >= 0
            inside[inside] = at_ns[rows[inside]] < ranges["end_ns"][idx[pos[inside]]]
            hit[rows[inside], d] = idx[pos[inside]]
    return _paths(hit, ranges["name"])


def thread_scopes(pid: np.ndarray, tid: np.ndarray, at_ns: np.ndarray, ranges: dict) -> np.ndarray:
    """scopes(), where a row launched by another thread than its process's main thread
    (the autograd thread, NCCL's hooks) gets the main thread's ranges open at that moment,
    with its own thread's ranges nested inside: `backward/...`, not "". The main thread of
    a process is the one whose ranges cover the most time (the loop that opens them)."""
    depth = _depths(ranges) if len(ranges["name"]) else None
    own = scopes(pid, tid, at_ns, ranges, depth)
    main = main_threads(ranges["pid"], ranges["tid"], ranges["end_ns"] - ranges["start_ns"])
    main_tid = np.array(tid, dtype=np.int64)
    for p, t in main.items():  # a few processes
        main_tid[pid == p] = t
    other = np.flatnonzero(main_tid != tid)
    if len(other):
        outer = scopes(pid[other], main_tid[other], at_ns[other], ranges, depth)
        own[other] = [f"{o}/{s}" if o and s else o or s for o, s in zip(outer, own[other])]
    return own


def _paths(hit: np.ndarray, names: list[str]) -> np.ndarray:
    """Per row of `hit` (range indices by depth, -1 = none), the names joined by "/";
    each distinct row is joined once (ids of distinct rows built column by column, renumbered
    only where the next column could overflow int64)."""
    key, bound, base = np.zeros(len(hit), dtype=np.int64), 1, len(names) + 1  # every key < bound
    for column in hit.T:
        if bound * base >= 2**62:
            key, bound = np.unique(key, return_inverse=True)[1].reshape(-1), len(hit)
        key, bound = key * base + column + 1, bound * base
    _, first, key = np.unique(key, return_index=True, return_inverse=True)
    key = key.reshape(-1)
    paths = ["/".join(names[i] for i in hit[row] if i >= 0) for row in first]
    return np.array(paths, dtype=object)[key]


def _depths(ranges: dict) -> np.ndarray:
    """Nesting depth of each range among the ranges on its pid and tid (0 = outermost)."""
    order = np.lexsort((-ranges["end_ns"], ranges["start_ns"], ranges["tid"], ranges["pid"]))
    depth = np.zeros(len(order), dtype=np.int64)
    open_ranges: list[tuple[int, int, int]] = []  # (pid, tid, end_ns) of enclosing ranges
    for i in order.tolist():
        key = (int(ranges["pid"][i]), int(ranges["tid"][i]))
        start, end = int(ranges["start_ns"][i]), int(ranges["end_ns"][i])
        while open_ranges and (open_ranges[-1][:2] != key or open_ranges[-1][2] <= start):
            open_ranges.pop()
        depth[i] = len(open_ranges)
        open_ranges.append((*key, end))
    return depth


def cpu_top_level(pid: np.ndarray, tid: np.ndarray, start_ns: np.ndarray, dur_ns: np.ndarray) -> np.ndarray:
    """Mask of CPU operators not inside an earlier one on the same thread (start >= the
    latest end so far on that thread; an operator that starts inside another is nested)."""
    order = np.lexsort((-dur_ns, start_ns, tid, pid))
    first = np.r_[True, (pid[order][1:] != pid[order][:-1]) | (tid[order][1:] != tid[order][:-1])]
    start, end = start_ns[order] - start_ns.min(), start_ns[order] - start_ns.min() + dur_ns[order]
    shift = (np.cumsum(first) - 1) * (int(end.max()) + 1)  # keeps threads apart in one running max
    latest_end = np.maximum.accumulate(end + shift)
    top = first | (start + shift >= np.r_[0, latest_end[:-1]])
    mask = np.empty(len(order), dtype=bool)
    mask[order] = top
    return mask


# c10 ScalarType names as Kineto writes them in "dtype"
DTYPE_BYTES = {"Byte": 1, "Char": 1, "Bool": 1, "Short": 2, "Int": 4, "Long": 8, "Half": 2,
               "Float": 4, "Double": 8, "BFloat16": 2, "ComplexHalf": 4, "ComplexFloat": 8,
               "ComplexDouble": 16, "UInt16": 2, "UInt32": 4, "UInt64": 8, "QInt8": 1,
               "QUInt8": 1, "QInt32": 4, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
               "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1, "Float8_e8m0fnu": 1}


def collective_bytes(args: list) -> np.ndarray:
    """Payload of each collective kernel: the larger of "In msg nelems" and "Out msg nelems"
    times the dtype's size (nccl-tests' "size": all-gather's output, reduce-scatter's
    input); NaN where the args or the dtype are missing."""
    out = np.full(len(args), np.nan)
    for i, a in enumerate(args):
        if a is None or a.dtype not in DTYPE_BYTES:
            continue
        nelems = [v for v in (a.in_nelems, a.out_nelems) if isinstance(v, (int, float))]
        if nelems:
            out[i] = max(nelems) * DTYPE_BYTES[a.dtype]
    return out


def process_groups(args: list) -> list[str]:
    """A collective kernel's process group (args "Process Group Name", "0" for the default
    group), "" where the trace does not say: collectives match across ranks within it."""
    return ["" if a is None or a.process_group is None else str(a.process_group) for a in args]


def device_table(properties: Any, path: Path | str = "", key: str = "deviceProperties") -> dict[int, dict[str, Any]]:
    """device index -> properties from Kineto's deviceProperties (or the older computeProperties,
    named by `key`), units in the key names; a TraceFormatError naming the entry and field whose
    value is of the wrong type."""
    devices: dict[int, dict[str, Any]] = {}
    if properties is not None and not isinstance(properties, list):
        raise limits.TraceFormatError(path, f"{key} is {type(properties).__name__}, not a list")
    for i, props in enumerate(properties or []):
        if not isinstance(props, dict):
            continue
        at = f"{key}[{i}]"
        name = limits.text(path, f"{at}.name", props.get("name"), optional=True)
        major, minor = (limits.whole(path, f"{at}.{k}", props.get(k), (0, 1000), optional=True)
                        for k in ("computeMajor", "computeMinor"))
        index = limits.whole(path, f"{at}.id", props.get("id", i), limits.INT16)
        devices[index] = {
            "type": "HIP" if "AMD" in str(name) or props.get("warpSize") == 64 else "CUDA",
            "name": name, "arch": None if major is None else f"{major}{minor or 0}",
            "num_sms": limits.whole(path, f"{at}.numSms", props.get("numSms"), (0, 2**20), optional=True),
            "memory_bytes": limits.whole(path, f"{at}.totalGlobalMem", props.get("totalGlobalMem"), (0, 2**62),
                                         optional=True),
            "warp_size": limits.whole(path, f"{at}.warpSize", props.get("warpSize"), (0, 1024), optional=True),
            "shared_memory_per_sm_bytes": limits.whole(path, f"{at}.sharedMemPerMultiprocessor",
                                                       props.get("sharedMemPerMultiprocessor"), (0, 2**40),
                                                       optional=True),
        }
    return devices
