"""The tracelab command line: the only place that prints, exits or reads argv."""
from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from .errors import TracelabError
from .schema import SchemaError

app = typer.Typer(
    help="tracelab: where did the GPU time go, on each rank? Reads proton (.hatchet), "
         "torch.profiler (Kineto JSON) and nsys (SQLite) traces into one schema.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

EXIT_BAD_INPUT = 2


def fail(message: str, status: int = EXIT_BAD_INPUT) -> None:
    """One line on stderr, then exit non-zero."""
    typer.echo(f"tracelab: error: {message}", err=True)
    raise typer.Exit(status)


def main() -> None:
    """Entry point that turns library errors into one line on stderr and exit status 2."""
    try:
        app()
    except (TracelabError, SchemaError) as e:
        typer.echo(f"tracelab: error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
