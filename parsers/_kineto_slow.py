"""The slow way of parsers/_kineto_json (for the events its tagged union refuses, and for
every event of a run it cannot read): every event's `cat` decoded, then the chosen events
again, into their collector's Struct; a bad event named exactly (its index in traceEvents,
category, name and the field at fault)."""
from __future__ import annotations

import re
from itertools import compress
from pathlib import Path
from typing import Any, Iterable

import msgspec

from tracelab.core.errors import TraceFormatError


class _Category(msgspec.Struct, gc=False):
    """The slow way decodes every event this far, to choose the ones decoded in full."""

    cat: str = ""
    name: Any = ""


_CATEGORY_DECODER = msgspec.json.Decoder(list[_Category])
# PyTorch 1.8/1.9 wrote its allocator events (`[memory]` instants) with no `cat`: they are the
# category later releases file them under, so the memory frame reads them alike
UNCATEGORISED = {"[memory]": "cpu_instant_event"}


def _cat(event: _Category) -> str:
    return event.cat or (UNCATEGORISED.get(event.name, "") if isinstance(event.name, str) else "")


def array(raws: Iterable[msgspec.Raw]) -> bytes:
    """Raw JSON values joined into one JSON array."""
    return b"[" + b",".join(raws) + b"]"


def slow(path: Path, part: list[msgspec.Raw], first: int, groups: list, picked: list, union: Any) -> None:
    """Every event's `cat` decoded, then the events of each group again, into its Struct;
    `union` (_kineto_union._Union) learns the categories seen."""
    cats: list[str] = []
    try:
        cats = list(map(_cat, _CATEGORY_DECODER.decode(array(part))))
        for (group, collector), out in zip(groups, picked):
            chosen = list(map(group.__contains__, cats))
            if any(chosen):
                texts = list(compress(part, chosen))
                events = msgspec.json.decode(array(texts), type=list[collector.STRUCT])
                out.extend(events, list(compress(cats, chosen)))
    except ValueError as e:  # msgspec's ValidationError, bad UTF-8, a value out of range
        raise _located(path, part, first, cats, groups) or TraceFormatError(
            path, f"unexpected event in traceEvents[{first}:{first + len(part)}]: {_plain(e)}") from None
    union.learn(cats)


def _located(path: Path, part: list[msgspec.Raw], first: int, cats: list[str],
             groups: list[tuple[set[str], type]]) -> TraceFormatError | None:
    """The first bad event of a run that failed, decoded one by one (the error path only):
    its index in traceEvents, category, name and the field at fault."""
    for i, (raw, cat) in enumerate(zip(part, cats)):
        for group, collector in groups:
            if cat in group:
                try:
                    collector().extend(msgspec.json.decode(array([raw]), type=list[collector.STRUCT]), [cat])
                except ValueError as e:
                    return TraceFormatError(path, f"unexpected event traceEvents[{first + i}] "
                                                  f"({cat}{_name_of(raw)}): {_plain(e)}")
    return None


def _name_of(raw: msgspec.Raw) -> str:
    try:
        return f" {msgspec.json.decode(raw, type=_Named).name[:60]!r}"
    except ValueError:
        return ""


class _Named(msgspec.Struct):
    name: str = ""


def _plain(e: ValueError) -> str:
    """The error in words, the field first: 'dur: Expected `float` <= ...', 'invalid UTF-8 (...)'."""
    if isinstance(e, UnicodeDecodeError):
        return f"invalid UTF-8 ({e.reason})"
    return re.sub(r"^(.*) - at `\$\[\d+\]\.(.*)`$", r"\2: \1", str(e))
