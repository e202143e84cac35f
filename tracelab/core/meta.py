"""What a trace says about itself beside its events (tracelab.core.schema.Meta), typed and checked
where it enters: every parser's dict, a dataset part's metadata and a cache entry pass
`Meta.of`, so a reader writes `meta.rank`, never `meta.get("rank")`, and a wrong type is a
TraceFormatError naming the file and the key, not a surprise three modules later."""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from tracelab.core.errors import TraceFormatError
from tracelab.core.note import Note

_TEXT, _WHOLE, _MAP, _LIST = "text", "a whole number", "an object", "a list"


@dataclass
class Meta:
    """Per-file facts. The typed keys are those every source has or a report reads; what one
    format alone keeps (nsys's session clock, proton's metric names) is in `extras`."""

    path: str = ""  # the file (or URL) it was read from
    source: str = ""  # schema.SOURCES
    rank: int | None = None  # the file's own, then as tracelab.load resolved it
    rank_from: str | None = None  # where the rank came from ("file", "file name", "caller", ...)
    world_size: int | None = None
    devices: dict[int, dict[str, Any]] = field(default_factory=dict)  # device index -> type, name, arch, num_sms...
    trace_start_epoch_ns: int | None = None  # start_ns 0 on the Unix epoch clock, where the trace says
    trace_start_ns: int | None = None  # start_ns 0 on the profiler's own clock (nsys)
    start_origin: str | None = None  # what start_ns 0 is, in words
    profiler_version: str | None = None
    versions: dict[str, Any] = field(default_factory=dict)  # cupti, cuda_runtime, cuda_driver, nccl
    distributed_backend: str | None = None  # nccl, gloo
    pid: int | None = None  # the traced process (nsys: one file, several processes)
    process_name: str | None = None
    notes: list[Note] = field(default_factory=list)  # what the reader could not take at face value (core/note.py)
    steps: int | None = None  # steps covered, given for ranks without step instances (proton)
    scope_metrics: dict[str, dict[str, Any]] | None = None  # proton: scope -> its own flops/bytes
    odd_gemms: list[dict[str, Any]] = field(default_factory=list)  # GEMMs of an odd N or K (torch)
    graph_capture_calls: int = 0  # launch calls inside CUDA-graph captures (torch)
    provenance: str | None = None  # the Inductor provenance file applied to the kernels
    extras: dict[str, Any] = field(default_factory=dict)  # format-specific keys
    # the keys given (typed and extras) and set since, in order: to_dict writes those alone, as
    # the parser's dict had them (a dataset part's metadata and the caches' entries stay as they were)
    _keys: list[str] = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._keys[:] = [name for name, default in _DEFAULTS.items() if getattr(self, name) != default]

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        keys = self.__dict__.get("_keys")
        if keys is not None and name in _KINDS and name not in keys:
            keys.append(name)

    @classmethod
    def of(cls, doc: Meta | dict[str, Any], where: Any = None) -> Meta:
        """`doc` (a parser's dict, a JSON object read back) as a Meta: its typed keys checked,
        the others kept in extras; TraceFormatError naming `where` (default: its path) and the
        key whose value is of the wrong type."""
        if isinstance(doc, Meta):
            return doc
        if not isinstance(doc, dict):
            raise TraceFormatError(where, f"its meta is {type(doc).__name__}, not an object")
        where = doc.get("path") if where is None else where
        typed = {k: _checked(where, k, v) for k, v in doc.items() if k in _KINDS}
        meta = cls(**typed, extras={k: v for k, v in doc.items() if k not in _KINDS})
        meta._keys[:] = list(doc)
        return meta

    def to_dict(self) -> dict[str, Any]:
        """The keys given and set since, in order, then the extras: the plain object (JSON) the
        caches and a dataset part keep, which `Meta.of` reads back equal."""
        given = {k: getattr(self, k) if k in _KINDS else self.extras[k]
                 for k in self._keys if k in _KINDS or k in self.extras}
        if "notes" in given:
            given["notes"] = [n.as_json() for n in self.notes]
        return {**given, **self.extras}

    def but(self, **changes: Any) -> Meta:
        """A copy with `changes` set (typed keys only), keeping the order of the keys."""
        copy = Meta.of(self.to_dict(), self.path)
        for name, value in changes.items():
            if name not in _KINDS:
                raise TypeError(f"Meta has no typed key {name!r}")
            setattr(copy, name, _checked(self.path, name, value))
        return copy


# typed key -> (what its value must be, whether null is allowed)
_KINDS: dict[str, tuple[str, bool]] = {
    "path": (_TEXT, False), "source": (_TEXT, False), "rank": (_WHOLE, True), "rank_from": (_TEXT, True),
    "world_size": (_WHOLE, True), "devices": (_MAP, False), "trace_start_epoch_ns": (_WHOLE, True),
    "trace_start_ns": (_WHOLE, True), "start_origin": (_TEXT, True), "profiler_version": (_TEXT, True),
    "versions": (_MAP, False), "distributed_backend": (_TEXT, True), "pid": (_WHOLE, True),
    "process_name": (_TEXT, True), "notes": (_LIST, False), "steps": (_WHOLE, True),
    "scope_metrics": (_MAP, True), "odd_gemms": (_LIST, False), "graph_capture_calls": (_WHOLE, False),
    "provenance": (_TEXT, True),
}
_DEFAULTS = {f.name: f.default_factory() if f.default_factory is not MISSING else f.default
             for f in fields(Meta) if f.name in _KINDS}
_TYPES = {_TEXT: str, _WHOLE: int, _MAP: dict, _LIST: list}


def _checked(where: Any, key: str, value: Any) -> Any:
    """`value` of the typed `key` where it is of its type (devices' index keys made whole
    numbers again after JSON made them text); TraceFormatError otherwise."""
    wanted, nullable = _KINDS[key]
    if value is None and nullable:
        return value
    if type(value) is not _TYPES[wanted]:  # type, not isinstance: a bool is no whole number
        shown = repr(value)
        shown = shown[:80] + "..." if len(shown) > 80 else shown
        raise TraceFormatError(where, f"its meta's {key} is {shown}, not {wanted}" + (" or null" if nullable else ""))
    if key == "notes":
        try:
            return [Note.of(note) for note in value]
        except ValueError as e:
            raise TraceFormatError(where, f"its meta's notes are not all notes ({e})") from None
    if key == "devices":
        return {_index(where, k): v for k, v in value.items()}
    return value


def _index(where: Any, key: Any) -> int:
    """A device index: an int, or its decimal text (JSON's object keys are text)."""
    if type(key) is int:
        return key
    if isinstance(key, str) and key.lstrip("-").isdigit():
        return int(key)
    raise TraceFormatError(where, f"its meta's devices has the key {key!r}, not a device index")
