"""Canonical kernel names and op classes.

`canonical(name)` gives the join key across sources and ranks: demangled, no
`void `, no template arguments, no argument list, last namespace component.
`op_class(kernel)` maps a canonical name to gemm, attention, communication,
elementwise, reduction, memory or other; `add_pattern` lets users extend it.
`classified(df)` adds both columns to a parser's frame; `tracelab.load` calls it
once per profile in the caller's process, after the cache, so user patterns
apply to cached traces and to files parsed in worker processes alike.

CPU operators (rows of kind cpu_op, from a trace without GPU activity) are classed
like the kernels they stand for: the autograd wrapper and the `Backward0` suffix
are dropped and CamelCase spelt snake_case before the patterns are tried
(`evaluate_function: MmBackward0` -> `mm` -> gemm, `NllLossBackward0` -> `nll_loss`
-> reduction). Layout operators (views, reshapes, cat/stack, dtype copies) are memory.
"""
from __future__ import annotations

import itertools
import re
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

# (regex, op_class), first match wins. Communication comes first: an
# all-reduce kernel may well contain "reduce" or "copy" in its name.
# CPU operators that only move or re-describe memory (exact aten names, snake_case)
_CPU_LAYOUT = (r"^(view|_?unsafe_view|reshape|reshape_alias|_reshape_alias|select|slice|transpose|t|permute|expand"
               r"|flatten|unflatten|alias|squeeze|unsqueeze|narrow|chunk|split|split_with_sizes|unbind|as_strided"
               r"|cat|stack|to|_to_copy|type_as|clone|contiguous|copy|empty(_like|_strided)?|detach|index_select"
               r"|(un)?flatten_dense_tensors|item|_local_scalar_dense)$")

# Communication libraries whose kernels are named by what they do inside the library's namespace
# (DeepEP's `deep_ep::intranode::dispatch`, NVSHMEM's, MSCCL++'s, UCCL's, pplx-kernels'): their
# canonical names keep the library (`deep_ep::dispatch`), so a `dispatch` or `combine` kernel of a
# library of collectives is communication and never joins an unrelated kernel of that name.
COMM_LIBRARY = re.compile(r"deep_?ep|nvshmemi?|mscclpp|msccl|uccl|pplx", re.IGNORECASE)

_DEFAULT_PATTERNS: list[tuple[str, str]] = [
    (r"nccl|rccl|gloo", "communication"),
    (r"deep_?ep::|nvshmem|mscclpp|msccl|uccl::|pplx::", "communication"),
    (r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|sendrecv|broadcast", "communication"),
    (r"one_?shot|two_?shot|multimem|intra_node_comm|symm_?mem|cross_device|p2p|barrier_kernel", "communication"),
    (r"flash|fmha|attention|attn|sdpa|mha_", "attention"),
    (r"gemm|gemv|cublas|cutlass|xmma|wgmma|nvjet|matmul|(^|_)(b|add|baddb)?mm(_|$)|^linear$|splitk|dot_?kernel", "gemm"),
    (r"(^|_)conv(olution)?(\d?d)?(_|$)|^cudnn_convolution", "gemm"),
    (r"^memcpy|^memset|copy_kernel|copy_device|catarray|batchedcopy|d2d|h2d|d2h", "memory"),
    (_CPU_LAYOUT, "memory"),
    (r"reduce|reduction|softmax|norm|triton_red_|triton_per_|argmax|argmin|cumsum|scan|sum_kernel|mean"
     r"|(^|_)(nll|cross_entropy|mse|l1|smooth_l1|binary_cross_entropy)(_loss)?(_|$)|_loss$"
     r"|^(sum|prod|amax|amin|max|min|var|std|logsumexp|all|any)$", "reduction"),
    (r"^(r?sqrt|sub|rsub|div|exp|log|pow|neg|abs|clamp|sign|sin|cos|maximum|minimum|lerp|(ones|zeros|full)(_like)?)$",
     "elementwise"),
    (r"elementwise|vectorized|unrolled|triton_poi_|pointwise|fill|activation|gelu|silu|relu|sigmoid|tanh|add|mul|rope|rotary|embedding|index|gather|scatter|cat|copy|where|dropout", "elementwise"),
]

_user_patterns: list[tuple[str, str]] = []


def add_pattern(regex: str, op_class: str) -> None:
    """Classify kernels matching `regex` (case-insensitive) as `op_class`, before the defaults."""
    from tracelab.core.schema import OP_CLASSES

    if op_class not in OP_CLASSES:
        raise ValueError(f"op class {op_class!r} is not one of {OP_CLASSES}")
    re.compile(regex)
    _user_patterns.insert(0, (regex, op_class))
    _forget()


def user_patterns() -> list[tuple[str, str]]:
    """The (regex, op_class) pairs added with add_pattern, newest first: what another process
    (a spawned or Dask worker) needs to classify as this one does (use_patterns)."""
    return list(_user_patterns)


def use_patterns(patterns: list[tuple[str, str]]) -> None:
    """Make `patterns` (user_patterns() of another process) this process's own."""
    if patterns != _user_patterns:
        _user_patterns[:] = patterns
        _forget()


def reset_patterns() -> None:
    """Forget the patterns added with add_pattern."""
    _user_patterns.clear()
    _forget()


def _forget() -> None:
    _compiled.cache_clear()
    classify_one.cache_clear()
    classify_cpu_op.cache_clear()


@lru_cache(maxsize=1)
def _compiled() -> list[tuple[re.Pattern[str], str]]:
    return [(re.compile(rx, re.IGNORECASE), cls) for rx, cls in _user_patterns + _DEFAULT_PATTERNS]


# Inductor's generated Triton kernels are compute: their names list the fused graph's ops,
# which can include the functional collective beside them (`triton_per_fused__unsafe_view_
# all_reduce_mm_...` is a matrix product), so those op names are dropped before the defaults.
_INDUCTOR = re.compile(r"^triton_(poi|red|per|tem|for)_fused", re.IGNORECASE)
_COLLECTIVE_OPS = re.compile(r"_?(all_?reduce|all_?gather(_into_tensor)?|reduce_?scatter(_tensor)?|all_?to_?all"
                             r"|wait_tensor|broadcast)", re.IGNORECASE)


@lru_cache(maxsize=65536)
def classify_one(kernel: str) -> str:
    compiled, n_user = _compiled(), len(_user_patterns)
    for i, (rx, cls) in enumerate(compiled):
        if i == n_user and _INDUCTOR.match(kernel):
            kernel = _COLLECTIVE_OPS.sub("", kernel)
        if rx.search(kernel):
            return cls
    return "other"


def user_named(kernel: str) -> bool:
    """Whether one of the caller's own patterns (add_pattern) names this kernel: the caller's word
    is final, so no later rule (by_launch) moves it."""
    return any(rx.search(kernel) for rx, _ in _compiled()[:len(_user_patterns)])


def op_classes(kernels: pd.Series, kinds: pd.Series | None = None) -> pd.Categorical:
    """op_class per row; memcpy/memset rows are `memory` whatever their name; cpu_op rows
    are classed by classify_cpu_op. Each distinct kernel is classified once; the rows by codes."""
    from tracelab.core.schema import OP_CLASSES

    kernels = kernels.astype("category")
    class_code = {cls: i for i, cls in enumerate(OP_CLASSES)}
    of_category = np.array([class_code[classify_one(str(k))] for k in kernels.cat.categories] + [-1], dtype=np.int8)
    codes = of_category[kernels.cat.codes.to_numpy()]  # a missing kernel (code -1): the -1 at the end
    if kinds is not None:
        if (cpu := _is_kind(kinds, ("cpu_op",))).any():
            codes[cpu] = [class_code[classify_cpu_op(str(k))] for k in kernels[cpu]]
        codes[_is_kind(kinds, ("memcpy", "memset"))] = class_code["memory"]
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(list(OP_CLASSES)))


def _is_kind(kinds, which: tuple[str, ...]) -> np.ndarray:
    """Whether each row's kind is one of `which`: a categorical's by its codes (schema.is_kind),
    else row by row."""
    if isinstance(kinds, pd.Series) and isinstance(kinds.dtype, pd.CategoricalDtype):
        from tracelab.core.schema import is_kind

        return is_kind(kinds, which)
    return np.isin(np.asarray(kinds, dtype=object), which)


@lru_cache(maxsize=65536)
def classify_cpu_op(name: str) -> str:
    """A CPU operator's class: the user's patterns on its name as shown, then every pattern
    on its base operator (module docstring)."""
    for rx, cls in _compiled()[:len(_user_patterns)]:
        if rx.search(name):
            return cls
    return classify_one(cpu_base(name))


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def cpu_base(name: str) -> str:
    """`evaluate_function: LogSoftmaxBackward0` -> `log_softmax`; `div_` (in place) -> `div`."""
    base = name.rsplit(": ", 1)[-1].rsplit("::", 1)[-1].strip()
    base = re.sub(r"Backward\d*$|(?<=[a-z0-9])_$", "", base)
    return _CAMEL.sub("_", base).lower()


def classified(parsed: pd.DataFrame) -> pd.DataFrame:
    """A parser's frame (schema.PARSED) with `kernel` and `op_class` added, in schema order."""
    from tracelab.core.schema import COLUMNS, validate

    kernels = _canonical_column(as_category(parsed["name"]))
    added = {"kernel": kernels, "op_class": op_classes(kernels, parsed["kind"])}
    out = pd.DataFrame({c: added[c] if c in added else parsed[c] for c in COLUMNS}, index=parsed.index)  # one copy
    return validate(out)


def as_category(column: pd.Series) -> pd.Series:
    """column.astype("category"), the same categories (sorted) and codes, by a dict of the
    distinct strings: pandas' factorize hashes each row's text anew, a dict uses the string's
    cached hash (a parser shares one str object per name), ~4x faster on long kernel names.
    Anything but str and NA goes through astype."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column
    values = np.asarray(column.array, dtype=object).tolist()  # the values themselves (to_numpy looks for NA in each)
    distinct = [v for v in dict.fromkeys(values) if v is not pd.NA]
    if not values or not all(type(v) is str for v in distinct):
        return column.astype("category")
    code_of = {v: i for i, v in enumerate(sorted(distinct))}
    codes = np.fromiter(map(code_of.get, values, itertools.repeat(-1)), dtype=np.int64, count=len(values))
    categories = pd.Index(list(code_of), dtype=column.dtype)
    return pd.Series(pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(categories)), index=column.index,
                     name=column.name)


def _canonical_column(names: pd.Series) -> pd.Series:
    """canonical() of a categorical column, by its categories and codes; the categories as
    `names.map(dict).astype("category")` makes them (in the mapped order where no two names
    share a kernel, else sorted), so every later sort and group is as before."""
    mapped = [canonical(str(n)) for n in names.cat.categories]
    codes = names.cat.codes.to_numpy()
    if len(set(mapped)) == len(mapped):
        categories = pd.Index(mapped, dtype=names.cat.categories.dtype)
    else:
        categories = pd.Index(sorted(set(mapped)), dtype=names.cat.categories.dtype)
        codes = np.append(categories.get_indexer(mapped), -1)[codes]  # a missing name (-1) stays missing
    return pd.Series(pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(categories)), index=names.index,
                     name=names.name)


# ---- canonical names -------------------------------------------------------

_GENERIC = {"kernel", "kernel2", "device_kernel", "cutlass_kernel", "global_kernel"}


@lru_cache(maxsize=65536)
def canonical(name: str) -> str:
    """Short join key for a kernel name, mangled (`_ZN...`) or demangled; a communication
    library's kernel keeps the library's name before it (COMM_LIBRARY)."""
    short = _canonical(name.strip())
    library = COMM_LIBRARY.search(name)
    if library is None or COMM_LIBRARY.search(short):
        return short
    return f"{library.group(0).lower()}::{short}"


def _canonical(name: str) -> str:
    if name.startswith("_Z"):
        short = _demangle_short(name) or name
        if short.lower() in _GENERIC:  # cutlass::Kernel2<cutlass_80_..._gemm...>: the argument says more
            return _first_template_id(name, short) or short
        return short
    text = name.replace("(anonymous namespace)", "anonymous_namespace")
    text = re.sub(r"^(void|static|__global__)\s+", "", text)
    outer, first_arg = _strip_templates(text)
    outer = outer.split("(", 1)[0].strip()  # argument list
    short = outer.rsplit("::", 1)[-1].strip() or outer
    if short.lower() in _GENERIC and first_arg:
        return _canonical(first_arg)
    return short or name


def _strip_templates(text: str) -> tuple[str, str]:
    """Drop <...> at any depth; also return the first top-level template argument."""
    out, first, depth, current = [], "", 0, []
    for ch in text:
        if ch == "<":
            depth += 1
            if depth == 1:
                current = []
                continue
        elif ch == ">" and depth:
            depth -= 1
            if depth == 0:
                first = first or "".join(current).split(",")[0].strip()
                continue
        if depth == 0:
            out.append(ch)
        else:
            current.append(ch)
    return "".join(out), first


_ITANIUM_ID = re.compile(r"(\d+)")


def _first_template_id(mangled: str, short: str) -> str | None:
    """The name of the first template argument after `short` (`...7Kernel2I53cutlass_80_...`)."""
    marker = f"{len(short)}{short}I"
    at = mangled.find(marker)
    return _demangle_short("_Z" + mangled[at + len(marker):]) if at >= 0 else None


def _demangle_short(mangled: str) -> str | None:
    """The last identifier of an Itanium-mangled name: `_ZN4c10d...22oneShotAllReduceKernelI...` ->
    `oneShotAllReduceKernel`. Enough for a join key; not a full demangler."""
    pos = 2
    if mangled.startswith("_ZN", 0):
        pos = 3
        while pos < len(mangled) and mangled[pos] in "rVKL":  # cv-qualifiers
            pos += 1
    last = None
    while pos < len(mangled):
        if mangled.startswith("St", pos):
            pos += 2
            continue
        m = _ITANIUM_ID.match(mangled, pos)
        if not m:
            break
        length = int(m.group(1))
        start = m.end()
        ident = mangled[start:start + length]
        if len(ident) < length:
            return None
        last, pos = ident, start + length
        if mangled.startswith("I", pos) or mangled.startswith("E", pos) or not mangled[2] == "N":
            break
    return last


SHOWN_NAMES = 3  # kernel names a note names before "..."


# ---- communication by its launch ----------------------------------------------

# The CPU operators and ranges a communication library opens around the kernels it launches:
# PyTorch's c10d operators and record_param_comms (whose args name the collective), a backend's
# range (nccl:all_reduce, gloo:broadcast), NCCL's own NVTX ranges (ncclAllReduce, ncclGroupEnd)
# and a library of collectives' operators (COMM_LIBRARY: deep_ep::..., nvshmem...).
COMM_OP = re.compile(r"^(?:record_param_comms$|_?c10d(?:_functional)?::|(?:nccl|rccl|gloo|mpi|ucc|nvshmem):"
                     r"|[nr]ccl[A-Z])|(?i:" + COMM_LIBRARY.pattern + ")")
# Launches that place a kernel's blocks together (cooperative launch, cluster or attribute
# launch: cudaLaunchKernelExC, cuLaunchKernelEx): what NCCL and NVSHMEM launch their kernels by
COOPERATIVE_LAUNCH = re.compile(r"(?:cu|cuda|hip)(?:LaunchCooperativeKernel|LaunchKernelEx)")
COLLECTIVE_ARG = "Collective name"  # a kernel whose own args name its collective is one
ON_COMM_STREAM = "a cooperative launch on a stream of communication only"
LAUNCHED = "comm_launches"  # meta.extras: the kernels a parser found launched by a communication library


@lru_cache(maxsize=65536)
def comm_context(collective: str | None, op: str, ranges: str) -> str:
    """What says a kernel is communication where its launch happened ("" where nothing does): its
    own args' collective, else the operator that launched it, else the innermost range open at its
    launch (`ranges`, outermost first joined by "/"), where COMM_OP names it."""
    if collective:
        return f"{COLLECTIVE_ARG} {collective}"
    innermost = ranges.rsplit("/", 1)[-1]
    return op if COMM_OP.search(op) else innermost if COMM_OP.search(innermost) else ""


def comm_launches(kind: np.ndarray, name: list[str], context: list[str], api: list[str], where: dict[str, Any]
                  ) -> dict[str, list]:
    """The parser's record of kernels a communication library may have launched (meta.extras[LAUNCHED],
    read by by_launch): those with a communication context (comm_context) whose name does not
    already say communication, and those of class other launched cooperatively, each by where it ran
    (`where`: device, stream, start_ns arrays of every row, as the parser's frame has them)."""
    def kept(i: int) -> bool:  # by_launch's candidates: a cooperative launch alone moves only a kernel of class other
        named = classify_one(canonical(name[i]))
        return named != "communication" if context[i] else (named == "other" and bool(COOPERATIVE_LAUNCH.search(api[i])))

    cooperative = {a for a in set(api) if COOPERATIVE_LAUNCH.search(a)}  # each distinct call name tested once
    said = np.fromiter((bool(c) or a in cooperative for c, a in zip(context, api)), dtype=bool, count=len(api))
    rows = [i for i in np.flatnonzero((np.asarray(kind) == "kernel") & said).tolist() if kept(i)]
    return {"device": [int(where["device"][i]) for i in rows], "stream": [int(where["stream"][i]) for i in rows],
            "start_ns": [int(where["start_ns"][i]) for i in rows], "context": [context[i] for i in rows],
            "api": [api[i] for i in rows]}


def by_launch(events: pd.DataFrame, launched: dict[str, list] | None) -> tuple[pd.DataFrame, list]:
    """The events with the kernels a communication library launched classed communication, and a
    note (comm_by_launch) naming them: a kernel whose own args name a collective; one launched
    within a communication context (comm_context) that no pattern names or that was launched
    cooperatively (a copy or fill PyTorch launches around a collective keeps its class); a
    cooperatively launched kernel no pattern names on a stream whose other kernels are all
    communication. A kernel one of the caller's own patterns names keeps that class. `launched`: the
    parser's comm_launches record (None: no change)."""
    if not launched or not launched["start_ns"] or not len(events):
        return events, []
    if not any(launched["context"]) and not (events["op_class"] == "communication").any():
        return events, []  # cooperative launches alone, and no stream of collectives for them to join
    hit = _launched_rows(events, launched)
    op_class = events["op_class"].to_numpy()[hit["at"].to_numpy()].astype(str)
    cooperative = np.array([COOPERATIVE_LAUNCH.search(a) is not None for a in hit["api"].tolist()], dtype=bool)
    context = hit["context"].to_numpy(dtype=object)
    has_context = context != ""
    own_args = np.array([c.startswith(COLLECTIVE_ARG) for c in context.tolist()], dtype=bool)
    comm = own_args | (has_context & ((op_class == "other") | cooperative))
    lone = ~has_context & cooperative & (op_class == "other")
    if lone.any():
        lone &= _on_comm_streams(events, hit)
    take = comm | lone
    if _user_patterns and take.any():
        kernels = events["kernel"].to_numpy(dtype=object)[hit["at"].to_numpy()]
        take &= np.array([not user_named(str(k)) for k in kernels.tolist()], dtype=bool)
    if not take.any():
        return events, []
    at = hit["at"].to_numpy()[take]
    out = events.copy()
    out.iloc[at, out.columns.get_loc("op_class")] = "communication"
    return out, [_launch_note(events.iloc[at], np.where(lone, ON_COMM_STREAM, context)[take].tolist())]


def _launched_rows(events: pd.DataFrame, launched: dict[str, list]) -> pd.DataFrame:
    """The parser's record joined to the kernel rows that ran where it says (device, stream,
    start_ns): its columns and `at`, the row's position in `events`."""
    at = np.flatnonzero(_is_kind(events["kind"], ("kernel",)) & events["stream"].notna().to_numpy()
                        & events["start_ns"].notna().to_numpy())
    rows = pd.DataFrame({"device": events["device"].to_numpy(np.int64)[at],
                         "stream": events["stream"].to_numpy(np.int64, na_value=-1)[at],
                         "start_ns": events["start_ns"].to_numpy(np.int64, na_value=-1)[at], "at": at})
    record = pd.DataFrame(launched).astype({"device": "int64", "stream": "int64", "start_ns": "int64"})
    return rows.merge(record.drop_duplicates(["device", "stream", "start_ns"]), on=["device", "stream", "start_ns"])


def _on_comm_streams(events: pd.DataFrame, hit: pd.DataFrame) -> np.ndarray:
    """Per hit, whether its device and stream run kernels besides the hits and all are communication."""
    kernel = _is_kind(events["kind"], ("kernel",)) & events["stream"].notna().to_numpy()
    kernel[hit["at"].to_numpy()] = False  # the hits aside: what runs beside them decides
    rest = events[kernel]
    all_comm = (rest["op_class"] == "communication").groupby([rest["device"], rest["stream"]], observed=True).all()
    comm_streams = set(all_comm[all_comm].index.tolist())
    return np.array([(d, s) in comm_streams for d, s in zip(hit["device"].tolist(), hit["stream"].tolist())], bool)


def _launch_note(rows: pd.DataFrame, contexts: list[str]):
    """comm_by_launch: the kernels classed communication by their launch, most time first, and why."""
    from tracelab.core.note import Note

    time_ns = rows.groupby("kernel", observed=True)["dur_ns"].sum().sort_values(ascending=False, kind="stable")
    why = pd.Series(rows["dur_ns"].to_numpy(), index=contexts).groupby(level=0).sum().sort_values(
        ascending=False, kind="stable")
    return Note("comm_by_launch", {"kernels": len(time_ns), "names": [str(k) for k in time_ns.index[:SHOWN_NAMES]],
                                   "rows": int(rows["count"].sum()), "dur_ns": int(rows["dur_ns"].sum()),
                                   "contexts": [str(c) for c in why.index[:SHOWN_NAMES]]})


def comm_stream_strangers(events: pd.DataFrame) -> list:
    """Notes (core/note.py, code comm_stream_strangers) for kernels no pattern classes (op class
    other) that run on a stream whose every other kernel is communication, one per such stream:
    a library tracelab does not know (a custom all-to-all) runs its kernels on the stream of its
    collectives, so they may be communication. They are said, not reclassed: the name alone does
    not say what they do. A kernel a pattern names (a gemm, an elementwise) keeps its class silently."""
    from tracelab.core.note import Note
    from tracelab.core.schema import is_kind

    keep = is_kind(events["kind"], ("kernel",)) & events["stream"].notna().to_numpy()
    op_class = events["op_class"].array[keep]
    comm = np.asarray(op_class == "communication")
    if not comm.any():
        return []
    other = np.asarray(op_class == "other")
    device, stream = events["device"].to_numpy()[keep], events["stream"].array[keep].to_numpy(dtype=np.int64)
    streams, at = _pairs(device.astype(np.int64), stream)

    def some(mask: np.ndarray) -> np.ndarray:  # per stream: whether any of its kernels is in the mask
        return np.bincount(at[mask], minlength=len(streams)) > 0

    notes = []
    for s in np.flatnonzero(some(comm) & some(other) & ~some(~(comm | other))).tolist():
        rows = events[keep][other & (at == s)]
        time_ns = rows.groupby("kernel", observed=True)["dur_ns"].sum().sort_values(ascending=False, kind="stable")
        notes.append(Note("comm_stream_strangers", {
            "device": int(streams[s, 0]), "stream": int(streams[s, 1]), "kernels": len(time_ns),
            "names": [str(k) for k in time_ns.index[:SHOWN_NAMES]], "rows": int(rows["count"].sum()), "dur_ns": int(rows["dur_ns"].sum())}))
    return notes


def _pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (a, b) pairs in order ([pair, 2]) and each row's pair: np.unique(axis=0)'s
    answer by one lexsort (np.unique sorts the rows as records, ~40x slower)."""
    order = np.lexsort((b, a))
    a, b = a[order], b[order]
    first = np.r_[True, (a[1:] != a[:-1]) | (b[1:] != b[:-1])]
    at = np.empty(len(order), dtype=np.int64)
    at[order] = np.cumsum(first) - 1
    return np.c_[a[first], b[first]], at
