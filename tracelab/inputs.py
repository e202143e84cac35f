"""The file side of the reports: which inputs are folders, a run folder's run.json, and
writing what a renderer returned. Reports themselves only take frames and return
strings (reports/compare/compare.py labels inputs from what is given here; reports/html/html.py
renders); the CLI and `tracelab run` call these.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .errors import NoTracesError, UsageError
from .options import DEFAULT, Options
from .outputs import check_output, write, write_together  # noqa: F401 - write: the CLI's export perfetto
from .schema import OnEvents, Profile

if TYPE_CHECKING:
    from .reports.session import Input


def label_inputs(paths: list[str | Path], groups: list[list[Profile]]) -> list[Input]:
    """The profiles loaded from each path, labelled (reports.session.label); a folder's
    label is its name, a file's its stem."""
    from .reports.session import label

    return label(paths, [Path(p).is_dir() for p in paths], groups)


def load_groups(paths: list[str | Path], on_loaded=None, keep_events: bool = True,
                options: Options = DEFAULT, device=None, digests: tuple[str, ...] | None = None
                ) -> list[list[Profile]]:
    """Each path (file or folder) loaded on its own, so ranks may repeat across runs; each
    rank's RANK_DIGESTS (reports.session) of these names (all where None) computed in the
    worker that parsed it. Without `keep_events` the events stay in the workers: the report
    and compare need only the summaries (the merged Perfetto trace needs the events). `device`
    (a devices.Device: report --device) is the roofline's device instead of the one the traces
    or run.json name."""
    from .loading import load_many
    from .reports.roofline.roofline import RankRoofline
    from .reports.session import rank_digests

    reduce = rank_digests(digests)
    run_infos(paths)  # each run folder's own files checked before any trace is parsed
    if device is not None and "roofline" in reduce:
        reduce = {**reduce, "roofline": RankRoofline(device)}
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
            from .runfolder import run_json

            return run_json(candidate)
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

    return gather(folder)


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
    out, merged = Path(out), perfetto_name(Path(out))
    for target in (out, merged) if perfetto else (out,):
        check_output(target, paths)
        if target.exists() and not force:
            raise UsageError(target, "exists; pass --force to overwrite it")
    groups = groups if groups is not None else load_groups(paths, keep_events=perfetto, options=options)
    title = title or "tracelab: " + ", ".join(Path(p).name for p in paths)
    kept = [(p, g) for p, g in zip(paths, groups) if g]  # a run under backend none has no traces
    inputs = _run_devices(label_inputs([p for p, _ in kept], [g for _, g in kept]), kept) if kept else []
    trace = _perfetto_content(_with_perfetto_events(inputs, options)) if perfetto else None
    page = html.render(inputs, paths, run_info(paths), title, runs=run_infos(paths),
                       perfetto=merged.name if trace else None)
    return write_together([(out, page, False)] + ([(merged, trace, True)] if trace else []), force=force)[0]


def perfetto_name(out: Path) -> Path:
    """The merged trace written beside a report: OUT (less its suffix).perfetto.json.gz."""
    return out.with_name(out.name.rsplit(".", 1)[0] + ".perfetto.json.gz")


def _run_devices(inputs: list[Input], kept: list[tuple[str, list[Profile]]]) -> list[Input]:
    """Inputs whose trace names no GPU (proton) take it from their run folder's run.json
    (devices of the node, by local rank). label_inputs keeps each path's ranks in rank order."""
    from dataclasses import replace

    named = []
    for path, group in kept:
        devices = [d for d in ((run_info([path]) or {}).get("devices") or []) if isinstance(d, dict)]
        named += [_device_name(devices[p.rank % len(devices)]) if devices else ""
                  for p in sorted(group, key=lambda p: p.rank)]
    return [i if i.device or not name else replace(i, device=name) for i, name in zip(inputs, named)]


def _device_name(device: dict) -> str:
    """A GPU's name; run.json's entry of a run on the CPU (index -1) 'CPU (x86_64)'."""
    name = str(device.get("name", ""))
    return f"CPU ({name})" if device.get("index") == -1 else name


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


def _perfetto_content(inputs: list[Input]) -> Callable | None:
    """The merged trace's producer (streamed when written), or None when no input is timed."""
    from .reports.perfetto import perfetto

    if not any(i.timed for i in inputs):
        return None
    if not all(len(i.events) for i in inputs if i.timed):
        raise UsageError("--perfetto", "the merged trace needs the ranks' events: load them with keep_events")
    return lambda put: perfetto.write_json(put, inputs)


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


def findings_of(paths: list[str | Path], groups: list[list[Profile]], comparison=None, sources=None) -> list:
    """The findings (reports/findings/findings.py) of the profiles loaded per path, labelled as the
    report labels them, so every command prints the report's sentences; `comparison`, a
    Comparison of those same inputs (any --by), is reused where its labels match; `sources`:
    only these findings sources (default: every topic's)."""
    from .reports.compare.compare import comparison as compare_inputs
    from .reports.findings.findings import Evidence, findings

    paths = [str(p) for p in paths]
    kept = [(p, g) for p, g in zip(paths, groups) if g]
    if not kept:
        return []
    inputs = _run_devices(label_inputs([p for p, _ in kept], [g for _, g in kept]), kept)
    if comparison is None or comparison.labels != [i.label for i in inputs]:
        comparison = compare_inputs(inputs, "kernel")
    return findings(Evidence(inputs, comparison, run_infos(paths)), sources)
