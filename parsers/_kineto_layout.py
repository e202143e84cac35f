"""Where the events of a Kineto trace lie in its bytes (parsers/_kineto_json reads them run by
run): runs of whole events of `traceEvents`, cut where one object ends and the next begins
(`}`, a comma, `{`, with any JSON whitespace between: Kineto's `\n  },\n  {`, json.dumps' `}, {`
and `},{`, one event per line, CRLF). That also matches inside an event (a list of objects in
its args, a name): the reader's decode of each run refuses a wrong cut, so a cut is a guess
that is always checked."""
from __future__ import annotations

import re

_EVENTS_KEY = re.compile(rb'"traceEvents"[ \t\n\r]*:[ \t\n\r]*\[')  # JSON's whitespace only
_BETWEEN = re.compile(rb"\}[ \t\n\r]*,[ \t\n\r]*\{")  # one object's end, the comma, the next one's start


def cut(data: bytes | bytearray, run_bytes: int) -> tuple[list[tuple[int, int]], bytes, bytes] | None:
    """Runs of whole events cut from the bytes, run_bytes or more each (a run ends at the comma
    after the first object end found past run_bytes), with the text before traceEvents' key and
    the text from after the last run to the end; None where the bytes cannot be cut so (not a
    bytearray, no `"traceEvents": [` after a `{` or `,`, or too few events for one run)."""
    if not isinstance(data, bytearray) or (key := data.find(b'"traceEvents"')) < 0:
        return None
    found = _EVENTS_KEY.match(data, key)
    head = bytes(data[:key])
    if found is None or not head.rstrip(b" \t\n\r").endswith((b"{", b",")):  # a key, not text in a string
        return None
    runs, start = [], found.end()
    while (between := _BETWEEN.search(data, start + run_bytes)) is not None:
        comma = between.start() + between.group().index(b",")
        runs.append((start, comma))
        start = comma + 1
    return (runs, head, bytes(data[start:])) if runs else None
