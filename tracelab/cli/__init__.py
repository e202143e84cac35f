"""The command line: the typer app and its entry point (program.py), its commands, and the one place that prints and exits."""
from tracelab.cli.program import app, main  # noqa: F401  tracelab.cli:main, the entry point
