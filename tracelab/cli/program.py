"""The tracelab command line: the only place that prints, exits or reads argv."""
from __future__ import annotations

import os
import re
import signal
import sys

import typer
from typer.core import TyperGroup

from tracelab.cli.commands import factors, files, gate, run
from tracelab.cli.commands.shared import _SESSIONS, EXIT_BAD_INPUT, said_notes
from tracelab.core.errors import Interrupted


class _Commands(TyperGroup):
    """The app's commands: each topic's first (reports/topics.py), then those registered below. The
    topics' are made when the app runs, from their command modules alone (options and help; each
    imports its analysis when it runs): `tracelab --help` imports no pandas."""

    def __init__(self, *, commands=None, **attrs) -> None:
        super().__init__(commands={**_topic_commands(), **(commands or {})}, **attrs)


def _topic_commands() -> dict:
    """name -> click command of each topic that has one, in reports/topics.LISTED order, then TOPICS'."""
    from tracelab.cli.commands.topic import command_function
    from tracelab.reports.topics import LISTED, TOPICS

    made = {}
    for topic in sorted((t for t in TOPICS if t.command), key=lambda t: (*LISTED, t.name).index(t.name)):
        spec = topic.command_spec()
        one = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        fn = command_function(spec)
        one.command(topic.name, **_listed(fn, spec.help))(fn)
        made[topic.name] = typer.main.get_command(one)
    return made


class _App(typer.Typer):
    """The typer app whose click command is made once per process and set of topics: making it reads
    every command's options from its function's signature (~40 ms), which a process that runs
    several commands (a notebook, a test run) would otherwise pay for each. Typer's own call only
    adds its pretty tracebacks, which this app turns off."""

    def __call__(self, *args, **kwargs):
        return _click_command(self)(*args, **kwargs)


def _click_command(made: typer.Typer):
    """`made`'s click command, remade where reports/topics.TOPICS changed (a topic registered since)."""
    from tracelab.reports.topics import TOPICS

    key = (id(made), TOPICS)
    if _MADE.get("key") != key:
        _MADE.update(key=key, command=typer.main.get_command(made))
    return _MADE["command"]


_MADE: dict = {}  # key: (the app's id, TOPICS) the command was made for; command: the click command

app = _App(
    cls=_Commands,
    help="tracelab: where did the GPU time go, on each rank? Reads proton (.hatchet), "
         "torch.profiler (Kineto JSON) and nsys (SQLite) traces into one schema.",
    epilog="Examples:  tracelab run decode --ranks 2  |  tracelab breakdown rank0.hatchet --by scope  |  "
           "tracelab compare rank0.hatchet rank1.hatchet  |  tracelab report runs/decode-torch-*/ -o report.html",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _group() -> None:
    """tracelab: where did the GPU time go, on each rank?"""


def _listed(fn, help_text: str | None = None) -> dict:
    """How `tracelab --help` lists a command: the first sentence of its help, as one line
    (rich keeps a docstring's line breaks in the listing)."""
    flat = " ".join((help_text or fn.__doc__ or "").split("\n\n")[0].split())
    first = re.match(r"(.{20,}?[.?])(\s|$)", flat)
    return {"short_help": first.group(1) if first else flat, **({"help": help_text} if help_text else {})}


# each topic's command comes first (_Commands); the others are registered here, in the order `--help` lists them
app.command(**_listed(files.report))(files.report)
app.command(**_listed(gate.gate, gate.GATE_HELP))(gate.gate)
export_app = typer.Typer(help="Write the inputs for another tool.", no_args_is_help=True)
app.add_typer(export_app, name="export")
export_app.command("perfetto", **_listed(files.export_perfetto))(files.export_perfetto)
export_app.command("parquet", **_listed(files.export_parquet))(files.export_parquet)
app.command(**_listed(factors.factors))(factors.factors)
app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
            **_listed(run.run))(run.run)


def _run_app() -> int:
    """The app, its usage errors in one line on stderr (click's own would draw a box):
    'tracelab: error: No such option: --nope (Possible options: --top); see tracelab breakdown --help'.
    A command or group given no arguments prints its help (exit 2, as click does). Returns the
    exit status."""
    try:
        done = app(standalone_mode=False, prog_name="tracelab")
    except typer.TyperException as e:  # click's usage and parameter errors (typer vendors click)
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:
            if text := ctx.get_help():  # rich mode prints it itself and returns ""
                typer.echo(text, err=True)
        else:
            where = ctx.command_path if ctx is not None else "tracelab"
            typer.echo(f"tracelab: error: {e.format_message().rstrip('.')}; see {where} --help", err=True)
        return e.exit_code
    except typer.Abort:
        typer.echo("tracelab: error: aborted", err=True)
        return 1
    return done if isinstance(done, int) else 0


def main() -> None:
    """Entry point, the one place that turns what goes wrong into one line on stderr
    (tracelab/terminal.py): library errors, OS failures (permissions, a full disk, a file
    past `ulimit -f`) and memory running out exit with status 2; warnings of a command
    that succeeds follow its output, one line each."""
    import warnings

    from tracelab.ingest.outputs import interruptible
    from tracelab.cli.terminal import error_line, printable, warning_lines

    _SESSIONS.clear()  # this command's own (a test may run several in one process)
    with warnings.catch_warnings(record=True) as caught, interruptible():
        try:
            sys.exit(_run_app())
        except SystemExit as done:
            if not done.code:
                for line in [*map(printable, said_notes()), *warning_lines(caught)]:
                    typer.echo(line, err=True)
            raise
        except Interrupted as stop:  # what was half written is gone (tracelab/ingest/outputs.py)
            typer.echo(f"tracelab: error: stopped by {signal.Signals(stop.signum).name}; no output was left "
                       "half written", err=True)
            sys.exit(128 + stop.signum)
        except BrokenPipeError:  # stdout closed early (`| head`): nothing more to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except Exception as e:
            if (line := error_line(e)) is None:
                raise  # a bug in tracelab: its traceback is the report
            typer.echo(line, err=True)
            sys.exit(EXIT_BAD_INPUT)
