"""A topic's command (reports/<topic>/command.py declares one `COMMAND = Command(...)`) and the
one function of glue that runs every such command: check the options, open the Session with
what every command shares (paths, --rank, --step, --scheduler, --format), analyse, emit the
rendered result, end on the topic's findings after a table. tracelab/cli/program.py registers a
command per topic that has one (reports/topics.py), so adding a topic touches nothing here. A
command's module stays light (typer and the shared options): its hooks import the analysis and
renderers when they run, so `tracelab --help` imports no pandas.

Each hook is called with every option of the command by its parameter name (`paths`, `fmt`,
`rank`, and the topic's own) and takes those it reads, the rest as `**_`."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

from tracelab.cli.commands.shared import _check_choice, _emit, _options, _top, end_on_findings, findings_digests, open_session


def _as_given(**asked) -> dict:
    return asked


def _findings_opening(fmt: str, **_) -> dict:
    """What a command opens by default: only the digests its findings read (only after a table)."""
    return {"digests": findings_digests(fmt)}


def checked_top(top: int, **asked) -> dict:
    """A `check` for a command whose only own check is --top (0: all, None)."""
    return {**asked, "top": _top(top)}


def own_digest(name: str, digest) -> str:
    """The key a command's own digest goes by (reports/session.digest_key): its options (idle
    --top) never replace the digest of that name the findings read."""
    from tracelab.reports.ranks import digest_key

    return digest_key(name, digest)


def opening_own(name: str, digest, fmt: str) -> dict:
    """Session.open's digests for a command reading its own digest: it, and the findings' after a table."""
    return {"digests": {own_digest(name, digest): digest, **findings_digests(fmt)}}


@dataclass(frozen=True)
class Command:
    options: Callable  # its parameters (typer `Annotated`) are the command's; its docstring the help unless `help`
    analyse: Callable[..., Any]  # fn(session, **asked) -> the topic's result
    render: Callable[..., Any]  # fn(renderer, result, **asked) -> str, or a rich renderable for a table
    renderers: str  # "module:NAME" under tracelab.reports of its dict format -> renderer: --format's choices
    check: Callable[..., dict] = _as_given  # fn(**asked) -> asked, checked (UsageError) and normalised (--top 0: None)
    opening: Callable[..., dict] = _findings_opening  # fn(**asked) -> Session.open's digests / keep_events
    findings: str | None = None  # whose findings end the table: this topic's (its name), None every topic's
    comparison: Callable[[Any], Any] | None = None  # the result's Comparison the findings reuse (compare)
    instead: Callable[..., Any] | None = None  # fn(**asked) -> output that needs no session (compare --tree), or None
    help: str | None = None  # the help, where the docstring's line breaks would not do


def command_function(command: Command) -> Callable[..., None]:
    """The typer function of a topic's command: `command.options`' signature and docstring, the glue as its body."""

    @functools.wraps(command.options)
    def run(**asked) -> None:
        from tracelab.reports.topics import resolve

        renderers = resolve(command.renderers)  # imported only now: `--help` needs none of the analysis
        _check_choice("--format", asked["fmt"], tuple(renderers))
        asked = command.check(**asked)
        if command.instead is not None and (out := command.instead(**asked)) is not None:
            return _emit(out)
        options = _options(asked.get("step"), asked.get("scheduler"))
        session = open_session(asked["paths"], options, rank=asked.get("rank"), **command.opening(**asked))
        result = command.analyse(session, **asked)
        _emit(command.render(renderers[asked["fmt"]], result, **asked))
        reused = command.comparison(result) if command.comparison else None
        end_on_findings(asked["fmt"], session, command.findings, comparison=reused)

    return run
