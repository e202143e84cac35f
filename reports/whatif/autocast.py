"""`autocast:bf16=F` and `autocast:bf16=@FILE` (scenarios.py's docstring says what they model):
the matrix products scaled, each issued after the casts autocast adds, and with a factors file
(bf16_factors.py) each product by its own change and autocast's dispatch per recorded CPU operator.
Pure."""
from __future__ import annotations

import re

import numpy as np

from tracelab.core.note import Note
from tracelab.core.regexes import matches

from . import bf16_factors
from .join import Graph
from .kinds import COLL, HOST_OP, LAUNCH, SYNC
from .picks import changed_durations_ns, matching, median_ns, regex, work
from .replay import Params

# the matrix products autocast runs in bf16: aten's (and their backward's) names, GPU GEMM kernels but
# attention's fused ones
PRODUCTS = (r"^(?!.*(fmha|flash|[Aa]ttention))(.*(gemm|GEMM|nvjet|xmma|cutlass)|aten::(linear|matmul|mm|addmm|bmm)$"
            r"|.*(Mm|Addmm|Bmm)Backward0)")
BACKWARD = r"[Bb]ackward"  # a product of the backward pass (its name or scope)
CASTS_PER_PRODUCT = 2  # autocast casts each fp32 input of a product: an activation and a weight


def apply(g: Graph, p: Params, products: re.Pattern, factor: float | bf16_factors.Factors) -> None:
    """autocast:bf16=F or =@FILE (module docstring): the products scaled, each issued after its
    casts; with a factors file, each product by its own factor and every CPU operator's host time
    grown by autocast's dispatch where the file measured it."""
    hit = matching(g, products, None)
    if not hit.any():
        return
    casts = cast_counts(g, hit)
    host_ns, device_ns = _issue_ns(g, p), median_ns(p.dur_ns[work(g) & ~hit & (g.kind != COLL)])
    scaled, added, _ = _product_factors(g, hit, factor)
    p.dur_ns[hit] = changed_durations_ns(np.maximum(p.dur_ns[hit] * scaled + added, 0))
    issuer = np.where(g.cpu_only, np.arange(len(g)), g.launch)[hit]  # where the casts' host time goes
    per = casts[hit]
    np.add.at(p.gap_ns, issuer[issuer >= 0], np.rint(per[issuer >= 0] * host_ns).astype(np.int64))
    if not g.cpu_only:  # a CPU operator's own time is the host's: counted once, above
        p.dur_ns[hit] += changed_durations_ns(per * device_ns)
    if isinstance(factor, bf16_factors.Factors) and factor.dispatch_ns_per_op is not None:
        host = np.isin(g.kind, (LAUNCH, SYNC, HOST_OP))
        p.gap_ns[host] += changed_durations_ns(cpu_ops_per_node(g)[host] * factor.dispatch_ns_per_op)


def _product_factors(g: Graph, hit: np.ndarray, factor: float | bf16_factors.Factors
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per product of `hit` (in order), its factor, the ns added to it, and whether a factors file listed it."""
    n = int(hit.sum())
    if not isinstance(factor, bf16_factors.Factors):
        return np.full(n, factor), np.zeros(n), np.zeros(n, bool)
    idx = np.flatnonzero(hit)
    return factor.of(g.rank[idx], g.name[idx], bf16_factors.step_index(g.rank[idx], g.step[idx], g.name[idx],
                                                                       g.start_ns[idx]))


def cpu_ops_per_node(g: Graph) -> np.ndarray:
    """Per node, the CPU operators the profiler recorded in it and in the gap before it (0 where the
    rank's counts are not known): the operators autocast dispatches."""
    out = []
    for r in sorted(g.ranks):  # the ranks in order, as join.py lays them out
        rg = g.ranks[r]
        before, inside = getattr(rg, "profiled_before", None), getattr(rg, "profiled_inside", None)
        out.append(np.zeros(len(rg)) if before is None or inside is None else before[:, 0] + inside[:, 0])
    return np.concatenate(out) if out else np.zeros(0)


def notes(g: Graph, products: re.Pattern, factor: float | bf16_factors.Factors) -> list[Note]:
    """The model's note, and with a factors file where its factors and dispatch cost come from."""
    files = isinstance(factor, bf16_factors.Factors)
    dispatch = files and factor.dispatch_ns_per_op is not None
    notes = [Note("autocast_model", {"casts": CASTS_PER_PRODUCT, "per_shape": files, "dispatch": dispatch})]
    if files:
        hit = matching(g, products, None)
        listed = _product_factors(g, hit, factor)[2]
        notes.append(Note("autocast_factors", {
            "file": factor.path, "device": factor.device, "machine": factor.machine, "measured_at": factor.measured_at,
            "products": int(hit.sum()), "listed": int(listed.sum()), "default": factor.default,
            "dispatch_ns_per_op": factor.dispatch_ns_per_op, "dispatch_machine": factor.dispatch_machine}))
    return notes


def cast_counts(g: Graph, hit: np.ndarray) -> np.ndarray:
    """Per node, the casts autocast adds for it (0 but for products `hit`): CASTS_PER_PRODUCT per
    forward product, twice that where the trace has backward products (each cast's gradient cast
    back), spread evenly over all products (the trace does not tie a backward product to its
    forward one)."""
    back = hit & (matches(regex(BACKWARD), g.name, "--scenario") | matches(regex(BACKWARD), g.scope, "--scenario"))
    total = CASTS_PER_PRODUCT * int((hit & ~back).sum()) * (2 if back.any() else 1)
    return np.where(hit, total / max(int(hit.sum()), 1), 0.0)


def _issue_ns(g: Graph, p: Params) -> float:
    """The median host time per issued op (its gap and its own time): launch calls, or CPU operators
    in a CPU-only trace."""
    issued = (g.kind == HOST_OP) if g.cpu_only else (g.kind == LAUNCH)
    return median_ns(np.maximum(p.gap_ns[issued], 0) + p.dur_ns[issued])
