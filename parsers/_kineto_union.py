"""The in-place decode of a run of Kineto events and the tagged union it decodes into, for
parsers/_kineto_json.py: `Source` (a run of the file's bytes decoded as a JSON array without a
copy) and `_Union` (events into a Struct per chosen category, an empty Struct per other known
category, dealt to their groups' collectors)."""
from __future__ import annotations

import functools
from operator import itemgetter
from typing import Any, Iterable, Union

import msgspec
import numpy as np

from ._kineto_columns import _TS, _ts_array
from ._kineto_slow import array as _array

MAX_SKIPPED_CATEGORIES = 256  # categories learnt into the union; past this, the slow way

# categories Kineto writes that no collector takes: decoded as empty Structs from the start
KNOWN_CATEGORIES = ("cpu_op", "user_annotation", "gpu_user_annotation", "gpu_memcpy", "gpu_memset",
                    "kernel", "cuda_runtime", "cuda_driver", "cpu_instant_event", "python_function",
                    "overhead", "ac2g", "async_cpu_to_gpu", "fwdbwd", "Trace", "cuda_sync",
                    "cuda_profiler_range", "external_correlation", "xpu_runtime", "xpu_driver",
                    "privateuse1_runtime", "privateuse1_driver", "mtia_runtime", "mtia_ccp_events",
                    "hpu_op", "glow_runtime", "collective_comm", "Operator", "Runtime", "Kernel",
                    "Memcpy", "Memset", "Python", "gpu_mem_alloc", "cpu_mem_alloc")



def _address(buffer: Any) -> int:
    return np.frombuffer(buffer, dtype=np.uint8).ctypes.data


class Source:
    """The trace's bytes, from which a run of consecutive events of `traceEvents` decodes as
    one JSON array without a copy: the byte before the run (`[`, `,` or a space) and the
    one after it (`]`, `,` or a space) become `[` and `]` for the decode, then are put
    back. Where the raw values are not views of `data` (a bytes object, or a msgspec that
    copies), each run is joined into a new array instead."""

    def __init__(self, data: bytes | bytearray, raws: list[msgspec.Raw] | None = None):
        self.data = data if isinstance(data, bytearray) and (raws is None or raws) else None
        if self.data is not None:
            self.view, self.base = memoryview(self.data), _address(self.data)
            if raws is not None and self._span(raws) is None:
                self.data = None

    def _span(self, part: list[msgspec.Raw]) -> tuple[int, int] | None:
        """Where the run lies in data, with a byte free on either side; None if it does not."""
        first, last = part[0], part[-1]
        start, end = _address(first) - self.base, _address(last) - self.base + len(last)
        if not (0 < start < end < len(self.data)):
            return None
        if self.view[start:start + len(first)] != first or self.view[end - len(last):end] != last:
            return None
        return start, end

    def decode(self, decoder: msgspec.json.Decoder, part: list[msgspec.Raw]) -> list:
        span = None if self.data is None else self._span(part)
        if span is None:
            return decoder.decode(_array(part))
        return self.decode_run(decoder, *span)

    def decode_run(self, decoder: msgspec.json.Decoder, start: int, end: int) -> list:
        """data[start:end], a run of whole events with a byte free on either side, as a JSON array."""
        before, after = self.data[start - 1], self.data[end]
        self.data[start - 1], self.data[end] = 0x5B, 0x5D  # "[", "]"
        try:
            return decoder.decode(self.view[start - 1:end + 1])
        finally:
            self.data[start - 1], self.data[end] = before, after


class _Union:
    """A decoder of events into a tagged union on `cat`: each chosen category into its
    group's Struct, each other category seen into an empty Struct; unknown categories are
    learnt from the events it refuses (up to MAX_SKIPPED_CATEGORIES)."""

    def __init__(self, groups: list[tuple[set[str], type]]):
        self.chosen = tuple((tuple(sorted(cats)), collector.STRUCT) for cats, collector in groups)
        names = [cat for cats, _ in self.chosen for cat in cats]
        self.usable = len(names) == len(set(names))  # no category in two groups
        self.chosen_names = frozenset(names)
        self.skipped = frozenset(KNOWN_CATEGORIES) - self.chosen_names
        self.decoder, self.code_of, self.group_by_code, self.cat_by_code = _union_decoder(self.chosen, self.skipped)

    def learn(self, cats: Iterable[str]) -> None:
        """Skip these categories from now on, unless chosen or too many are learnt."""
        new = set(cats) - self.skipped - self.chosen_names
        if new and len(self.skipped) + len(new) <= MAX_SKIPPED_CATEGORIES:
            self.skipped |= new
            self.decoder, self.code_of, self.group_by_code, self.cat_by_code = _union_decoder(self.chosen, self.skipped)

    def deal(self, events: list, picked: list) -> None:
        """Hand the decoded events to their groups' collectors, the `ts` of all read at once."""
        code = np.fromiter(map(self.code_of.__getitem__, map(type, events)), dtype=np.int16, count=len(events))
        group = self.group_by_code[code]
        ends = np.cumsum(np.bincount(group + 1, minlength=len(picked) + 1))  # skipped (-1) first, then group by group
        if ends[0] == len(events):
            return
        at = np.argsort(group, kind="stable")[ends[0]:]  # the chosen events' places, by group, each in trace order
        chosen = _taken(events, at)
        ts = _ts_array(list(map(_TS, chosen)))
        ends = (ends - ends[0]).tolist()
        for g, out in enumerate(picked):
            first, end = ends[g], ends[g + 1]
            if first == end:
                continue
            codes = code[at[first:end]]
            cats = ([self.cat_by_code[codes[0]]] * len(codes) if (codes == codes[0]).all()  # one category: the usual
                    else self.cat_by_code[codes].tolist())
            out.extend(chosen[first:end], cats, ts[first:end])


def _taken(items: list, at: np.ndarray) -> list:
    """The items at these indices (at least one)."""
    return [items[int(at[0])]] if len(at) == 1 else list(itemgetter(*at.tolist())(items))


@functools.lru_cache(maxsize=64)
def _union_decoder(chosen: tuple[tuple[tuple[str, ...], type], ...], skipped: frozenset[str]
                   ) -> tuple[msgspec.json.Decoder, dict[type, int], np.ndarray, np.ndarray]:
    """The decoder of a list of the union; per Struct type its code; per code its group (-1:
    skipped) and category; made once per process for each choice (a trace rarely teaches a
    category)."""
    types: dict[type, tuple[int, str]] = {}
    for g, (cats, struct) in enumerate(chosen):
        for cat in cats:
            types[msgspec.defstruct(f"_{struct.__name__}_{g}", [], bases=(struct,), tag_field="cat", tag=cat,
                                    gc=False)] = (g, cat)
    for cat in sorted(skipped):
        types[msgspec.defstruct("_Skipped", [], tag_field="cat", tag=cat, gc=False)] = (-1, cat)
    decoder = msgspec.json.Decoder(list[Union[tuple(types)]])  # type: ignore[misc]
    groups, cats = zip(*types.values())
    return (decoder, {t: code for code, t in enumerate(types)}, np.array(groups, dtype=np.int16),
            np.array(cats, dtype=object))
