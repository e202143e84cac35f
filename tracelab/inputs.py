"""The file side of the reports: which inputs are folders, a run folder's run.json, and
writing what a renderer returned. Reports themselves only take frames and return
strings (reports/compare.py labels inputs from what is given here; reports/html.py
renders); the CLI and `tracelab run` call these.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import TraceFormatError, UsageError
from .schema import Profile

if TYPE_CHECKING:
    from .reports.compare import Input


def label_inputs(paths: list[str | Path], groups: list[list[Profile]]) -> list[Input]:
    """The profiles loaded from each path, labelled (reports.compare.label); a folder's
    label is its name, a file's its stem."""
    from .reports.compare import label

    return label(paths, [Path(p).is_dir() for p in paths], groups)


def load_groups(paths: list[str | Path], on_loaded=None) -> list[list[Profile]]:
    """Each path (file or folder) loaded on its own, so ranks may repeat across runs."""
    from .load import load_many

    return [load_many(p, on_loaded=on_loaded) for p in paths]


def run_info(paths: list[str | Path]) -> dict | None:
    """run.json of the first input that is a run folder (holds one), else None."""
    for p in map(Path, paths):
        candidate = p / "run.json" if p.is_dir() else None
        if candidate and candidate.is_file():
            try:
                return json.loads(candidate.read_text())
            except (OSError, ValueError) as e:
                raise TraceFormatError(candidate, f"cannot read the run description ({e})") from None
    return None


def write(path: str | Path, text: str | bytes, force: bool = False) -> Path:
    """Write text (UTF-8) or bytes atomically (a temporary file beside it, then os.replace);
    an existing file is replaced only with force."""
    path = Path(path)
    if path.exists() and not force:
        raise UsageError(path, "exists; pass --force to overwrite it")
    if path.is_dir():
        raise UsageError(path, "is a folder")
    if not path.parent.is_dir():
        raise UsageError(path, f"folder {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode("utf-8"))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_report(paths: list[str | Path], out: str | Path, force: bool = False, title: str | None = None,
                 groups: list[list[Profile]] | None = None) -> Path:
    """Load each path (a file, run folder or folder of traces) unless `groups` (the profiles
    loaded per path) are given, read the run folder's run.json, render the HTML report and
    write it atomically. `tracelab report` and `tracelab run` call this."""
    from .reports import html

    paths = [str(p) for p in paths]
    if Path(out).exists() and not force:
        raise UsageError(out, "exists; pass --force to overwrite it")
    groups = groups if groups is not None else load_groups(paths)
    title = title or "tracelab: " + ", ".join(Path(p).name for p in paths)
    return write(out, html.render(label_inputs(paths, groups), paths, run_info(paths), title), force=force)
