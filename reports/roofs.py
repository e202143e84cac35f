"""The least time an op could take on a device: its roofline time, max(flops / peak FLOP/s of
its dtype, traffic bytes / bandwidth), never under the fastest op of its kind in the trace. A
shared model of ops: the roofline topic reports against it, the whatif topic's graph gives each
GPU op it as the floor of a scenario. The traffic rules: reports/roofline/roofline.py's docstring."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracelab.core.devices import Device
from tracelab.core.schema import Meta


def traffic(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(HBM bytes, host-link bytes) per row (the rules: reports/roofline/roofline.py's docstring)."""
    moved = events["bytes"].to_numpy(dtype=np.float64)
    copy = (events["kind"] == "memcpy").to_numpy()
    device_to_device = copy.copy()  # of the copies, those within or between devices (names tested: copies only)
    device_to_device[copy] = (events["name"][copy].astype(str).str.contains(r"DtoD|Device -> Device|PtoP", regex=True)
                              .to_numpy(dtype=bool))
    host = copy & ~device_to_device
    hbm = np.where(device_to_device, 2 * moved, np.where(host, np.nan, moved))
    return hbm, np.where(host, moved, np.nan)


def min_ns_of(events: pd.DataFrame, device: Device | None, dtype: np.ndarray | None = None,
            moved: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(min_ns, compute_ns, memory_ns) per row; NaN where no roof applies or no work is known.
    `dtype` (the rows' dtype as str) and `moved` (traffic's), where the caller has them."""
    n = len(events)
    if device is None:
        nan = np.full(n, np.nan)
        return nan, nan, nan
    codes, dtypes = pd.factorize(events["dtype"].astype(str).to_numpy() if dtype is None else dtype)  # a peak per dtype
    peak = np.array([device.peak_tflop_s(d) or np.nan for d in dtypes], dtype=np.float64)[codes]
    compute_ns = events["flops"].to_numpy(dtype=np.float64) / (peak * 1e3)  # TFLOP/s = 1e3 FLOP/ns
    hbm, host = traffic(events) if moved is None else moved
    memory_ns = hbm / device.hbm_gb_s  # GB/s = bytes/ns
    if device.host_link_gb_s:
        memory_ns = np.where(np.isnan(host), memory_ns, host / device.host_link_gb_s)
    return np.fmax(compute_ns, memory_ns), compute_ns, memory_ns


def least_time_ns(events: pd.DataFrame, min_ns: np.ndarray) -> np.ndarray:
    """The least time each row could take: its roofline time (`min_ns`, NaN unknown), but never
    under the least duration of any row of its kind (kernel, memcpy, memset) among `events`, one
    rank's: no op runs faster than the fastest of its kind in the trace (a kernel's fixed cost of
    some microseconds: 16 bytes in 5 us lose nothing to the roofline)."""
    kind = events["kind"]
    codes = (kind.cat.codes.to_numpy() if isinstance(kind.dtype, pd.CategoricalDtype) else pd.factorize(kind)[0])
    if not len(codes):
        return min_ns
    least = np.full(int(codes.max()) + 1, np.inf)
    np.minimum.at(least, codes, events["dur_ns"].to_numpy(dtype=np.float64))
    return np.where(np.isnan(min_ns), min_ns, np.fmax(min_ns, least[codes]))


def trace_device(meta: Meta) -> Device | None:
    """The table's entry for the first GPU the trace's meta names (tracelab/devices.detect)."""
    from tracelab.core.devices import detect

    for props in meta.devices.values():
        if isinstance(props, dict) and (found := detect(props)):
            return found
    return None
