"""Strict JSON for every `--format json`: missing numbers (NaN, infinities, pandas NA) are
null, never the `NaN` that Python's json writes and JSON.parse, browsers and most
languages refuse. One encoder, used by every renderer (breakdown, compare, steps, report).
"""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd


def strict(value: Any) -> Any:
    """`value` with every float that is not finite, and every pandas NA, replaced by None;
    numpy scalars and arrays become Python ones; mapping keys become strings."""
    if isinstance(value, dict):
        return {str(k): strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray, pd.Series)):
        return [strict(v) for v in (value.tolist() if hasattr(value, "tolist") else value)]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def records(df: pd.DataFrame | None) -> list[dict]:
    """A frame's rows as strict JSON objects ([] for None or no rows)."""
    if df is None or not len(df):
        return []
    return strict(json.loads(df.to_json(orient="records")))


def dumps(doc: Any, indent: int | None = 1) -> str:
    """`doc` as strict JSON text (allow_nan=False: a NaN left anywhere is a bug, raised here)."""
    return json.dumps(strict(doc), indent=indent, allow_nan=False, default=str)
