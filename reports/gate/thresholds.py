"""The gate's thresholds from what the user gave: --max-regression, --metric NAME=THRESHOLD,
--run-noise and a TOML config ([gate] max-regression, run-noise, [gate.metrics] NAME =
THRESHOLD); options win over the file. A threshold is a percentage ("5%", or 5) or "off"
(never failed on); the run noise a percentage."""
from __future__ import annotations

import os
import re
import tomllib

from tracelab.core.errors import UsageError

from .noise import RUN_NOISE
from .verdict import DEFAULT_MAX_REGRESSION, Thresholds

OFF = "off"


def share(text: str | float | int, where: str) -> float | None:
    """'5%' or 5 -> 0.05; 'off' -> None; anything else a UsageError naming `where`."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        text = str(text)
    if isinstance(text, str) and text.strip().lower() == OFF:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%?\s*", text) if isinstance(text, str) else None
    if m is None:
        raise UsageError(where, f"{text!r} is not a threshold (say 5%, 0.5% or off)")
    return float(m.group(1)) / 100


def _pair(text: str) -> tuple[str, float | None]:
    name, eq, value = text.partition("=")
    if not eq or not name.strip():
        raise UsageError("--metric", f"{text!r} is not NAME=THRESHOLD (say step_time=3% or 'idle:*=off')")
    return name.strip(), share(value, f"--metric {name.strip()}")


def from_config(path: str | os.PathLike) -> tuple[dict, list[tuple[str, float | None]]]:
    """([gate]'s own keys as given, [(metric, threshold)]) of a TOML config."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise UsageError(path, f"cannot read the config: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(path, f"not TOML: {e}") from None
    table = doc.get("gate", {})
    metrics = table.get("metrics", {}) if isinstance(table, dict) else None
    if not isinstance(table, dict) or not isinstance(metrics, dict):
        raise UsageError(path, "[gate] and [gate.metrics] must be tables")
    unknown = set(table) - {*KEYS, "metrics"}
    if unknown:
        raise UsageError(path, f"unknown key(s) in [gate]: {', '.join(sorted(unknown))} ({', '.join(KEYS)}, metrics)")
    return ({k: table[k] for k in KEYS if k in table},
            [(str(k), share(v, f"{path}: {k}")) for k, v in metrics.items()])


KEYS = ("max-regression", "run-noise")  # [gate]'s keys beside its metrics table


def thresholds(max_regression: str | None, metrics: list[str], config: str | os.PathLike | None,
               run_noise: str | None = None) -> Thresholds:
    given, listed = from_config(config) if config is not None else ({}, [])
    default = max_regression if max_regression is not None else given.get("max-regression")
    value = DEFAULT_MAX_REGRESSION if default is None else share(default, "--max-regression")
    noise = run_noise if run_noise is not None else given.get("run-noise")
    noise_share = RUN_NOISE if noise is None else share(noise, "--run-noise")
    if noise_share is None:
        raise UsageError("--run-noise", "is a share of the run's time (say 10%), not off")
    return Thresholds(value, tuple(listed + [_pair(m) for m in metrics]), noise_share)
