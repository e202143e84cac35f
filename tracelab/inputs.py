"""The file side of the reports: which inputs are folders, a run folder's run.json, and
writing what a renderer returned. Reports themselves only take frames and return
strings (reports/compare/compare.py labels inputs from what is given here; reports/html/html.py
renders); the CLI and `tracelab run` call these.
"""
from __future__ import annotations

import gzip
import json
import os
import tempfile
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .errors import NoTracesError, OutputError, TraceFormatError, UsageError
from .options import DEFAULT, Options
from .schema import OnEvents, Profile

if TYPE_CHECKING:
    from .reports.session import Input


def label_inputs(paths: list[str | Path], groups: list[list[Profile]]) -> list[Input]:
    """The profiles loaded from each path, labelled (reports.session.label); a folder's
    label is its name, a file's its stem."""
    from .reports.session import label

    return label(paths, [Path(p).is_dir() for p in paths], groups)


def load_groups(paths: list[str | Path], on_loaded=None, keep_events: bool = True,
                digests: tuple[str, ...] | None = None, options: Options = DEFAULT) -> list[list[Profile]]:
    """Each path (file or folder) loaded on its own, so ranks may repeat across runs; each
    rank's RANK_DIGESTS (reports.session) of these names (all where None) computed in the
    worker that parsed it. Without `keep_events` the events stay in the workers: the report
    and compare need only the summaries (the merged Perfetto trace needs the events)."""
    from .loading import load_many
    from .reports.session import rank_digests

    reduce = rank_digests(digests)
    return [[] if traceless_run(Path(p)) else load_many(p, on_loaded=on_loaded, reduce=reduce,
                                                        keep_events=keep_events, options=options) for p in paths]


def with_events(inputs: list[Input], ranks: set[int] | None, keep=None, on_loaded=None,
                options: Options = DEFAULT) -> list[Input]:
    """Inputs loaded without their events get them back for `ranks` (every rank when None):
    their files read again, in parallel, per run. `export perfetto --ranks` of a few ranks of a
    thousand holds only those ranks' events (the rest gave their summaries, which put the run
    on one clock). `keep(events)`, where given, runs in the worker that parses each rank
    and only its rows come back (e.g. perfetto.rows_of_steps). `options`: as they were loaded."""
    from .loading import load_many

    needed = [i for i in inputs if not len(i.events) and i.path and (ranks is None or i.rank in ranks)]
    for group in dict.fromkeys(i.group for i in needed):
        members = [i for i in needed if i.group == group]
        again = {p.rank: p for p in load_many(list(dict.fromkeys(i.path for i in members)), on_loaded=on_loaded,
                                              reduce={"kept": OnEvents(keep)} if keep else None, keep_events=keep is None,
                                              options=options)}
        for i in members:
            i.events = again[i.rank].summary["kept"] if keep else again[i.rank].events
    return inputs


def traceless_run(path: Path) -> bool:
    """A run folder with no trace in it (a run under backend none): its run.json still counts."""
    from .loading import expand

    if not (path.is_dir() and (path / "run.json").is_file()):
        return False
    try:
        expand(path)
    except NoTracesError:
        return True
    return False


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


def run_infos(paths: list[str | Path]) -> list[tuple[str, dict]]:
    """(folder name, run.json) of every input that is a run folder, in the order given; a
    run.json without the workload's results (a run stopped before it gathered them) takes
    them from the ranks' own files (tracelab.results.gather)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir() and (info := run_info([p])) is not None:
            out.append((p.name, info if info.get("results") or info.get("figures") else
                        {**info, "results": _gathered(p)}))
    return out


def _gathered(folder: Path) -> dict[str, dict]:
    from .results import gather

    try:
        return gather(folder)
    except (OSError, ValueError) as e:
        raise TraceFormatError(folder, f"cannot read a rank's results file ({e})") from None


def write(path: str | Path, text: str | bytes | Callable[[Callable[[bytes], object]], object],
          force: bool = False, gz: bool = False) -> Path:
    """Write text (UTF-8) or bytes atomically (a temporary file beside it, then os.replace);
    an existing file is replaced only with force. `text` may also be a producer, called with
    a function that writes bytes (a large output streamed, never held whole); `gz`
    compresses (no name or time in the header: the same input gives the same file)."""
    path = Path(path)
    if path.exists() and not force:
        raise UsageError(path, "exists; pass --force to overwrite it")
    if path.is_dir():
        raise UsageError(path, "is a folder")
    if not path.parent.is_dir():
        raise UsageError(path, f"folder {path.parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise OutputError(path, f"cannot write: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as raw, (gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if gz
                                          else nullcontext(raw)) as f:
            if callable(text):
                text(f.write)
            else:
                f.write(text if isinstance(text, bytes) else text.encode("utf-8"))
        os.chmod(tmp, 0o666 & ~_umask())  # the user's usual file mode (0644), not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):  # a full disk, a file past `ulimit -f`
            raise OutputError(path, f"cannot write: {e.strerror or e}") from None
        raise
    return path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_report(paths: list[str | Path], out: str | Path, force: bool = False, title: str | None = None,
                 groups: list[list[Profile]] | None = None, perfetto: bool = False,
                 options: Options = DEFAULT) -> Path:
    """Load each path (a file, run folder or folder of traces) unless `groups` (the profiles
    loaded per path) are given, read the run folder's run.json, render the HTML report and
    write it atomically. `tracelab report` and `tracelab run` call this. With `perfetto`, the
    merged Perfetto trace of the timed ranks is written beside it (<out>.perfetto.json.gz)
    and the report links each rank to it. `options`: how the traces are (or were) loaded."""
    from .reports.html import html

    paths = [str(p) for p in paths]
    if Path(out).exists() and not force:
        raise UsageError(out, "exists; pass --force to overwrite it")
    groups = groups if groups is not None else load_groups(paths, keep_events=perfetto, options=options)
    title = title or "tracelab: " + ", ".join(Path(p).name for p in paths)
    kept = [(p, g) for p, g in zip(paths, groups) if g]  # a run under backend none has no traces
    inputs = _run_devices(label_inputs([p for p, _ in kept], [g for _, g in kept]), kept) if kept else []
    merged = _write_perfetto(_with_perfetto_events(inputs, options), Path(out), force) if perfetto else None
    return write(out, html.render(inputs, paths, run_info(paths), title, runs=run_infos(paths), perfetto=merged),
                 force=force)


def _run_devices(inputs: list[Input], kept: list[tuple[str, list[Profile]]]) -> list[Input]:
    """Inputs whose trace names no GPU (proton) take it from their run folder's run.json
    (devices of the node, by local rank). label_inputs keeps each path's ranks in rank order."""
    from dataclasses import replace

    named = []
    for path, group in kept:
        devices = [d for d in ((run_info([path]) or {}).get("devices") or []) if isinstance(d, dict)]
        named += [str(devices[p.rank % len(devices)].get("name", "")) if devices else ""
                  for p in sorted(group, key=lambda p: p.rank)]
    return [i if i.device or not name else replace(i, device=name) for i, name in zip(inputs, named)]


def _with_perfetto_events(inputs: list[Input], options: Options) -> list[Input]:
    """The timed ranks' events for the merged trace, read again where they were loaded
    without; refused (UsageError) when the trace would be too large for Perfetto's UI."""
    from .reports.perfetto import perfetto

    if all(len(i.events) for i in inputs if i.timed):
        return inputs
    if too_big := perfetto.oversize(inputs, None, None, perfetto.MAX_EVENTS):
        rows, n_ranks, shown = too_big
        raise UsageError("--perfetto", f"the merged trace would hold about {rows:,} events from {n_ranks:,} ranks, "
                                       "more than Perfetto's UI opens: write the report without --perfetto, and "
                                       f"the ranks you need with `tracelab export perfetto --ranks {shown}`")
    with_events([i for i in inputs if i.timed], None, options=options)
    return inputs


def _write_perfetto(inputs: list[Input], out: Path, force: bool) -> str | None:
    """The merged trace beside the report, streamed; its file name, or None when no input is timed."""
    from .reports.perfetto import perfetto

    if not any(i.timed for i in inputs):
        return None
    if not all(len(i.events) for i in inputs if i.timed):
        raise UsageError("--perfetto", "the merged trace needs the ranks' events: load them with keep_events")
    target = out.with_name(out.name.rsplit(".", 1)[0] + ".perfetto.json.gz")
    return write(target, lambda put: perfetto.write_json(put, inputs), force=force, gz=True).name


def regroup(paths: list[str | Path], profiles: list[Profile]) -> list[list[Profile]]:
    """Profiles loaded from all the paths together, back into one list per path (by the file
    each came from), as load_groups would give them; a profile of no path's files joins the first."""
    from .loading import expand

    owner: dict[str, str] = {}
    for p in map(str, paths):
        if not traceless_run(Path(p)):
            owner.update({os.path.abspath(f): p for f in expand(p) if os.path.abspath(f) not in owner})
    out: dict[str, list[Profile]] = {str(p): [] for p in paths}
    for prof in profiles:
        out[owner.get(os.path.abspath(str(prof.meta.get("path"))), str(paths[0]))].append(prof)
    return [out[str(p)] for p in paths]


def findings_of(paths: list[str | Path], groups: list[list[Profile]], comparison=None) -> list:
    """The findings (reports/findings/findings.py) of the profiles loaded per path, labelled as the
    report labels them, so every command prints the report's sentences; `comparison`, a
    Comparison of those same inputs (any --by), is reused where its labels match."""
    from .reports.compare.compare import comparison as compare_inputs
    from .reports.findings.findings import Evidence, findings

    paths = [str(p) for p in paths]
    kept = [(p, g) for p, g in zip(paths, groups) if g]
    if not kept:
        return []
    inputs = _run_devices(label_inputs([p for p, _ in kept], [g for _, g in kept]), kept)
    if comparison is None or comparison.labels != [i.label for i in inputs]:
        comparison = compare_inputs(inputs, "kernel")
    return findings(Evidence(inputs, comparison, run_infos(paths)))
