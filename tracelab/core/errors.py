"""Errors the library raises. Each names the file (or input) and the reason;
only cli.py turns them into one line on stderr and a non-zero exit."""
from __future__ import annotations

import os


class TracelabError(Exception):
    """Base: `where` is the file, folder or option at fault, `reason` what is wrong with it."""

    def __init__(self, where: str | os.PathLike | None, reason: str):
        self.where = None if where is None else str(where)
        self.reason = reason
        super().__init__(f"{self.where}: {reason}" if self.where else reason)

    def __reduce__(self):
        """Rebuild from (where, reason): an error raised in a worker process of load_many
        crosses back to the parent intact (Exception's default pickles only the message)."""
        return type(self), (self.where, self.reason)


class TraceFormatError(TracelabError):
    """The file is not a trace tracelab can read, or it is damaged."""


class RankError(TracelabError):
    """Ranks cannot be told apart, or two inputs claim the same rank."""


class NoTracesError(TracelabError):
    """A folder or list held no trace files."""


class UsageError(TracelabError):
    """An option or argument the user gave cannot work (unknown name, bad number)."""


class ToolMissingError(TracelabError):
    """An external tool (nsys, torchrun, triton) is not installed or not found."""


class OutputError(TracelabError):
    """A file tracelab writes (a report, an export) cannot be written: permissions, a
    read-only folder, a full disk, a size limit (`ulimit -f`)."""


class MemoryLimitError(TracelabError):
    """A trace whose rows would need more memory than the machine has left (tracelab/memory.py)."""


class RunError(TracelabError):
    """A launched workload failed; `where` is the run folder or rank."""


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived (cli.main turns both into it). A BaseException, as
    KeyboardInterrupt is, so that no `except Exception` swallows it while every `finally` and
    `except BaseException` still removes what was half written; not a KeyboardInterrupt, which
    click would turn into "Aborted!" and exit status 1."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
