"""What every command shares: its options' types, the opening (Options built once, the
inputs loaded with a progress bar, notes kept for the end), the output on stdout, and the
findings after a table. Only the CLI prints: tracelab/cli.py and these modules."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UsageError
from ..reports.csvout import NOTE as CSV_NOTE

EXIT_BAD_INPUT = 2
FORMAT_HELP = "table, csv or json. " + CSV_NOTE + "."


Paths = Annotated[list[str], typer.Argument(help="Trace files (.hatchet, Kineto .json/.json.gz, nsys .sqlite) "
                                                  "or folders holding them (a run folder, say).")]


RankOpt = Annotated[Optional[int], typer.Option("--rank", help="Only this rank, picked from every input (a "
                                                                "multi-rank nsys file, a folder); a lone file that does "
                                                                "not say its rank is taken as it.")]


StepOpt = Annotated[Optional[str], typer.Option("--step", help="Regular expression naming the step ranges "
                                                               "(default: ProfilerStep#N, step N, iteration N, token N; "
                                                               "say decode_one_token for our older decode captures).")]


SchedulerOpt = Annotated[Optional[str], typer.Option("--scheduler", help="Address of a running Dask scheduler "
                                                                      "(tcp://host:8786) whose workers parse and reduce "
                                                                      "the ranks; default: $TRACELAB_SCHEDULER, else local "
                                                                      "processes. Paths may be fsspec URLs (s3://...). "
                                                                      "Needs pip install 'tracelab\\[dist]'.")]


DeviceOpt = Annotated[Optional[str], typer.Option(
    "--device", help="The device when the trace does not say or to override it: H100 (SXM), H100-PCIe, H100-NVL, "
                     "H200, A100, A100-40GB, A100-PCIe, B200.")]


def fail(message: str, status: int = EXIT_BAD_INPUT) -> None:
    """One line on stderr (control characters escaped), then exit non-zero."""
    typer.echo(f"tracelab: error: {_shown(message)}", err=True)
    raise typer.Exit(status)


def _options(step: str | None = None, scheduler: str | None = None):
    """The command's Options (tracelab/options.py), built once: --step and --scheduler, else the
    user's TRACELAB_STEP_PATTERN and TRACELAB_SCHEDULER. A bad pattern is one line here, not in a worker."""
    from ..options import from_environment
    from ..parsers._steps import compile_pattern

    options = from_environment(step, scheduler)
    compile_pattern(options.step_pattern)
    return options


def _load(paths: list[str], rank: int | None = None, **work):
    """Load with a progress bar on stderr when there are several files; --rank picks one rank.
    `work`: load_many's reduce, keep_events and options (default: the environment's)."""
    from ..loading import expand, load_many
    from ..pick import pick_rank

    work.setdefault("options", _options())
    files = expand(_with_traces(paths))
    if len(files) == 1:
        profiles = load_many(files, **work)  # a file of several processes gives one Profile per rank
    else:
        with _progress() as bar:
            task = bar.add_task(f"loading {len(files)} traces", total=len(files))
            profiles = load_many(files, on_loaded=lambda _: bar.advance(task), **work)
    _say_notes(profiles)
    return profiles if rank is None else pick_rank(profiles, rank, ", ".join(paths))


def _load_runs(paths: list[str], rank: int | None = None, **work) -> list[tuple[str | None, list]]:
    """_load of the inputs as one job, [(None, profiles)]; where ranks repeat across them (two runs
    that both hold rank 0), each input on its own, [(path, profiles), ...], so every command takes
    any mix of run folders and files."""
    from ..errors import RankError

    try:
        return [(None, _load(paths, rank, **work))]
    except RankError:
        if len(paths) < 2:
            raise
        return [(path, _load([path], rank, **work)) for path in paths]


def _with_traces(paths: list[str]) -> list[str]:
    """The paths less run folders without traces (runs under backend none, whose run.json the
    findings and the report still read: `tracelab breakdown runs/*/` takes them in its stride);
    all of them where every path is such a folder (expand then says there is no trace)."""
    from ..inputs import traceless_run

    kept = [p for p in paths if not traceless_run(Path(p))]
    return kept or paths


def _digests_per_input(paths: list[str], rank: int | None, name: str, reducer, options) -> list[tuple[str, dict]]:
    """Each input on its own (two runs may both hold rank 0): its ranks' `name` digest by rank,
    made by `reducer` in the workers that parse them."""
    out = []
    for path in _with_traces(paths):
        profiles = _load([path], rank, reduce={name: reducer}, keep_events=False, options=options)
        out.append((path, {p.rank: p.summary[name] for p in profiles}))
    return out


_NOTES: list[str] = []  # what the parsers noted about the inputs, said after the output (main)


def _say_notes(profiles) -> None:
    """What a parser noted about a trace (meta["notes"]: a CUDA graph captured outside it, say):
    one line each on stderr once the command has succeeded, each distinct line once."""
    _NOTES.extend(f"tracelab: note: {p.meta.get('path')}: {note}" for p in profiles for note in p.meta.get("notes") or ())


def _err_console():
    from rich.console import Console

    return Console(stderr=True)


def _progress(disable: bool = False):
    """A transient progress bar on stderr, only on a terminal (elsewhere it left a blank line)."""
    from rich.progress import Progress

    console = _err_console()
    return Progress(transient=True, console=console, disable=disable or not console.is_terminal)


def _status(text: str):
    """A transient spinner with `text` on stderr while a long step runs, only on a terminal."""
    from contextlib import nullcontext

    console = _err_console()
    return console.status(text) if console.is_terminal else nullcontext()


def _shown(path) -> str:
    """A path as printed: control characters escaped (terminal.printable)."""
    from ..terminal import printable

    return printable(str(path))


def _emit(rendered) -> None:
    """Output on stdout; names from traces reach a terminal with control characters escaped."""
    from ..terminal import Escaped, printable

    if isinstance(rendered, str):
        text = printable(rendered, keep="\n\t") if sys.stdout.isatty() else rendered  # CSV/JSON to a file: as is
        typer.echo(text, nl=not rendered.endswith("\n"))
    else:
        from rich.console import Console

        Console(width=None if sys.stdout.isatty() else 160).print(Escaped(rendered))


def _findings(fmt: str, paths: list[str], profiles: list | None = None, groups: list | None = None,
              comparison=None) -> None:
    """The findings lines (reports/findings/findings.py), the report's sentences, after a table's output
    (CSV and JSON stay as they are)."""
    if fmt != "table":
        return
    from ..inputs import findings_of, regroup
    from ..reports.findings.findings import lines
    from ..schema import recorded

    groups = groups if groups is not None else regroup(paths, profiles)
    found = findings_of(paths, groups, comparison)
    sources = {str(p.meta.get("source")) for g in groups for p in g}
    untimed = {s for s in sources if not recorded(s, "timeline")}  # none of these: say what they cannot answer
    _emit("\n" + "\n".join(lines(found, untimed, timed=bool(sources - untimed))))


def _top(top: int) -> int | None:
    """--top, one meaning for every command: the N largest rows; 0 all of them (None)."""
    if top < 0:
        raise UsageError("--top", f"must be 0 (all) or more, not {top}")
    return top or None


def _check_choice(option: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(option, f"{value!r} is not one of {', '.join(choices)}")


def _load_groups(paths: list[str], keep_events: bool = True, options=None, device=None,
                 digests: tuple[str, ...] | None = None) -> list[list]:
    """Each path (file or folder) loaded on its own, so ranks may repeat across runs;
    one progress bar on stderr over all their files. Without `keep_events` only each rank's
    summaries (`digests`, reports.session.RANK_DIGESTS names; all where None), made in the
    worker that parsed it, reach this process."""
    from ..inputs import load_groups

    total = _trace_count(paths)
    with _progress(disable=total < 2) as bar:
        task = bar.add_task(f"loading {total} traces", total=total)
        groups = load_groups(paths, on_loaded=lambda _: bar.advance(task), keep_events=keep_events,
                             digests=digests, options=options or _options(), device=device)
    _say_notes([p for group in groups for p in group])
    return groups


def _picked(paths: list[str], groups: list[list], rank: int | None) -> list[list]:
    """--rank N: that rank out of each input's profiles."""
    from ..pick import pick_rank

    return groups if rank is None else [pick_rank(g, rank, p) for p, g in zip(paths, groups)]


def _trace_count(paths: list[str]) -> int:
    """The trace files the paths hold (a run folder without traces holds none)."""
    from pathlib import Path

    from ..inputs import traceless_run
    from ..loading import expand

    return sum(0 if traceless_run(Path(p)) else len(expand(p)) for p in paths)


def _many_traces(paths: list[str]) -> bool:
    """More trace files than reports show one by one (figures.MANY_RANKS)."""
    from ..reports.html.figures import MANY_RANKS

    return _trace_count(paths) > MANY_RANKS

