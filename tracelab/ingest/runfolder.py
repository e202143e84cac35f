"""A run folder's own files checked where they are read: run.json and the ranks' results
(rank{r}.results.json, the old rank{r}.figures.json). Reports read them with .get() and
format their numbers, so a value of the wrong type (run.json `[1, 2]`, `"results": "x"`, a
rank's file `[1]`, `"step_ms": ["a"]`) is one TraceFormatError naming the file and field,
never a traceback deep in a report."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tracelab.core import limits
from tracelab.core.devices import Device, detect
from tracelab.core.meta import Meta
from tracelab.core.errors import NoTracesError, TraceFormatError
from tracelab.ingest.results import OLD_RESULTS_FILE, RESULTS_FILE, upgrade

_TEXT = ("workload", "backend", "status", "name")
_WHOLE = ("profiled_steps", "ranks_per_node", "world_size", "returncode")
_CONFIG_WHOLE = ("steps", "new_tokens", "samples")
_SERIES = ("sample_s", "step_ms")  # per-sample or per-step numbers the run table summarises


def read_json(path: Path) -> Any:
    """The JSON document of a run folder's file; TraceFormatError when unreadable or not JSON."""
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as e:
        reason = getattr(e, "strerror", None) or e
        raise TraceFormatError(path, f"cannot read it as JSON ({reason})") from None


def _obj(path: Path, where: str, value: Any, optional: bool = True) -> dict:
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise TraceFormatError(path, f"{where} is {type(value).__name__}, not a JSON object")
    return value


def run_json(path: Path) -> dict:
    """run.json at `path`, its fields of known meaning checked by type and range."""
    doc = _obj(path, "the document", read_json(path), optional=False)
    for key in _TEXT:
        limits.text(path, key, doc.get(key), optional=True)
    for key in _WHOLE:
        limits.whole(path, key, doc.get(key), (0, limits.INT32[1]), optional=True)
    config = _obj(path, "config", doc.get("config"))
    for key in _CONFIG_WHOLE:
        limits.whole(path, f"config.{key}", config.get(key), (0, limits.INT32[1]), optional=True)
    devices = doc.get("devices")
    if devices is not None and not isinstance(devices, list):
        raise TraceFormatError(path, f"devices is {type(devices).__name__}, not a list")
    for i, device in enumerate(devices or []):
        limits.text(path, f"devices[{i}].name", _obj(path, f"devices[{i}]", device, False).get("name"), optional=True)
    for key in ("results", "figures"):
        for rank, record in _obj(path, key, doc.get(key)).items():
            results(path, record, f"{key}[{rank!r}].")
    return doc


def results(path: Path, record: Any, where: str = "") -> dict:
    """One rank's results (a rank's file, or a run.json "results" entry), checked."""
    record = _obj(path, where.rstrip(".") or "the document", record, optional=False)
    rows = record.get("rows")
    if rows is not None and not (isinstance(rows, list) and all(isinstance(r, dict) for r in rows)):
        raise TraceFormatError(path, f"{where}rows is not a list of JSON objects")
    for key in _SERIES:
        series = record.get(key)
        if series is not None and not (isinstance(series, list) and all(_finite(x) for x in series)):
            raise TraceFormatError(path, f"{where}{key} is not a list of finite numbers")
    for i, row in enumerate(rows or []):
        if (series := row.get("step_ms")) is not None and not (isinstance(series, list)
                                                              and all(_finite(x) for x in series)):
            raise TraceFormatError(path, f"{where}rows[{i}].step_ms is not a list of finite numbers")
    return record


def _finite(x: Any) -> bool:
    return type(x) in (int, float) and math.isfinite(x)


def traceless_run(path: Path, suffixes: tuple[str, ...] | None = None) -> bool:
    """A run folder with no trace in it (a run under backend none): its run.json still counts.
    `suffixes`: the files that count (default: loading.TRACE_SUFFIXES)."""
    from tracelab.ingest.loading import TRACE_SUFFIXES, expand

    if not (path.is_dir() and (path / "run.json").is_file()):
        return False
    try:
        expand(path, suffixes or TRACE_SUFFIXES)
    except NoTracesError:
        return True
    return False


def run_info(paths: list[str | Path]) -> dict | None:
    """run.json of the first input that is a run folder (holds one), else None."""
    for p in map(Path, paths):
        candidate = p / "run.json" if p.is_dir() else None
        if candidate and candidate.is_file():
            return run_json(candidate)
    return None


def run_infos(paths: list[str | Path]) -> list[tuple[str, dict]]:
    """(folder name, run.json) of every input that is a run folder, in the order given; a
    run.json without the workload's results (a run stopped before it gathered them) takes
    them from the ranks' own files (gather)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir() and (info := run_info([p])) is not None:
            out.append((p.name, info if info.get("results") or info.get("figures") else
                        {**info, "results": gather(p)}))
    return out


def gather(run_dir: Path) -> dict[str, dict[str, Any]]:
    """rank -> the results that rank wrote, read from rank{r}.results.json (or the old
    rank{r}.figures.json), in rank order."""
    found: dict[int, Path] = {}
    for pattern in (OLD_RESULTS_FILE, RESULTS_FILE):  # today's name wins
        for path in run_dir.glob(pattern.format(rank="*")):
            rank = path.name[len("rank"):].split(".", 1)[0]
            if rank.isascii() and rank.isdigit():
                found[int(rank)] = path
    return {str(r): upgrade(results(found[r], read_json(found[r]))) for r in sorted(found)}


def meta_device(meta: Meta) -> tuple[Device | None, str]:
    """The device of a trace's meta (its first GPU), else of the run.json beside the trace,
    with where it came from: "trace", "run.json" or "unknown"."""
    gpus = [props for props in meta.devices.values() if isinstance(props, dict)]
    # its first GPU only: where that one is unknown, a second one's kind is no guess at it (proton's
    # cuda.json: an unknown sm_89 part first, an sm_90 one second)
    if gpus and (found := detect(gpus[0])):
        return found, "trace"
    run_json_path = Path(meta.path).parent / "run.json"
    devices = (run_json(run_json_path).get("devices") or []) if run_json_path.is_file() else []
    for props in devices:
        if isinstance(props, dict) and (found := detect(props)):
            return found, "run.json"
    return None, "unknown"
