"""One door to the inputs: `Session.open(paths, options)` expands the paths once, parses each
rank once (in parallel, each rank's digests made in the worker that parsed it) and groups the
inputs into runs by one rule, so every command sees the same runs, labels and findings:

- a folder is one run (a run folder, or a folder of many rank files); a run folder under
  backend none (run.json, no trace) is a run with no ranks, still read for its run.json;
- a folder that is no run folder but holds run folders (`tracelab run --repeat N`'s repeat-K,
  or runs gathered in one place) is each of them, in name order; traces beside them, outside
  any, one run more;
- rank files given together form one run when they are distinct ranks of one job
  (reports.session.not_one_job), else each file is a run of its own;
- a memory snapshot pickle (told by its bytes) is an input of its own kind, memory only,
  grouped with nothing else, given as a file or found in a folder.

A command is then `session = Session.open(...)`, its analysis of `session.usable(...)` or
`session.inputs`, its renderer, and `session.findings(topic)`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Mapping

from tracelab.ingest import remote
from tracelab.core.errors import NoTracesError, RankError, UsageError
from tracelab.core.note import Note
from tracelab.core.options import DEFAULT, Options, applied
from tracelab.core.schema import Profile

TRACES, NONE, SNAPSHOT = "traces", "none", "snapshot"  # the kinds of run
SNAPSHOT_SUFFIXES = (".pickle", ".pkl")  # a folder's files read as memory snapshots when their bytes say so


@dataclass
class Run:
    """One run: `name` as the user gave it (a folder, a file, or rank files joined by ", "),
    its kind, its ranks (rank order within each file, files in the order given) and its run.json."""

    name: str
    kind: str
    profiles: list[Profile] = field(default_factory=list)
    info: dict | None = None
    where: str = ""  # what labels it: the folder, the lone file, or the rank files' folder
    folder: bool = False  # whether `where` is a folder
    together: bool = False  # rank files given one by one, taken as one run


@dataclass
class Session:
    """The runs of the paths given, opened once (see the module docstring)."""

    paths: list[str]
    runs: list[Run]
    options: Options = DEFAULT
    notes: list[Note] = field(default_factory=list)  # what a parser (about its file) or a command noted, each once

    @classmethod
    def open(cls, paths: list[str | os.PathLike], options: Options | None = None, *,
             digests: Mapping[str, Callable] | tuple[str, ...] | None = None, keep_events: bool = False,
             rank: int | None = None, device=None, on_loaded: Callable[[Path], None] | None = None) -> Session:
        """Open the paths: `digests` (name -> fn(RankData), or RANK_DIGESTS names; where None, all
        that the paths' runs can use: ranks.digests_of_runs) made in the worker that parses each rank; without `keep_events` only those digests come
        back. `rank`: only that rank of each run. `device` (devices.Device): the roofline's device
        instead of the one the traces or run.json name. `options` (default: the environment's,
        Options.from_environment) are the ones in force while the inputs are read."""
        from tracelab.ingest.runfolder import run_infos
        from tracelab.ingest.loading import parse_files

        paths = [str(p) for p in paths]
        if not paths:
            raise NoTracesError(None, "no trace files given")
        options = options or Options.from_environment()
        with applied(options):
            run_infos(paths)  # each run folder's own files checked before any trace is parsed
            plans = [_plan(p) for p in paths]
            files = [f for plan in plans for part in plan for f in part[2]]
            parsed = parse_files(files, on_loaded=on_loaded, reduce=_reduce(digests, device, plans), keep_events=keep_events,
                                 options=options) if files else []
            runs = _runs(plans, iter(parsed))
        if rank is not None:
            runs = [_picked(run, rank) for run in runs]
        session = cls(paths, runs, options)
        session.notes.extend(note.about(p.meta.path) for run in runs for p in run.profiles for note in p.meta.notes)
        return session

    def note(self, note: Note) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def of_kind(self, *kinds: str) -> list[Run]:
        return [r for r in self.runs if r.kind in kinds]

    def usable(self, command: str, kinds: tuple[str, ...] = (TRACES,)) -> list[Run]:
        """The runs `command` reads (those of `kinds` with ranks); each other input it cannot use
        said in one note (a run under backend none is read for its run.json only: no note); none
        left: a TracelabError, one line."""
        kept = [r for r in self.runs if r.kind in kinds and r.profiles]
        for r in self.runs:
            if r.kind == SNAPSHOT and SNAPSHOT not in kinds:
                # one note per file, however its path was spelled (a folder's own and the file given too)
                self.note(Note("snapshot_not_read", {"command": command}, where=(os.path.normpath(r.name),)))
        if kept:
            return kept
        if all(r.kind == NONE for r in self.runs):
            from tracelab.ingest.loading import TRACE_SUFFIXES

            raise NoTracesError(self.runs[0].name, f"no trace files ({', '.join(TRACE_SUFFIXES)}) in this folder")
        raise UsageError(command, f"none of its inputs is one it reads ({', '.join(r.name for r in self.runs)})")

    @property
    def profiles(self) -> list[Profile]:
        """The ranks of every traced run."""
        return [p for r in self.of_kind(TRACES) for p in r.profiles]

    @cached_property
    def inputs(self) -> list:
        """The traced runs' ranks, labelled (reports.session.Input): `rank3` when they are one run,
        else `<run>/rank3` (or `<run>` for a lone rank); a rank's device from its run.json where
        its trace names none (proton)."""
        return _labelled([r for r in self.of_kind(TRACES) if r.profiles])

    @cached_property
    def run_infos(self) -> list[tuple[str, dict]]:
        """(folder name, run.json) of every run folder given, in order (inputs.run_infos), and of
        those found under a folder given that is none (run_folders: a folder of repeats), as the
        runs were opened: a run's own figures come with it however its folder was named."""
        from tracelab.ingest.runfolder import run_infos

        with applied(self.options):
            return run_infos([r.where for r in self.runs if r.folder] if self.runs else self.paths)

    def findings(self, topic: str | None = None, comparison=None, sources: list[Callable] | None = None) -> list:
        """The findings (reports/findings/findings.py) of the traced runs: every topic's sources, or
        only `topic`'s (reports/topics.py: its own sources' and those its report section proves, in the
        report's words); `comparison`, a Comparison of these same inputs (any
        --by), is reused where its labels match; `sources` instead of a topic's (tests)."""
        from tracelab.reports.align.align import comparison as compare_inputs
        from tracelab.reports.findings.findings import Evidence, findings

        if not self.inputs:
            return []
        if comparison is None or comparison.labels != [i.label for i in self.inputs]:
            comparison = compare_inputs(self.inputs, "kernel")
        return findings(Evidence(self.inputs, comparison, self.run_infos), sources, _topic(topic) if sources is None else None)

    def findings_lines(self, topic: str | None = None, comparison=None) -> list[str]:
        """The findings as the terminal prints them, or one line saying why there are none."""
        from tracelab.reports.findings.findings import lines
        from tracelab.core.schema import recorded

        if not self.inputs:
            return [f"findings: none ({_why_none(self)})"]
        sources = {str(i.source) for i in self.inputs}
        untimed = {s for s in sources if not recorded(s, "timeline")}  # none of these: say what they cannot answer
        return lines(self.findings(topic, comparison), untimed, timed=bool(sources - untimed))


def _why_none(session: Session) -> str:
    kinds = {r.kind for r in session.runs}
    if kinds == {SNAPSHOT} or kinds == {SNAPSHOT, NONE}:
        return "a memory snapshot alone: the findings need a trace of the job"
    return "no traced run among the inputs"


def _topic(name: str | None):
    """The topic (reports/topics.Topic) of that name; None: every topic's findings."""
    from tracelab.reports.topics import named

    return None if name is None else named(name)


def _reduce(digests, device, plans: list) -> dict:
    """load_many's reduce: the digests named (RANK_DIGESTS names) or given (name -> fn); where
    None, every one the planned runs can use."""
    from tracelab.reports.ranks import digests_of_runs, rank_digests

    if digests is None:
        reduce = digests_of_runs(most_runs(plans))
    else:
        reduce = dict(digests) if isinstance(digests, Mapping) else rank_digests(digests)
    if device is not None and "roofline" in reduce:
        from tracelab.reports.roofline.roofline import RankRoofline

        reduce["roofline"] = RankRoofline(device)
    return reduce


# ---- grouping ------------------------------------------------------------------------------------
# A plan is what one path holds, before parsing: [(kind, where, files)], kind TRACES for a folder's
# traces, "file" for a loose trace file, SNAPSHOT, NONE.

def _plan(path: str) -> list[tuple[str, str, list[Path]]]:
    from tracelab.ingest.runfolder import traceless_run
    from tracelab.ingest.loading import TRACE_SUFFIXES, detect, expand

    if remote.is_url(path):
        found = expand(path)
        return [("file", path, found)] if [str(f) for f in found] == [path] else [(TRACES, path, found)]
    p = Path(path)
    if not p.is_dir():
        (f,) = expand(p)  # a path to nothing refused as expand words it (a broken link, say)
        return [(SNAPSHOT if detect(f) == "snapshot" else "file", path, [f])]
    if inner := run_folders(p):
        return [part for d in inner for part in _plan(str(d))] + _beside(p, inner)
    if traceless_run(p, TRACE_SUFFIXES + SNAPSHOT_SUFFIXES):
        return [(NONE, path, [])]
    found = expand(p, TRACE_SUFFIXES + SNAPSHOT_SUFFIXES)
    snapshots = [f for f in found if f.name.lower().endswith(SNAPSHOT_SUFFIXES) and detect(f) == "snapshot"]
    traces = [f for f in found if f not in snapshots]
    return ([(TRACES, path, traces)] if traces else []) + [(SNAPSHOT, str(f), [f]) for f in snapshots]


def most_runs(plans: list[list[tuple[str, str, list[Path]]]]) -> int:
    """The most traced runs the plans can make: a folder's traces one, each loose file one (loose
    files of one job's ranks become one run, which only their parse tells)."""
    return sum(kind in (TRACES, "file") for plan in plans for kind, _, _ in plan)


RUN_FOLDER_DEPTH = 3  # how deep run folders are looked for under one that is none: runs/pr/train-X/repeat-1


def run_folders(folder: Path, depth: int = RUN_FOLDER_DEPTH) -> list[Path]:
    """The run folders (run.json inside) under a folder that is none itself, the first met down
    each branch, in name order: `--out runs/pr` holding `tracelab run --repeat`'s folder of repeats."""
    if (folder / "run.json").exists() or depth == 0:
        return []
    try:
        children = sorted(d for d in folder.iterdir() if d.is_dir())
    except OSError:
        return []  # an unreadable folder: expand words why
    return [found for d in children for found in ([d] if (d / "run.json").is_file() else run_folders(d, depth - 1))]


def _beside(folder: Path, inner: list[Path]) -> list[tuple[str, str, list[Path]]]:
    """Traces in a folder of run folders outside every one of them: a run of their own."""
    from tracelab.ingest.loading import expand

    try:
        found = expand(folder)
    except NoTracesError:
        return []
    outside = [f for f in found if not any(d in f.parents for d in inner)]
    return [(TRACES, str(folder), outside)] if outside else []


def _runs(plans: list[list[tuple[str, str, list[Path]]]], parsed) -> list[Run]:
    """The runs, in the order given; loose rank files where the first of them was given."""
    from tracelab.ingest.runfolder import run_info
    from tracelab.ingest.loading import ranked

    runs: list[Run | None] = []
    loose: list[tuple[str, Path, list[Profile]]] = []
    for plan in plans:
        for kind, where, files in plan:
            got = [next(parsed) for _ in files]
            if kind == "file":
                if not loose:
                    runs.append(None)  # their place
                loose.append((where, files[0], got[0]))
            elif kind == NONE:
                runs.append(Run(where, NONE, [], run_info([where]), where, True))
            else:
                folder = kind == TRACES
                runs.append(Run(where, kind, ranked(files, got), run_info([where]) if folder else None, where, folder))
    at = runs.index(None) if loose else len(runs)
    return runs[:at] + _loose_runs(loose) + runs[at + 1:]


def _loose_runs(loose: list[tuple[str, Path, list[Profile]]]) -> list[Run]:
    """Trace files given one by one: one run where they are distinct ranks of one job, else a run each."""
    from tracelab.ingest.loading import ranked
    from tracelab.reports.ranks import not_one_job

    if len(loose) > 1:
        ranks = _ranks_of_one_job(loose)
        if ranks is not None and not_one_job(ranks) is None:
            where = os.path.commonpath([os.path.abspath(f) for _, f, _ in loose])
            return [Run(", ".join(n for n, _, _ in loose), TRACES, ranks, None, where, True, together=True)]
    return [Run(name, TRACES, ranked([f], [got]), None, name, False) for name, f, got in loose]


def _ranks_of_one_job(loose: list[tuple[str, Path, list[Profile]]]) -> list[Profile] | None:
    """The files' ranks in the order given, where each file says its ranks and no rank repeats; else None."""
    from tracelab.ingest.loading import check_unique, ranked

    try:
        ranks = [p for _, f, got in loose for p in ranked([f], [got], single=False)]
        check_unique(ranks)
    except RankError:
        return None
    return ranks


def _picked(run: Run, rank: int) -> Run:
    """--rank N: that rank of the run (pick.pick_rank); a run under none has none to pick."""
    from tracelab.ingest.pick import pick_rank

    return replace(run, profiles=pick_rank(run.profiles, rank, run.name)) if run.profiles else run


def _labelled(runs: list[Run]) -> list:
    """reports.session.label over the runs, each rank's device from its run.json where its trace names none."""
    from tracelab.reports.ranks import label

    if len(runs) == 1 and runs[0].together:  # rank files of one run: in the order given
        by_file: dict[str, list[Profile]] = {}
        for p in runs[0].profiles:
            by_file.setdefault(str(p.meta.path), []).append(p)
        return label(list(by_file), [False] * len(by_file), list(by_file.values()))
    inputs = label([r.where for r in runs], [r.folder for r in runs], [r.profiles for r in runs])
    named = [_device_name(r, p) for r in runs for p in sorted(r.profiles, key=lambda p: p.rank)]
    return [i if i.device or not name else replace(i, device=name) for i, name in zip(inputs, named)]


def _device_name(run: Run, p: Profile) -> str:
    """The GPU of the rank's local index in run.json's devices; a run on the CPU (index -1) 'CPU (x86_64)'."""
    devices = [d for d in ((run.info or {}).get("devices") or []) if isinstance(d, dict)]
    if not devices:
        return ""
    device = devices[p.rank % len(devices)]
    name = str(device.get("name", ""))
    return f"CPU ({name})" if device.get("index") == -1 else name


def digest_of(session: Session, name: str) -> dict[str, dict[int, Any]]:
    """Each traced run's `name` digest by rank, as its workers made it: {run name: {rank: digest}}."""
    return {r.name: {p.rank: p.summary[name] for p in r.profiles} for r in session.usable(name)}


def trace_count(paths: list[str | os.PathLike]) -> int:
    """The files the paths hold (traces and snapshots), before any is parsed."""
    return sum(len(files) for p in paths for _, _, files in _plan(str(p)))
