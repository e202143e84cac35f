"""What every command shares: its options' types, the opening (Options built once, the
inputs loaded with a progress bar, notes kept for the end), the output on stdout, and the
findings after a table. Only the CLI prints: tracelab/cli.py and these modules."""
from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from tracelab.core.errors import UsageError
from tracelab.reports.csvout import NOTE as CSV_NOTE

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


FormatOpt = Annotated[str, typer.Option("--format", help=FORMAT_HELP)]


DeviceOpt = Annotated[Optional[str], typer.Option(
    "--device", help="The device when the trace does not say or to override it: H100 (SXM), H100-PCIe, H100-NVL, "
                     "H200, A100, A100-40GB, A100-PCIe, B200.")]


def fail(message: str, status: int = EXIT_BAD_INPUT) -> None:
    """One line on stderr (control characters escaped), then exit non-zero."""
    typer.echo(f"tracelab: error: {_shown(message)}", err=True)
    raise typer.Exit(status)


def _options(step: str | None = None, scheduler: str | None = None):
    """The command's Options (tracelab/core/options.py), built once: --step and --scheduler, else
    the user's TRACELAB_STEP_PATTERN and TRACELAB_SCHEDULER; limits, caches and the memory budget
    from the environment. A bad pattern or number is one line here, not in a worker. Freed memory
    is reused from here on (limits.reuse_freed_memory), unless the user tuned malloc."""
    from tracelab.core import limits
    from tracelab.core.options import Options
    from tracelab.parsers._steps import compile_pattern

    options = Options.from_environment(step_pattern=step, scheduler=scheduler or None)
    compile_pattern(options.step_pattern)
    limits.reuse_freed_memory(options)  # each rank's buffers reused, not page-faulted afresh
    return options


def open_session(paths: list[str], options=None, **how):
    """Session.open (tracelab/session.py) of the paths with the command's Options (default: the
    environment's), a progress bar on stderr while the ranks are parsed; its notes are said
    after the output. `how`: Session.open's digests, keep_events, rank, device."""
    from tracelab.ingest.session import Session

    with _progress() as bar:
        task = bar.add_task("loading traces", total=None)
        session = Session.open(paths, options or _options(), on_loaded=lambda _: bar.advance(task), **how)
    _SESSIONS.append(session)
    return session


def findings_digests(fmt: str) -> dict:
    """The digests the findings read, made in the workers: only the table ends on the findings."""
    from tracelab.reports.ranks import FINDINGS, rank_digests

    return rank_digests(FINDINGS) if fmt == "table" else {}


def end_on_findings(fmt: str, session, topic: str | None = None, comparison=None) -> None:
    """After a table: the session's findings (of `topic` only, where given), or the line saying
    why there are none; CSV and JSON stay as they are."""
    if fmt == "table":
        _emit("\n" + "\n".join(session.findings_lines(topic, comparison)))


def each_run(render, fmt: str, parts: list[tuple[str, tuple]]):
    """`render(*args)` of each run's (name, args): one run's output as it is; several runs' tables
    one after another under their names, JSON as {"runs": [{"input": name, ...}]}, CSV with an
    `input` column first."""
    if len(parts) == 1:
        return render(*parts[0][1])
    if fmt == "json":
        import json

        from tracelab.reports.jsonout import dumps

        return dumps({"runs": [{"input": name, **json.loads(render(*args))} for name, args in parts]})
    if fmt == "csv":
        return "".join(_csv_with_input(name, render(*args), first=n == 0) for n, (name, args) in enumerate(parts))
    from rich.console import Group
    from rich.text import Text

    return Group(*(g for name, args in parts for g in (Text(f"\n{name}:", style="bold"), render(*args))))


def _csv_with_input(name: str, text: str, first: bool) -> str:
    """CSV text with an `input` column (the run's name) in front; its header only where `first`."""
    import csv
    import io

    from tracelab.reports.csvout import neutral

    rows = list(csv.reader(io.StringIO(text)))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerows([["input", *rows[0]]] * first + [[neutral(name), *r] for r in rows[1:]])
    return out.getvalue()


_SESSIONS: list = []  # the sessions this command opened: their notes are said after the output (main)


def said_notes() -> list[str]:
    """Each note of the sessions opened, once, as the CLI prints it."""
    return list(dict.fromkeys(f"tracelab: note: {n.text}" for s in _SESSIONS for n in s.notes))


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
    from tracelab.cli.terminal import printable

    return printable(str(path))


def _emit(rendered) -> None:
    """Output on stdout; names from traces reach a terminal with control characters escaped."""
    from tracelab.cli.terminal import Escaped, printable

    if isinstance(rendered, str):
        text = printable(rendered, keep="\n\t") if sys.stdout.isatty() else rendered  # CSV/JSON to a file: as is
        typer.echo(text, nl=not rendered.endswith("\n"))
    else:
        from rich.console import Console

        Console(width=None if sys.stdout.isatty() else 160).print(Escaped(rendered))


def _top(top: int) -> int | None:
    """--top, one meaning for every command: the N largest rows; 0 all of them (None)."""
    if top < 0:
        raise UsageError("--top", f"must be 0 (all) or more, not {top}")
    return top or None


def _check_choice(option: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(option, f"{value!r} is not one of {', '.join(choices)}")


def many_traces(paths: list[str]) -> bool:
    """More trace files than reports show one by one (figures.MANY_RANKS)."""
    from tracelab.reports.html.figures import MANY_RANKS
    from tracelab.ingest.session import trace_count

    return trace_count(paths) > MANY_RANKS
