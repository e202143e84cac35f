"""What the CLI prints, made safe and short: every error, OS failure and warning as one
line, and names from traces or file names with their control characters escaped, so a
kernel or file named with `ESC[2J` cannot clear the screen and a newline in a name cannot
make two lines. Used only by cli.py, the one place that prints."""
from __future__ import annotations

import re
import sys
import warnings

from tracelab.core.errors import TracelabError

# C0 and C1 controls, DEL, lone surrogates (undecodable bytes), line/paragraph separators and
# the bidirectional overrides that reorder what a terminal shows
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escaped(match: re.Match) -> str:
    code = ord(match.group())
    return {9: "\\t", 10: "\\n", 13: "\\r"}.get(code) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(text: str, keep: str = "") -> str:
    """`text` with control characters written as escapes (\\x1b, \\n, \\u202e); those in `keep` stay."""
    if not keep:
        return _UNSAFE.sub(_escaped, text)
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escaped(m), text)


# an echoed value (a name, a path, an option's text) is shown at most this long, then its length;
# the line as a whole at most LINE_CHARS: an error about a 50 MB kernel name stays one short line
VALUE_CHARS = 200
LINE_CHARS = 2000
_LONG_WORD = re.compile(r"\S{%d,}" % (VALUE_CHARS + 1))


def _cut(text: str, keep: int) -> str:
    return f"{text[:keep]}... ({len(text):,} characters)"


def shortened(text: str) -> str:
    """`text` with each run of more than VALUE_CHARS characters without a space cut to its first
    VALUE_CHARS and its length, and the whole cut to about LINE_CHARS (its head and its end)."""
    text = _LONG_WORD.sub(lambda m: _cut(m.group(), VALUE_CHARS), text)
    if len(text) <= LINE_CHARS:
        return text
    head, tail = LINE_CHARS * 2 // 3, LINE_CHARS // 3
    return f"{text[:head]} ... ({len(text) - head - tail:,} characters left out) ... {text[-tail:]}"


def _schema_error(error: BaseException) -> bool:
    """A tracelab.core.schema.SchemaError, without importing that module (and pandas) to ask:
    one can only have been raised once it was imported."""
    schema = sys.modules.get("tracelab.core.schema")
    return schema is not None and isinstance(error, schema.SchemaError)


def error_line(error: BaseException) -> str | None:
    """The one line for an error the user can act on; None for anything else (a bug in
    tracelab, which keeps its traceback)."""
    if isinstance(error, TracelabError) or _schema_error(error):
        text = str(error)
    elif isinstance(error, OSError) and error.filename is not None:
        text = f"{error.filename}: {error.strerror or error}"
    elif isinstance(error, OSError):
        text = error.strerror or str(error)
    elif isinstance(error, MemoryError):
        text = "out of memory"
    else:
        return None
    return "tracelab: error: " + printable(shortened(text))


def warning_lines(caught: list[warnings.WarningMessage]) -> list[str]:
    """Each distinct warning once, as one line. tracelab says what it notices as notes, never
    as Python warnings, so a warning caught here is a library's (numpy, pandas, torch): said
    as that library's, with its category, never as tracelab's own finding."""
    lines = [f"tracelab: warning: a library tracelab uses warned ({_origin(w)}): {printable(shortened(str(w.message)))}"
             for w in caught]
    return list(dict.fromkeys(lines))


def _origin(w: warnings.WarningMessage) -> str:
    module = getattr(w.category, "__module__", "builtins")
    where = f"{module}.{w.category.__name__}" if module != "builtins" else w.category.__name__
    return printable(shortened(f"{where} at {w.filename.rsplit('/', 1)[-1]}:{w.lineno}"))


class Escaped:
    """A rich renderable shown with the control characters of its text escaped (table cells,
    titles); rich's own styling is added after, so colours still work."""

    def __init__(self, renderable) -> None:
        self.renderable = renderable

    def __rich_console__(self, console, options):
        from rich.segment import Segment

        for segment in console.render(self.renderable, options):
            if segment.control:
                yield segment
            else:  # rich's own line breaks (wrapped titles and cells) stay
                yield Segment(printable(segment.text, keep="\n"), segment.style)

    def __rich_measure__(self, console, options):
        from rich.measure import Measurement

        return Measurement.get(console, options, self.renderable)
