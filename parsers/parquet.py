"""Reading one part of a tracelab dataset (tracelab/dataset.py): DIR/rank=N/part-0.parquet,
one rank's events in the schema's dtypes, its trace's meta in the file's key-value metadata
(key "tracelab"), its rank in the folder name (hive partitioning, as DuckDB, Dask and
pyarrow.dataset read it). Returns the parsed columns (schema.PARSED): tracelab.load
classifies again, so the caller's patterns apply as to any trace."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd

from tracelab.core.errors import TraceFormatError
from tracelab.core.options import DEFAULT, Options, applying
from tracelab.core.schema import PARSED, Meta, Profile, SchemaError, validate

META_KEY = b"tracelab"
_RANK_FOLDER = re.compile(r"^rank=(-?\d+)$")


@applying
def read(path: str | os.PathLike, options: Options = DEFAULT) -> Profile:
    """A part of a tracelab dataset (tracelab/dataset.py): its steps were numbered when it was
    written, so `options` changes nothing here."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as e:
        raise TraceFormatError(path, f"cannot read it as Parquet ({e})") from None
    try:
        meta = json.loads((table.schema.metadata or {}).get(META_KEY, b"{}"))
    except ValueError as e:
        raise TraceFormatError(path, f"its tracelab metadata is not JSON ({e})") from None
    if not isinstance(meta, dict):
        raise TraceFormatError(path, "its tracelab metadata is not a JSON object")
    events = table.to_pandas()
    if (rank := _rank_of(path)) is not None:
        meta.update(rank=rank, rank_from="dataset folder")
    events = events.assign(rank=events.get("rank", pd.Series(0, index=events.index)).astype("int32"))
    events = events[[c for c in PARSED if c in events.columns]]
    try:
        return Profile(validate(events, PARSED), Meta.of({**meta, "path": str(path)}, path))
    except SchemaError as e:
        raise TraceFormatError(path, f"not a part of a tracelab dataset ({e})") from None


def _rank_of(path: Path) -> int | None:
    match = _RANK_FOLDER.match(path.parent.name)
    return int(match.group(1)) if match else None
