"""A columnar dataset of a job: one Parquet part per rank, DIR/rank=N/part-0.parquet, with
the schema's dtypes and each trace's meta in the part's metadata. A second pass (any
tracelab command given DIR), a notebook (pandas.read_parquet(DIR, columns=[...])), DuckDB
(read_parquet('DIR/*/*.parquet', hive_partitioning = true)) or Dask reads only the columns
it needs. Each part is written by the worker that parsed the rank (load_many's reduce), so
the job never meets in one process; the parent only names the parts by rank.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Callable

from tracelab.ingest import outputs, tempfiles
from tracelab.core.errors import OutputError, UsageError
from tracelab.core.options import Options

PART = "part-0.parquet"


class _Part:
    """A load_many reduce that writes a rank's classified events (all but the rank column,
    which the folder name holds) and its meta to a temporary part in `folder`; its path."""

    def __init__(self, folder: str):
        self.folder = folder

    def __call__(self, rank) -> str:  # schema.RankData
        events, meta = rank.events, rank.meta
        import pyarrow as pa
        import pyarrow.parquet as pq

        from tracelab.parsers.parquet import META_KEY

        table = pa.Table.from_pandas(events.drop(columns="rank"), preserve_index=False)
        plain = json.dumps(meta.to_dict(), default=str).encode()
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), META_KEY: plain})
        path = Path(self.folder) / f".tmp-{uuid.uuid4().hex}.parquet"
        pq.write_table(table, path)
        return str(path)


def export(paths: list[str], out: str | os.PathLike, force: bool = False,
           on_loaded: Callable | None = None, options: Options | None = None,
           load: Callable[[dict], list] | None = None) -> list[Path]:
    """Every rank of `paths` (files, folders) as DIR/rank=N/part-0.parquet; the parts written.
    `load(reduce)`: the ranks, each reduced where it was parsed (default: load_many of the paths;
    the CLI's opens a session, which refuses several runs).
    An existing DIR is replaced only with `force`, and only when it is a dataset (never an
    input, a folder holding one or any other folder); written beside it first, then renamed."""
    from tracelab.ingest.loading import load_many

    out = outputs.check_output(out, paths, folder=True)
    if out.exists() and not force:
        raise UsageError(out, "exists; pass --force to replace it")
    if out.exists() and not (out.is_dir() and tempfiles.is_dataset(out)):
        raise UsageError(out, "is not a tracelab dataset (rank=N/part-0.parquet only): --force replaces only "
                              "what export parquet wrote")
    if not out.parent.is_dir():
        raise UsageError(out, f"folder {out.parent} does not exist")
    staging = _beside(out)
    try:
        staging.mkdir()
        reduce = {"part": _Part(str(staging))}
        profiles = load(reduce) if load else load_many(paths, on_loaded=on_loaded, reduce=reduce, keep_events=False,
                                                       options=options)
        written = []
        for p in profiles:
            folder = staging / f"rank={p.rank}"
            folder.mkdir()
            os.replace(p.summary["part"], folder / PART)
            written.append(out / folder.name / PART)
        _swap(staging, out)
        return written
    except OSError as e:
        raise OutputError(out, f"cannot write: {e.strerror or e}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _beside(out: Path) -> Path:
    """A temporary name beside `out` that tempfiles.sweep knows as ours."""
    return tempfiles.temp_beside(out)


def _swap(staging: Path, out: Path) -> None:
    """`staging` becomes `out`, the old dataset set aside first and removed after, with
    SIGINT and SIGTERM held: the folder is the old dataset or the new one, never neither."""
    old = _beside(out) if out.exists() else None
    with outputs.signals_held():
        if old:
            os.replace(out, old)
        try:
            os.replace(staging, out)
        except OSError:
            if old:
                os.replace(old, out)
            raise
    if old:
        shutil.rmtree(old, ignore_errors=True)
