"""GEMMs with a dimension that is no multiple of 16 bytes, from the shapes of the operator that
launched them (Kineto with record_shapes=True): cuBLAS then picks kernels that load one or two
elements at a time (align1/align2) or pads internally, and tensor cores idle part of the time.
Used by parsers/chrome.py, which keeps the result in meta.odd_gemms for reports/fixes/gemm.py.

    mm [M,K]x[K,N], addmm(bias, A, B), _scaled_mm   M, N, K
    bmm [B,M,K]x[B,K,N], baddbmm(bias, A, B)        M, N, K (the batch B is free)

A dimension is odd when it is no multiple of 16 bytes' worth of the operator's elements (8 for
bf16/fp16, 4 for fp32, 16 for fp8; 8 when the trace gives no type). Only K and N count: they
are the leading dimensions of the row-major operands and the output, whose alignment cuBLAS
needs; an odd M (the tokens of a batch) loads as well as an even one.
"""
from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from ._shapes import Inputs, _decoded

_GEMM = re.compile(r"aten::(mm|addmm|_scaled_mm|bmm|baddbmm)")
_ELEMENTS_PER_16_BYTES = {1: 16, 2: 8, 4: 4, 8: 2}
MAX_SHAPES = 20  # odd shapes kept per trace, the most GPU time first


def _mnk(name: str, x: Inputs) -> tuple[int, int, int] | None:
    op = name.removeprefix("aten::")
    first = 1 if op in ("addmm", "baddbmm") else 0
    a, b = x.tensor(first), x.tensor(first + 1)
    if a is None or b is None or len(a) != len(b) or len(a) not in (2, 3):
        return None
    return a[-2], b[-1], a[-1]


def _odd(name: str, dims_raw: Any, types_raw: Any) -> dict | None:
    """The operator's M, N, K, dtype and which of N, K are odd (module docstring); None when
    it is no GEMM of known shapes or none is odd."""
    if not _GEMM.fullmatch(name):
        return None
    x = Inputs(_decoded(dims_raw), None if types_raw is None else _decoded(types_raw), [])
    mnk = _mnk(name, x)
    if mnk is None:
        return None
    elem = x.elem(1 if name in ("aten::addmm", "aten::baddbmm") else 0)
    multiple = _ELEMENTS_PER_16_BYTES.get(int(elem), 8) if not math.isnan(elem) else 8
    m, n, k = mnk
    odd = [d for d, v in (("N", n), ("K", k)) if v % multiple]
    return {"op": name, "m": m, "n": n, "k": k, "dtype": x.dtype(), "multiple": multiple, "odd": odd} if odd else None


def odd_gemms(names: list[str], dur_ns: np.ndarray, op_of_row: np.ndarray, ops: Any) -> list[dict]:
    """The GEMM shapes with an odd N or K and the GPU time of the kernels they launched (`op_of_row`:
    _shapes.op_rows): one record per (op, M, N, K, dtype) with dur_ns, calls (rows) and up to 3
    kernel names, the most time first."""
    odd_of_op = {}
    for i in np.unique(op_of_row[op_of_row >= 0]).tolist():
        if _GEMM.fullmatch(ops.name[i]) and (odd := _odd(ops.name[i], (inputs := ops.inputs(i)).dims, inputs.types)):
            odd_of_op[i] = odd
    found: dict[tuple, dict] = {}
    for r in np.flatnonzero(np.isin(op_of_row, list(odd_of_op))).tolist():
        odd = odd_of_op[int(op_of_row[r])]
        key = (odd["op"], odd["m"], odd["n"], odd["k"], odd["dtype"])
        entry = found.setdefault(key, {**odd, "dur_ns": 0, "calls": 0, "kernels": []})
        entry["dur_ns"] += int(dur_ns[r])
        entry["calls"] += 1
        if names[r] not in entry["kernels"] and len(entry["kernels"]) < 3:
            entry["kernels"].append(names[r])
    return sorted(found.values(), key=lambda e: -e["dur_ns"])[:MAX_SHAPES]
