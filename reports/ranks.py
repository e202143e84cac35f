"""One command's inputs: the labelled ranks (`Input`), their per-rank digests (`RANK_DIGESTS`,
the union of every topic's, reports/topics.py) and how inputs are labelled (`label`).

Reports know no files: tracelab.ingest.inputs loads the paths (each rank reduced by RANK_DIGESTS in
the worker that parsed it) and calls `label`; every report reads an Input through
`Input.digest(name)`. A digest is one function of one rank, `fn(rank: RankData) -> Any`
(tracelab.core.schema: its events, meta and host frame).
"""
from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from tracelab.core.schema import Memo, Meta, Profile, RankData

from .topics import TOPICS

# per-rank tables the comparison and the report need, computed in the worker that parses each
# rank (tracelab.load_many's `reduce`): the parent gathers these, never a rank's events
RANK_DIGESTS = {name: fn for topic in TOPICS for name, fn in topic.digest_fns().items()}
# the digests each output reads; a command asks its workers for these only (the report: all)
COMPARISON = ("sums", "noise", "has_times", "waits", "timeline", "comm_kernels")  # compare's table and verdict
FINDINGS = tuple(n for n in RANK_DIGESTS if n not in ("span", "segments", "gate"))  # all but the timeline figure's and the gate's
PERFETTO = ("sums", "has_times", "first_ns", "waits")  # export perfetto: sizes, clocks, steps


def rank_digests(names: tuple[str, ...] | None = None) -> dict:
    """RANK_DIGESTS of these names (every one where None): load_many's reduce for one output."""
    return dict(RANK_DIGESTS) if names is None else {n: RANK_DIGESTS[n] for n in names}


def digests_of_runs(runs: int) -> dict:
    """Every RANK_DIGESTS a report of this many runs reads: a topic's only where the runs are at
    least its min_runs (the gate's section, of a later run against the first, needs two)."""
    return {name: fn for topic in TOPICS if runs >= topic.min_runs for name, fn in topic.digest_fns().items()}

def digest_key(name: str, fn) -> str:
    """The name a command's own digest goes by: `name` where it is the registry's (RANK_DIGESTS),
    else `name(param=value, ...)`, so that a command's parameters (idle --top) never replace the
    digest of that name the findings read."""
    known = RANK_DIGESTS.get(name)
    if known is not None and type(known) is type(fn) and vars(known) == vars(fn):
        return name
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in sorted(vars(fn).items()))})"


_TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json", ".hatchet",
                   ".sqlite3", ".sqlite")


@dataclass
class Input(Memo):
    """One compared column: `label` names it; `group` is its run (or "" for ranks of one run)."""

    label: str
    group: str
    rank: int
    source: str
    events: pd.DataFrame
    epoch_ns: int | None = None  # the trace's start on the epoch clock, when it says
    device: str = ""  # the GPU model(s) the trace names, "" when it names none (proton)
    steps: int | None = None  # steps covered, given for traces without step instances (proton)
    summary: dict = field(default_factory=dict)  # RANK_DIGESTS, computed where the rank was parsed
    path: str = ""  # the file it came from
    meta: Meta = field(default_factory=Meta)  # the trace's meta (devices, proton's scope metrics)
    host: pd.DataFrame | None = None  # the trace's host frame (Profile.host), for digests made here
    memory: pd.DataFrame | None = None  # its memory frame (Profile.memory), likewise
    # Memo.shared's: what several sections and findings build alike from its digests (its idle under its rank)
    memo: dict = field(default_factory=dict, repr=False, compare=False)

    def digest(self, name: str):
        """RANK_DIGESTS[name] of this input: as its worker made it, else from its events
        (kept, so each is made once), with the host and memory frames its worker would have
        given (a digest made here equals the worker's). Reports read inputs through these, never
        their events, so a thousand ranks' events need never meet in one process."""
        if name not in self.summary:
            if self.summary and not len(self.events):  # its worker dropped the events: a bug, not a zero
                raise KeyError(f"digest {name!r} of {self.label} was not made where it was parsed "
                               f"(made: {', '.join(self.summary)})")
            self.summary[name] = RANK_DIGESTS[name](RankData(self.events, self.meta, self.host, self.memory))
        return self.summary[name]

    @property
    def sums(self) -> pd.DataFrame:
        return self.digest("sums")

    @property
    def timed(self) -> bool:
        """Whether its rows have start times (torch, nsys; CPU-only traces too; not proton)."""
        return self.digest("has_times")


def _input(label: str, group: str, p: Profile) -> Input:
    return Input(label, group, p.rank, str(p.meta.source), p.events, p.meta.trace_start_epoch_ns,
                 device_names(p.meta), p.meta.steps, p.summary, p.meta.path, p.meta, p.host,
                 p.memory)
    # the profile's own summary: a digest made from its events for one labelling (the report) is
    # reused by the next (its findings), not made again


def device_names(meta: Meta) -> str:
    """The GPU model(s) a trace's meta names ("NVIDIA H200"), "" when none is named."""
    names = {str(d.get("name")) for d in meta.devices.values() if isinstance(d, dict) and d.get("name")}
    return ", ".join(sorted(names))


def _stem(path: Path) -> str:
    name = path.name
    for suffix in _TRACE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _parts(paths: list[Path], folders: list[bool]) -> list[tuple[str, ...]]:
    """Folders, then the stem (or folder name); the whole file name where two files
    of one folder share a stem (rank0.json beside rank0.json.gz)."""
    parts = [(*p.parent.parts, p.name if folder else _stem(p)) for p, folder in zip(paths, folders)]
    seen = Counter(parts)
    return [(*p.parent.parts, p.name) if seen[t] > 1 else t for p, t in zip(paths, parts)]


def _shortest_suffix(parts: list[tuple[str, ...]], i: int) -> str:
    mine, others = parts[i], parts[:i] + parts[i + 1:]
    depth = next((d for d in range(1, len(mine)) if all(o[-d:] != mine[-d:] for o in others)), len(mine))
    return Path(*mine[-depth:]).as_posix()


def path_labels(paths: list[Path], folders: list[bool]) -> list[str]:
    """Each path's shortest tail (stem, or a folder's name, then as many parent folders as it
    takes) that no other input path shares: `a/rank0` and `b/rank0`, but `rank1` beside them.
    The very same path given more than once is numbered in the order given: `rank0#1`, `rank0#2`.
    `folders` says which paths are folders (the caller looked)."""
    full = [Path(os.path.abspath(p)) for p in paths]
    is_folder = dict(zip(full, folders))
    distinct = list(dict.fromkeys(full))
    parts = _parts(distinct, [is_folder[p] for p in distinct])
    label = {p: _shortest_suffix(parts, i) for i, p in enumerate(distinct)}
    times, nth = Counter(full), Counter()
    out = []
    for p in full:
        nth[p] += 1
        out.append(label[p] if times[p] == 1 else f"{label[p]}#{nth[p]}")
    return out


def _group_names(paths: list[Path], folders: list[bool], groups: list[list[Profile]]) -> list[str]:
    """A short unique name per input path: the source when each input is one distinct
    profiler, else its path label (see path_labels)."""
    sources = [{p.meta.source for p in g} for g in groups]
    if all(len(s) == 1 for s in sources) and len({next(iter(s)) for s in sources}) == len(groups):
        return [str(next(iter(s))) for s in sources]
    return [_not_a_rank(name, Path(os.path.abspath(p))) for name, p in zip(path_labels(paths, folders), paths)]


_RANK_NAME = re.compile(r"rank[-_]?\d+", re.IGNORECASE)


def _not_a_rank(name: str, path: Path) -> str:
    """A run's name that reads as a rank's (a lone `rank0.pt.trace.json.gz` among run folders)
    with its folder before it, `decode/rank0`: its findings would read 'rank0: rank 0's ...',
    the run taken for a rank."""
    return f"{path.parent.name}/{name}" if _RANK_NAME.fullmatch(name) and path.parent.name else name


MAX_START_SPREAD_NS = 3600 * 10**9  # the ranks of one job start their traces within an hour of each other


def not_one_job(profiles: list[Profile]) -> str | None:
    """Why the profiles cannot be ranks of one job, or None: one profiler, one world size where the
    files give it, and wall-clock starts within MAX_START_SPREAD_NS where they give them (HTA's trace_diff
    pair, rank 3 of 8 and rank 1 of 2, 8.5 days apart, are two runs, not a run whose collectives
    are days late)."""
    def who(p: Profile) -> str:
        return f"{p.meta.path} (rank {p.rank} of {p.meta.world_size or '?'})"

    if len(sources := list(dict.fromkeys(str(p.meta.source) for p in profiles))) > 1:
        return f"{who(profiles[0])} and the others are not one job: their profilers differ ({', '.join(sources)})"
    sized = [p for p in profiles if p.meta.world_size is not None]
    if other := [p for p in sized if p.meta.world_size != sized[0].meta.world_size]:
        return f"{who(sized[0])} and {who(other[0])} are not one job: their world sizes differ"
    timed = sorted((s, i) for i, p in enumerate(profiles) if isinstance(s := p.meta.trace_start_epoch_ns, int))
    if len(timed) > 1 and timed[-1][0] - timed[0][0] > MAX_START_SPREAD_NS:
        first, last = profiles[timed[0][1]], profiles[timed[-1][1]]
        return (f"{who(first)} and {who(last)} are not one job: their traces start "
                f"{(timed[-1][0] - timed[0][0]) / 3.6e12:,.1f} hours apart")
    return None


def _one_job(profiles: list[Profile]) -> bool:
    return not_one_job(profiles) is None


def label(paths: list[str | Path], folders: list[bool], groups: list[list[Profile]]) -> list[Input]:
    """Label the profiles loaded from each path (`folders`: which paths are folders):
    `rank3` when all are ranks of one run (distinct ranks, one source, at most one folder, one
    job: _one_job),
    else `<run>/rank3` (or `<run>` for a lone profile) since ranks collide across runs.
    tracelab.ingest.inputs.label_inputs looks at the paths and calls this."""
    paths = [Path(p) for p in paths]
    profiles = [p for g in groups for p in g]
    ranks = [p.rank for p in profiles]
    one_run = len(set(ranks)) == len(ranks) and sum(folders) <= 1 and _one_job(profiles)
    if one_run:  # in the order given (the first is the reference); a folder's ranks by rank
        return [_input(f"rank{p.rank}", "", p) for g in groups for p in sorted(g, key=lambda p: p.rank)]
    out = []
    for name, group in zip(_group_names(paths, folders, groups), groups):
        for p in sorted(group, key=lambda p: p.rank):
            label = name if len(group) == 1 else f"{name}/rank{p.rank}"
            out.append(_input(label, name, p))
    return _numbered(out)


def _numbered(inputs: list[Input]) -> list[Input]:
    """Labels made unique: a rank file given on its own beside its run folder is `run/rank0` both
    ways; each occurrence of a repeated label is numbered in the order given (`run/rank0#1`,
    `run/rank0#2`), as path_labels numbers a path given twice. Tables key their columns by label."""
    times, nth = Counter(i.label for i in inputs), Counter()
    out = []
    for i in inputs:
        nth[i.label] += 1
        out.append(i if times[i.label] == 1 else replace(i, label=f"{i.label}#{nth[i.label]}"))
    return out
