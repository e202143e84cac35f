"""`compile` and `compile:reduce-overhead` (scenarios.py's docstring says what they model): the
trace's eager ops as torch.compile's Inductor would run them. Pure.

Inductor calls *extern* kernels as they are: matrix products (op class gemm, cuBLAS's split-K
reductions with them), fused attention, collectives and copies, ops it did not write itself
(class other) and kernels it already generated (a compiled trace's own). It writes the rest of
the compiled region (pointwise ops, reductions, norms, softmax, casts, layout copies: classes
elementwise, reduction, memory) as fused kernels: every run of such ops one after another on
one stream (one thread in a CPU-only trace) between two extern ops, within one step and one
pass (forward or backward: AOTAutograd compiles them as two graphs), is one *group*. A group's
ops become one kernel per reduction (the pointwise ops before a reduction its prologue, those
after it its epilogue; at least one kernel): a *segment* each.

Device time of a segment: its largest member's. A fused kernel reads the segment's inputs once
and writes its outputs once, intermediates kept in registers; its largest member alone reads and
writes at least one full tensor, so no fused kernel is faster (a lower bound, reached where the
members work on tensors of one size), and none slower than its members one after another (the
eager sum: the note gives both). The trace's kernels carry no byte counts to place it between.
Host cost: each segment keeps its first member's launch call and the host time before it (one
launch per fused kernel at this trace's own cost); the other members' launch calls and the
host's time before them (their Python and aten dispatch) are gone, and the device runs them as
part of the segment (no queue gap between them). In a CPU-only trace, the same on the CPU
operators (Inductor's C++ kernels): a segment one operator of its largest member's time.

Outside the compiled region (the model alone is compiled): the optimizer's step, zero_grad and
the autograd engine's gradient accumulation (AccumulateGrad runs eagerly after the compiled
backward) stay as they are, and so does the loss: the model's output is its last extern op's (a
language model's head), so a forward pass's run after its last extern op and a backward pass's
run before its first are the loss and its gradient, eager. Not modelled (said in the note):
autotuning, recompiles, graph breaks, Inductor's own matmul templates, layout changes, and the
Python of module calls around extern ops.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracelab.core.note import Note
from tracelab.core.regexes import matches

from .autocast import BACKWARD
from .join import Graph
from .kinds import LAUNCH
from .picks import regex
from .replay import Params

FUSIBLE_CLASSES = ("elementwise", "reduction", "memory")
# ops that run eagerly even when the model is compiled: the optimizer, zero_grad, gradient accumulation
OUTSIDE = r"[Oo]ptimizer|zero_grad|AccumulateGrad"
# kernels and ranges Inductor already generated: a compiled trace's own fused work, kept as it is
GENERATED = r"^(triton_|cpp_fused|CompiledFunction|Torch-Compiled Region|## Call CompiledFxGraph)"


def fusible(g: Graph) -> np.ndarray:
    """Per node, whether Inductor would fuse it (module docstring): a GPU op (a CPU operator in a
    CPU-only trace) of a fusible class, no copy, inside the compiled region, not generated already."""
    node = g.work() & np.isin(g.op_class, FUSIBLE_CLASSES) & ~g.copy & ~_outside(g)
    return node & ~matches(regex(GENERATED), g.name, "--scenario")


def _outside(g: Graph) -> np.ndarray:
    """Per node, whether it runs outside the compiled model (OUTSIDE, by name or scope)."""
    outside = regex(OUTSIDE)
    return matches(outside, g.name, "--scenario") | matches(outside, g.scope, "--scenario")


def segments(g: Graph) -> pd.DataFrame:
    """One row per node Inductor fuses (by chain, then start): `node`, its `group` and its `segment`
    (global ids; module docstring), `reduction` (bool). The loss's groups are left out."""
    order = g.chain_order()
    f = fusible(g)[order]
    back = (matches(regex(BACKWARD), g.scope, "--scenario") | matches(regex(BACKWARD), g.name, "--scenario"))[order]
    chain, step = g.chain[order], g.step[order]
    joined = np.r_[False, f[:-1] & (chain[1:] == chain[:-1]) & (step[1:] == step[:-1]) & (back[1:] == back[:-1])]
    group = np.cumsum(f & ~joined) - 1
    frame = pd.DataFrame({"node": order[f], "group": group[f], "reduction": g.op_class[order][f] == "reduction"})
    frame = frame[~frame["group"].isin(_loss_groups(g, order, f, group, back))].reset_index(drop=True)
    # a new segment at each reduction but the group's first: cut before the 2nd, 3rd, ...
    nth = frame.groupby("group")["reduction"].cumsum().to_numpy()
    frame["segment"] = np.cumsum(np.r_[True, (frame["group"].to_numpy()[1:] != frame["group"].to_numpy()[:-1])
                                       | (frame["reduction"].to_numpy()[1:] & (nth[1:] > 1))]) - 1 if len(frame) else []
    return frame


def _loss_groups(g: Graph, order: np.ndarray, f: np.ndarray, group: np.ndarray, back: np.ndarray) -> np.ndarray:
    """The groups of the loss, computed outside the compiled model: a forward pass's run after its
    last extern op and a backward pass's run before its first (per chain and step); none where a
    pass has no extern op."""
    extern = (g.work() & ~_outside(g))[order] & ~f  # the compiled model's own extern ops (the optimizer's are not)
    pos = pd.DataFrame({"pos": np.arange(len(order)), "chain": g.chain[order], "step": g.step[order], "back": back,
                        "extern": extern, "group": np.where(f, group, -1)})
    key = ["chain", "step", "back"]
    ext = pos[pos["extern"]].groupby(key)["pos"].agg(["min", "max"])
    runs = pos[pos["group"] >= 0].groupby("group").agg(first=("pos", "min"), last=("pos", "max"), chain=("chain", "first"),
                                                       step=("step", "first"), back=("back", "first"))
    runs = runs.join(ext, on=key)
    loss = np.where(runs["back"], runs["last"] < runs["min"], runs["first"] > runs["max"])  # NaN: no extern, False
    return runs.index.to_numpy()[loss]


def apply(g: Graph, p: Params) -> None:
    """compile (module docstring): each segment one op of its largest member's time, issued by its
    first member's launch; the other members' launches and the host time before them gone."""
    seg = segments(g)
    if not len(seg):
        return
    node = seg["node"].to_numpy()
    first = ~seg["segment"].duplicated().to_numpy()
    largest = seg.assign(d=p.dur_ns[node]).groupby("segment")["d"].transform("max").to_numpy()
    p.dur_ns[node[first]] = largest[first]
    gone = node[~first]
    p.dur_ns[gone] = 0
    p.gap_ns[gone] = 0
    p.xs_src[gone] = -1  # run inside the segment's kernel: no launch of their own
    if not g.cpu_only:
        calls = _launches_of_only(g, gone)
        p.dur_ns[calls] = 0
        p.gap_ns[calls] = 0


def _launches_of_only(g: Graph, gone: np.ndarray) -> np.ndarray:
    """The launch calls every op of which is in `gone`."""
    launched = np.flatnonzero(g.launch >= 0)
    out = np.zeros(len(g), bool)
    out[gone] = True
    every = pd.Series(out[launched]).groupby(g.launch[launched]).all()
    calls = every[every].index.to_numpy(dtype=np.int64)
    return calls[g.kind[calls] == LAUNCH]


def note(g: Graph, reduce_overhead: bool) -> Note:
    """What the model did to this graph (groups, segments, fused ops, their device time in eager and
    as modelled) and what it leaves out."""
    seg = segments(g)
    dur = g.end_ns - g.start_ns
    node = seg["node"].to_numpy()
    modelled = seg.assign(d=dur[node]).groupby("segment")["d"].max()
    return Note("compile_model", {
        "groups": int(seg["group"].nunique()), "kernels": int(len(modelled)), "fused_ops": int(len(seg)),
        "eager_ns": int(dur[node].sum()), "modelled_ns": int(modelled.sum()), "cpu_only": bool(g.cpu_only),
        "reduce_overhead": reduce_overhead})
