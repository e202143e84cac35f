"""A workload's own options, parsed and checked before anything launches.

A workload is a program that torchrun starts once per rank; its options are
checked here, in the launching process, by the workload's options module (the
parse its ranks use too, workloads/options/) as rank 0 of the world would see
them, so a bad option is one clear UsageError instead of N crashed ranks. The
launcher imports no torch for that: only options that the options module says
need torch to check (needs_torch) are checked by the program's own parse.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import json
import os

from tracelab.core.errors import UsageError


class WorkloadHelp(Exception):
    """The workload's options were `--help`: its help text, for the CLI to print (exit 0)."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


def parse_workload_args(name: str, workload, argv: list[str], world_size: int, gpu: bool) -> dict:
    """The workload's options, parsed and checked as rank 0 of `world_size` would (without
    exiting) on a machine with or without a GPU: by its options module (workload.options),
    and by its program's parse (workload.program, torch imported) where the options need
    torch to check. Both read the world from the environment, as under torchrun."""
    options = importlib.import_module(workload.options)
    with _argparse_errors(name, workload.program), _as_rank_zero(world_size):
        args = options.parse(argv, gpu)
        if options.needs_torch(args):
            args = importlib.import_module(workload.program).parse(argv)
    return json.loads(json.dumps(vars(args), default=str))


def refuse_runner_options(argv: list[str]) -> None:
    """UsageError when the user's workload options hold --backend or --out, which tracelab run sets."""
    for own in ("--backend", "--out"):
        if any(a == own or a.startswith(own + "=") for a in argv):
            raise UsageError(own, f"give {own} to tracelab run, not in the workload's options")


@contextlib.contextmanager
def _argparse_errors(name: str, program: str):
    """argparse prints and exits; here its message becomes a UsageError, or its help a WorkloadHelp."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            yield
    except SystemExit as e:
        if e.code in (0, None):
            raise WorkloadHelp(captured.getvalue()) from None
        lines = [ln for ln in captured.getvalue().splitlines() if ln.strip()]
        reason = lines[-1].split(" error: ", 1)[-1] if lines else f"see python -m {program} --help"
        raise UsageError(f"{name} options", reason) from None


@contextlib.contextmanager
def _as_rank_zero(world_size: int):
    """The variables torchrun gives rank 0, for as long as the workload checks its options."""
    ranks = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1"}
    saved = {k: os.environ.get(k) for k in ranks}
    os.environ.update(ranks)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
