"""Proton hatchet JSON -> the events schema.

Proton writes `[root, device_info]` (device_info may be missing): a tree of
frames `{frame: {name, type?}, metrics, children}`. Kernel nodes are the ones
whose metrics carry a device id; each becomes one row, aggregated over its
invocations (`count`), with `start_ns`/`stream` NA. A kernel that appears
under several scopes gives one row per scope.

Metric names of both generations are read:

    Triton 3.2+   time (ns)   count   device_id   device_type
    Triton 3.0/1  Time (ns)   Count   DeviceId    DeviceType

Metrics in the file are the node's own (exclusive) values, so summing kernel
rows never counts a kernel twice; interior nodes are scopes, not rows. A
metric name may carry a suffix: ` (inc)` is read when the bare name is
absent; ` (exc)` and ` (pty)` variants are ignored for our columns. Flops and
bytes recorded on a scope node rather than on its kernels (a user's
`proton.scope(name, {"flops16": n})`) are kept in `meta.scope_metrics`,
keyed by scope path, since they cannot be split among the scope's kernels.
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Iterator

import msgspec
import pandas as pd

from tracelab.core import limits, schema
from tracelab.core.errors import TraceFormatError
from tracelab.core.options import DEFAULT, Options, applying
from tracelab.core.schema import Meta, Profile

from ._steps import compile_pattern, step_of_scope

TIME_KEYS = ("time (ns)", "Time (ns)")
COUNT_KEYS = ("count", "Count")
DEVICE_ID_KEYS = ("device_id", "DeviceId")
FLOPS_KEYS = ("flops", "flops8", "flops16", "flops32", "flops64")
# the width of proton's flopsN metrics as a dtype class (tracelab/devices.py has a peak per class)
FLOPS_DTYPES = {"flops8": "8-bit", "flops16": "16-bit", "flops32": "fp32", "flops64": "fp64"}
BYTES_KEY = "bytes"
LAUNCH_METADATA = "__proton_launch_metadata"  # proton's own bookkeeping frame, not a user scope


@applying
def read(path: str | os.PathLike, options: Options = DEFAULT) -> Profile:
    """Read one proton hatchet file: one row per kernel node of the tree. Its step is
    always NA: a scope named like a step (`step 3`; `options.step_pattern`, parsers/_steps.py) is
    taken out of the scope, but not trusted as the kernels' step, because proton files a
    kernel under the scopes open on the thread that launched it, and autograd's thread has
    none of the main thread's: a real H100 training capture (tests/data/train-1gpu-steps-
    proton) holds the backward kernels of all four steps under `step 0`. Per-step figures
    come from totals divided by a step count (`tracelab steps --steps N` or run.json)."""
    path = Path(path)
    step_re = compile_pattern(options.step_pattern)
    root, device_info = _split(_decode(path), path)
    rows: list[dict[str, Any]] = []
    scope_metrics: dict[str, dict[str, float]] = {}
    for node, scope in _walk(root, path):
        metrics = _metrics(node, path)
        if _first(metrics, DEVICE_ID_KEYS) is not None:
            _, scope = step_of_scope(scope, step_re)
            rows.append({**_kernel_row(node, metrics, scope, path), "step": None})
        elif extra := {k: v for k, v in _work_metrics(metrics, path, _name(node, path)).items() if v}:
            _add_scope_work(scope_metrics, step_of_scope(scope + (_name(node, path),), step_re)[1], extra)
    if not rows:
        raise TraceFormatError(path, "no kernels recorded (no node carries device_id/DeviceId metrics)")
    meta = {"path": str(path), "source": "proton", "rank": None, "world_size": None,
            "devices": _devices(device_info, path), "trace_start_epoch_ns": None,
            "profiler_version": None, "metric_names": _generation(rows),
            "scope_metrics": scope_metrics}
    return Profile(_events(rows), Meta.of(meta, path))


def _add_scope_work(scope_metrics: dict[str, dict[str, Any]], scope: tuple[str, ...], work: dict[str, Any]) -> None:
    """A scope's flops/bytes, keyed as the kernel rows' scopes are (step scopes left out), so
    the same scope entered in several steps sums its metrics."""
    entry = scope_metrics.setdefault("/".join(scope), {})
    for key, value in work.items():
        entry[key] = entry.get(key, 0.0) + value if isinstance(value, float) else value


def tree(path: str | os.PathLike) -> dict:
    """The file's call tree for tree-level tools (llnl-hatchet's GraphFrame.from_literal, as
    reports/html/treediff.py uses it), decoded and checked as by read(): `{frame: {name, type},
    metrics, children}` from the root, metric names as Triton 3.2+ spells them, only scalar
    metrics without the ` (exc)`/` (pty)` variants, launch-metadata frames replaced by their
    children (proton's bookkeeping, not scopes)."""
    path = Path(path)
    root, _ = _split(_decode(path), path)
    try:
        return _plain(root, path)
    except RecursionError:
        raise TraceFormatError(path, "the tree is too deep to walk") from None


_METRIC_NAMES = {"Time (ns)": "time (ns)", "Count": "count", "DeviceId": "device_id", "DeviceType": "device_type"}


def _plain(node: dict, path: Path) -> dict:
    metrics = {_METRIC_NAMES.get(k, k): v for k, v in _metrics(node, path).items()
               if isinstance(v, (int, float, str)) and not k.endswith(("(exc)", "(pty)"))}
    children = []
    for child in _children(node, path):
        plain = _plain(child, path)
        children.extend(plain["children"] if plain["frame"]["name"] == LAUNCH_METADATA else [plain])
    if not (name := _name(node, path)):  # llnl-hatchet drops an empty name, then fails to find it
        raise TraceFormatError(path, "a frame with an empty name: a tree diff aligns nodes by name")
    frame = {"name": name, "type": str(node["frame"].get("type", "function"))}
    return {"frame": frame, "metrics": metrics, "children": children}


def _decode(path: Path) -> Any:
    data = limits.read_trace_bytes(path)  # gunzipped as a stream, bounded
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        raise TraceFormatError(path, f"not valid JSON ({e})") from None
    except (UnicodeDecodeError, RecursionError) as e:
        raise limits.json_error(path, e) from None


def _split(doc: Any, path: Path) -> tuple[dict, dict]:
    """The tree root and the device-info element (empty when the file has none)."""
    if not isinstance(doc, list) or not doc:
        raise TraceFormatError(path, "not a proton hatchet profile: expected a JSON list [root, device_info]")
    root = doc[0]
    if not isinstance(root, dict) or not isinstance(root.get("frame"), dict):
        raise TraceFormatError(path, "not a proton hatchet profile: the first element has no 'frame'")
    device_info = doc[1] if len(doc) > 1 else {}
    if not isinstance(device_info, dict):
        raise TraceFormatError(path, "the second element (device info) is not a JSON object")
    return root, device_info


def _walk(root: dict, path: Path) -> Iterator[tuple[dict, tuple[str, ...]]]:
    """Every node below the root with its scope: the enclosing frame names, outermost
    first, without the root and without launch-metadata frames."""
    stack = [(child, ()) for child in reversed(_children(root, path))]
    while stack:
        node, scope = stack.pop()
        yield node, scope
        name = _name(node, path)
        inner = scope if name == LAUNCH_METADATA else scope + (name,)
        stack.extend((child, inner) for child in reversed(_children(node, path)))


def _name(node: Any, path: Path) -> str:
    frame = node.get("frame") if isinstance(node, dict) else None
    name = frame.get("name") if isinstance(frame, dict) else None
    if not isinstance(name, str):
        raise TraceFormatError(path, f"a tree node without frame.name: {str(node)[:80]}")
    if complaint := limits.long_name(len(name)):
        raise TraceFormatError(path, f"frame name: {complaint}")
    return name


def _children(node: dict, path: Path) -> list:
    children = node.get("children", [])
    if not isinstance(children, list):
        raise TraceFormatError(path, f"frame {_name(node, path)!r}: 'children' is not a list")
    for child in children:
        if not isinstance(child, dict):
            raise TraceFormatError(path, f"frame {_name(node, path)[:60]!r}: children holds "
                                         f"{type(child).__name__} {str(child)[:40]!r}, not a node")
    return children


def _metrics(node: dict, path: Path) -> dict:
    metrics = node.get("metrics", {})
    if not isinstance(metrics, dict):
        raise TraceFormatError(path, f"frame {_name(node, path)!r}: 'metrics' is not an object")
    for key, value in metrics.items():
        if isinstance(value, int) and not -2**1023 < value < 2**1023:  # beyond a float
            raise TraceFormatError(path, f"frame {_name(node, path)[:60]!r}: metric {key!r} is an integer "
                                         f"of {len(str(abs(value)))} digits, beyond any float")
    return metrics


def _first(metrics: dict, keys: tuple[str, ...]) -> Any:
    """The value of the first key present, bare name before its ` (inc)` variant."""
    for key in keys:
        for variant in (key, f"{key} (inc)"):
            if variant in metrics:
                return metrics[variant]
    return None


def _kernel_row(node: dict, metrics: dict, scope: tuple[str, ...], path: Path) -> dict[str, Any]:
    name = _name(node, path)
    time_ns, count = _first(metrics, TIME_KEYS), _first(metrics, COUNT_KEYS)
    if not _is_number(time_ns) or not 0 <= time_ns <= limits.MAX_DUR_NS:
        raise TraceFormatError(path, f"kernel {name[:60]!r}: time (ns) {time_ns!r} is missing or outside "
                                     "0..2**61")
    if not _is_number(count) or count != int(count) or not 0 <= count <= limits.MAX_DUR_NS:
        raise TraceFormatError(path, f"kernel {name[:60]!r}: count {count!r} is missing or not a whole "
                                     "number in 0..2**61")
    device = _first(metrics, DEVICE_ID_KEYS)
    if isinstance(device, str) and re.fullmatch(r"-?[0-9]{1,30}", device.strip()):  # proton writes "0" too
        device = int(device)
    device = limits.whole(path, f"kernel {name[:60]!r}: device_id", device, limits.INT16)
    work = _work_metrics(metrics, path, name)
    return {"name": name, "scope": "/".join(scope), "device": device,
            "dur_ns": int(round(time_ns)), "count": int(count),
            "flops": work.get("flops", math.nan), "bytes": work.get("bytes", math.nan),
            "dtype": work.get("dtype", ""), "legacy": "Time (ns)" in metrics}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _work_metrics(metrics: dict, path: Path, name: str) -> dict[str, float]:
    """flops (summed over the widths present), bytes, and the dtype class of the widest
    share of the flops (FLOPS_DTYPES), for those the node has; each a number in
    0..limits.MAX_WORK (a TraceFormatError naming the node and metric otherwise), so sums
    over kernels and scopes stay finite."""
    def checked(key: str) -> float | None:
        return limits.real(path, f"frame {name[:60]!r}: metric {key}", _first(metrics, (key,)), 0.0,
                           limits.MAX_WORK, optional=True)

    flops = {key: v for key in FLOPS_KEYS if (v := checked(key)) is not None}
    out: dict[str, Any] = {}
    if flops:
        out["flops"] = sum(flops.values())
        out["dtype"] = FLOPS_DTYPES.get(max(flops, key=flops.__getitem__), "")
    if (moved := checked(BYTES_KEY)) is not None:
        out["bytes"] = moved
    return out


def _generation(rows: list[dict[str, Any]]) -> str:
    legacy = {row["legacy"] for row in rows}
    return "mixed" if len(legacy) > 1 else ("triton-3.0/3.1" if legacy.pop() else "triton-3.2+")


def _events(rows: list[dict[str, Any]]) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    df = schema.coerce({
        "rank": -1, "source": "proton", "kind": "kernel", "name": table["name"],
        "scope": table["scope"], "device": table["device"], "stream": pd.NA, "start_ns": pd.NA,
        "dur_ns": table["dur_ns"], "count": table["count"],
        "flops": table["flops"], "bytes": table["bytes"], "dtype": table["dtype"], "step": table["step"].to_numpy(dtype=object),
    }, n_rows=len(table), spec=schema.PARSED)
    return schema.validate(df, schema.PARSED)


# ---- device info -------------------------------------------------------------


def _devices(device_info: dict, path: Path) -> dict[int, dict[str, Any]]:
    """device index -> properties, units in the key names.

    Peak memory bandwidth follows proton-viewer's `get_min_time_bytes`:
    2 (double data rate) x memory clock (kHz) x 1e3 x bus width (bits) / 8, here in GB/s
    (H200: 2 x 3.201e9 x 6016 / 8 = 4814 GB/s).
    """
    devices: dict[int, dict[str, Any]] = {}
    for device_type, by_index in device_info.items():
        if not isinstance(by_index, dict):
            raise TraceFormatError(path, f"device info for {device_type!r} is not an object")
        for index, props in by_index.items():
            if not isinstance(props, dict) or not (str(index).isascii() and str(index).isdigit()):
                raise TraceFormatError(path, f"device info {device_type}/{index!r} is malformed")
            devices[int(index)] = _device(device_type, props)
    return devices


def _device(device_type: str, props: dict) -> dict[str, Any]:
    memory_clock_khz, bus_width_bits = props.get("memory_clock_rate"), props.get("bus_width")
    bandwidth_gb_s = None
    if _is_number(memory_clock_khz) and _is_number(bus_width_bits):
        bandwidth_gb_s = 2 * memory_clock_khz * 1e3 * bus_width_bits / 8 / 1e9
    return {"type": device_type, "arch": props.get("arch"), "num_sms": props.get("num_sms"),
            "clock_khz": props.get("clock_rate"), "memory_clock_khz": memory_clock_khz,
            "bus_width_bits": bus_width_bits, "memory_bandwidth_gb_s": bandwidth_gb_s}
