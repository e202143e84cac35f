"""The work of a GPU row from the shapes of the CPU operator that launched it (Kineto with
record_shapes=True): FLOPs and bytes, and the compute dtype. Used by parsers/chrome.py.

A kernel's `External id` is the one of the innermost operator around its launch (aten::addmm
under aten::linear, aten::_flash_attention_forward under aten::scaled_dot_product_attention),
so the formulas are for those operators, with the layouts they take:

    mm [M,K]x[K,N], addmm(bias, A, B), _scaled_mm   2*M*N*K FLOPs; bytes: A + B (+ bias) + C [M,N]
    bmm [B,M,K]x[B,K,N], baddbmm(bias, A, B)        2*B*M*N*K
    mv [M,K]x[K], addmv(_)(bias, A, x), dot         2*M*K
    attention forward, q [..,L,E] k [..,S,E] v [..,S,Ev]   4*B*H*L*S*E (QK^T and PV), half when causal
    attention backward                               2.5x the forward (FlashAttention's 5 matmuls to 2)
    cudnn_convolution / convolution                  2*N*O*prod(out spatial)*(C/groups)*prod(kernel)
    elementwise and reductions                       bytes only: tensor inputs read + the output written

Where no formula applies, the `flops` arg torch.profiler(with_flops=True) wrote on the operator
is taken, and for an Inductor Triton kernel the `kernel_num_gb` and `kernel_flop` its launch
range carries when compiled with torch._inductor.config.benchmark_kernel. An operator that
launches several kernels has its work spread over them in proportion to their time; memcpy and memset rows keep their own `bytes` from the trace. Anything else is
unknown (NaN), never zero.
"""
from __future__ import annotations

import math
import re
from typing import Any

import msgspec
import numpy as np

from ._steps import name_mask as _name_mask

# c10 type names as Kineto writes "Input type" -> (dtype, bytes per element)
TYPES = {"c10::BFloat16": ("bf16", 2), "c10::Half": ("fp16", 2), "float": ("fp32", 4), "double": ("fp64", 8),
         "c10::Float8_e4m3fn": ("fp8", 1), "c10::Float8_e5m2": ("fp8", 1), "c10::Float8_e4m3fnuz": ("fp8", 1),
         "c10::Float8_e5m2fnuz": ("fp8", 1), "signed char": ("int8", 1), "unsigned char": ("uint8", 1),
         "bool": ("bool", 1), "short int": ("int16", 2), "int": ("int32", 4), "long int": ("int64", 8), "long": ("int64", 8),
         "c10::complex<float>": ("complex64", 8), "c10::complex<double>": ("complex128", 16)}
_GEMM = re.compile(r"aten::(mm|addmm|_scaled_mm|bmm|baddbmm|mv|addmv_?|dot)")
_ATTN_FWD_BHLE = re.compile(r"aten::(scaled_dot_product_attention|_scaled_dot_product_(flash|efficient|cudnn)_attention"
                            r"|_cudnn_attention_forward|_scaled_dot_product_flash_attention_for_cpu)")
_ATTN_FWD_BLHE = re.compile(r"aten::_(flash|efficient)_attention_forward")
_ATTN_BWD_BHLE = re.compile(r"aten::(_scaled_dot_product_(flash|efficient|cudnn)_attention_backward"
                            r"|_cudnn_attention_backward)")
_ATTN_BWD_BLHE = re.compile(r"aten::_(flash|efficient)_attention_backward")
_CONV = re.compile(r"aten::(cudnn_convolution|convolution|_convolution)")
_FILL = {"aten::fill_", "aten::zero_"}
_REDUCE = re.compile(r"aten::(sum|mean|amax|amin|max|min|norm|linalg_vector_norm|var|std|prod|argmax|argmin)")
_SOFTMAX = re.compile(r"aten::_?(log_)?softmax")
_LAYER_NORM = re.compile(r"aten::(native_layer_norm|_fused_rms_norm|rms_norm|layer_norm)")
_ELEMENTWISE = re.compile(r"aten::(add|sub|rsub|mul|div|gelu|silu|relu|sigmoid|tanh|exp|neg|rsqrt|sqrt|pow|where|"
                          r"masked_fill|copy|clone|clamp|abs|log|reciprocal|erf|cos|sin|maximum|minimum|"
                          r"threshold_backward|gelu_backward|silu_backward|sigmoid_backward|tanh_backward|"
                          r"lerp|addcmul|addcdiv|cat|triu|tril)_?")
_DECODE = msgspec.json.Decoder()
NAN = (math.nan, math.nan)


def _decoded(raw: Any) -> list:
    try:
        value = _DECODE.decode(raw) if raw is not None else None
    except (msgspec.DecodeError, TypeError):
        return []
    return value if isinstance(value, list) else []


class Inputs:
    """An operator's inputs: dims, dtypes (None where not a tensor) and concrete values."""

    def __init__(self, dims: list, types: list | None, concrete: list):
        self.dims = [d if isinstance(d, list) and all(isinstance(x, int) for x in d) else None for d in dims]
        # without types (NVTX's emit_nvtx gives sizes only): every non-empty size list is a tensor
        # of unknown element size, so FLOPs are known and bytes are not
        self.typed = types is not None
        unknown = ("", math.nan)
        self.types = ([TYPES.get(t) if isinstance(t, str) else None for t in types] if self.typed
                      else [unknown if d else None for d in self.dims])
        self.types += [None] * (len(self.dims) - len(self.types))
        self.concrete = concrete
        # a tensor (or list of tensors) the trace sizes but does not type, or types as TensorList:
        # its bytes are unknown, so the operator's are (summing the rest would be a guess low)
        self.unsized = self.typed and any(isinstance(d, list) and d and (self.dims[i] is None or self.types[i] is None)
                                          for i, d in enumerate(dims))

    def tensor(self, i: int) -> list[int] | None:
        return self.dims[i] if i < len(self.dims) and self.types[i] is not None else None

    def elem(self, i: int) -> float:
        """Bytes per element of input i (NaN when the trace gives no type)."""
        return self.types[i][1] if i < len(self.types) and self.types[i] is not None else math.nan

    def nbytes(self, i: int) -> float:
        dims = self.tensor(i)
        return math.nan if dims is None else math.prod(dims) * self.types[i][1]

    def tensors(self) -> list[int]:
        return [i for i in range(len(self.dims)) if self.tensor(i) is not None]

    def dtype(self) -> str:
        """The first floating input's dtype, else the first tensor's; "" when none."""
        kinds = [self.types[i][0] for i in self.tensors() if self.types[i][0]]
        floats = [k for k in kinds if k.startswith(("fp", "bf"))]
        return (floats or kinds or [""])[0]

    def value(self, i: int) -> Any:
        if i >= len(self.concrete) or not isinstance(self.concrete[i], str) or not self.concrete[i]:
            return None
        try:
            return msgspec.json.decode(self.concrete[i].replace("False", "false").replace("True", "true"))
        except msgspec.DecodeError:
            return None


def op_work(name: str, dims_raw: Any, types_raw: Any, concrete_raw: Any) -> tuple[float, float, str]:
    """(flops, bytes, dtype) of one operator call; NaN where its shapes do not tell.
    `types_raw` None: the trace gives sizes only (nsys with emit_nvtx): bytes unknown."""
    inputs = Inputs(_decoded(dims_raw), None if types_raw is None else _decoded(types_raw), _decoded(concrete_raw))
    for pattern, work in _WORK:
        if pattern.fullmatch(name):
            try:
                flops, moved = work(name, inputs)
            except (IndexError, TypeError, ValueError, ZeroDivisionError, StopIteration, OverflowError):
                flops, moved = NAN
            return float(flops), math.nan if inputs.unsized else float(moved), inputs.dtype()
    return math.nan, math.nan, inputs.dtype()


def _gemm(name: str, x: Inputs) -> tuple[float, float]:
    op = name.removeprefix("aten::").rstrip("_")
    first = 1 if op in ("addmm", "baddbmm", "addmv") else 0
    a, b = x.tensor(first), x.tensor(first + 1)
    out_elem = x.elem(first)
    if op in ("mv", "addmv", "dot"):
        m, k = (a[0], a[1]) if len(a) == 2 else (1, a[0])
        flops, out = 2 * m * k, m
    elif op in ("bmm", "baddbmm"):
        flops, out = 2 * a[0] * a[1] * a[2] * b[2], a[0] * a[1] * b[2]
    else:  # mm, addmm, _scaled_mm: [M,K] x [K,N]
        flops, out = 2 * a[0] * a[1] * b[1], a[0] * b[1]
        out_elem = 2 if op == "_scaled_mm" else out_elem  # fp8 in, bf16/fp16 out by default
    moved = sum(x.nbytes(i) for i in x.tensors()) + out * out_elem
    return flops, moved


def _attention(q: list[int], k: list[int], v: list[int], blhe: bool) -> tuple[int, int, int, int, int]:
    """(B*H, L, S, E, Ev) of q, k, v in [B,H,L,E] (or [B,L,H,E])."""
    if blhe:
        return q[0] * q[2], q[1], k[1], q[3], v[3]
    return math.prod(q[:-2]), q[-2], k[-2], q[-1], v[-1]


def _causal(name: str, x: Inputs) -> bool:
    index = {"aten::scaled_dot_product_attention": 5, "aten::_scaled_dot_product_flash_attention": 4,
             "aten::_scaled_dot_product_efficient_attention": 5, "aten::_scaled_dot_product_cudnn_attention": 6,
             "aten::_cudnn_attention_forward": 10, "aten::_flash_attention_forward": 7,
             "aten::_efficient_attention_forward": 8}.get(name)
    return index is not None and x.value(index) is True


def _attn_forward(name: str, x: Inputs) -> tuple[float, float]:
    bh, l, s, e, ev = _attention(x.tensor(0), x.tensor(1), x.tensor(2), bool(_ATTN_FWD_BLHE.fullmatch(name)))
    flops = 2 * bh * l * s * (e + ev) * (0.5 if _causal(name, x) else 1.0)
    q, k, v = (x.nbytes(i) for i in range(3))
    return flops, q + k + v + q / e * ev  # the output is [.., L, Ev]


def _attn_backward(name: str, x: Inputs) -> tuple[float, float]:
    # grad_out, q, k, v, out, ...: the forward's shapes from q, k, v; dq, dk, dv written
    bh, l, s, e, ev = _attention(x.tensor(1), x.tensor(2), x.tensor(3), bool(_ATTN_BWD_BLHE.fullmatch(name)))
    flops = 2.5 * 2 * bh * l * s * (e + ev)
    q, k, v = (x.nbytes(i) for i in (1, 2, 3))
    return flops, 2 * x.nbytes(0) + 2 * (q + k + v) + x.nbytes(4)


def _conv(name: str, x: Inputs) -> tuple[float, float]:
    data, weight = x.tensor(0), x.tensor(1)
    if name == "aten::cudnn_convolution":  # (self, weight, padding, stride, dilation, groups, ...)
        padding, stride, dilation, groups = (x.value(i) for i in (2, 3, 4, 5))
    else:  # (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
        stride, padding, dilation, transposed, groups = (x.value(i) for i in (3, 4, 5, 6, 8))
        if transposed:
            return NAN
    spatial = [(h + 2 * p - d * (kk - 1) - 1) // s + 1
               for h, kk, p, s, d in zip(data[2:], weight[2:], padding, stride, dilation)]
    n, o = data[0], weight[0]
    flops = 2 * n * o * math.prod(spatial) * weight[1] * math.prod(weight[2:])
    return flops, x.nbytes(0) + x.nbytes(1) + n * o * math.prod(spatial) * x.elem(0)


def _fill(name: str, x: Inputs) -> tuple[float, float]:
    return math.nan, x.nbytes(0)


def _reduce(name: str, x: Inputs) -> tuple[float, float]:
    dims = x.tensor(0)
    axes = x.value(1)
    if axes is None and len(x.dims) > 1 and len(x.concrete) < 2:  # a dim argument whose value is not recorded
        return NAN
    keep = [n for i, n in enumerate(dims) if isinstance(axes, list) and axes and i not in
            [a % len(dims) for a in axes if isinstance(a, int)]] if dims else []
    return math.nan, x.nbytes(0) + math.prod(keep) * x.elem(0)


def _softmax(name: str, x: Inputs) -> tuple[float, float]:
    return math.nan, 2 * x.nbytes(0)


def _layer_norm(name: str, x: Inputs) -> tuple[float, float]:
    return math.nan, 2 * x.nbytes(0) + sum(x.nbytes(i) for i in x.tensors()[1:])


def _elementwise(name: str, x: Inputs) -> tuple[float, float]:
    tensors = x.tensors()
    if not tensors:  # no shapes recorded (record_shapes=False): unknown, never the empty sum's 0
        return NAN
    read = sum(x.nbytes(i) for i in tensors)
    if name.startswith("aten::copy_"):  # (self, src): src read, self written
        return math.nan, x.nbytes(0) + x.nbytes(1)
    if name.startswith("aten::cat"):  # its TensorList has no dtype (unsized): unknown
        return math.nan, 2 * read
    out = np.broadcast_shapes(*(tuple(x.tensor(i)) for i in tensors))
    elem = next((x.types[i][1] for i in tensors if x.types[i][0] == x.dtype()), math.nan)
    return math.nan, read + math.prod(out) * elem


_WORK = [(_GEMM, _gemm), (_ATTN_FWD_BHLE, _attn_forward), (_ATTN_FWD_BLHE, _attn_forward),
         (_ATTN_BWD_BHLE, _attn_backward), (_ATTN_BWD_BLHE, _attn_backward), (_CONV, _conv),
         (re.compile("|".join(map(re.escape, _FILL))), _fill), (_REDUCE, _reduce), (_SOFTMAX, _softmax),
         (_LAYER_NORM, _layer_norm), (_ELEMENTWISE, _elementwise)]


def spread(op_of_row: np.ndarray, dur_ns: np.ndarray, op_flops: np.ndarray, op_bytes: np.ndarray,
           call: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per row, its operator's (flops, bytes) times the row's share of the time of the rows of
    the same call (`call`: one id per execution of the operator, e.g. each CUDA-graph replay;
    default: the operator) (`op_of_row` -1: no operator, NaN); a call whose rows took no time
    splits evenly."""
    flops, moved = np.full(len(op_of_row), np.nan), np.full(len(op_of_row), np.nan)
    has = op_of_row >= 0
    if not has.any():
        return flops, moved
    keys = op_of_row if call is None else np.stack([op_of_row, call], axis=1)
    _, inverse = np.unique(keys[has], return_inverse=True, axis=0 if call is not None else None)
    inverse = inverse.reshape(-1)
    dur = dur_ns[has].astype(np.float64)
    total = np.bincount(inverse, weights=dur)
    count = np.bincount(inverse)
    share = np.where(total[inverse] > 0, dur / np.where(total[inverse] > 0, total[inverse], 1), 1 / count[inverse])
    flops[has], moved[has] = op_flops[op_of_row[has]] * share, op_bytes[op_of_row[has]] * share
    return flops, moved


def _inductor_work(args: Any, flops: float, moved: float) -> tuple[float, float]:
    """An Inductor Triton kernel's own estimate where the shapes gave nothing: the launch range
    (named after the kernel) carries `kernel_num_gb` and `kernel_flop` when the code was compiled
    with torch._inductor.config.benchmark_kernel; a kernel_flop of 0 means none counted (unknown)."""
    gb, flop = args.kernel_num_gb, args.kernel_flop
    if math.isnan(moved) and type(gb) in (int, float) and gb >= 0:
        moved = float(gb) * 1e9
    if math.isnan(flops) and type(flop) in (int, float) and flop > 0:
        flops = float(flop)
    return flops, moved


_TF32 = re.compile(r"tf32|xmma.*_tf32|s1688|s16816.*tf32", re.IGNORECASE)


def op_rows(kind: np.ndarray, external_id: np.ndarray, ops: Any) -> np.ndarray:
    """Per GPU row, the index in `ops` of the operator with its `External id` (the first of that
    id), -1 for none; kernels only."""
    op_ids = ops.external_id
    ids, first = np.unique(op_ids, return_index=True)  # the first operator of each id
    first, ids = first[ids >= 0], ids[ids >= 0]
    pos = np.minimum(np.searchsorted(ids, external_id), max(len(ids) - 1, 0))
    found = (kind == "kernel") & (external_id >= 0) & (len(ids) > 0)
    found[found] = ids[pos[found]] == external_id[found]
    return np.where(found, first[pos] if len(ids) else -1, -1)


def row_work(name: list[str], dur_ns: np.ndarray, op_of_row: np.ndarray, ops: Any,
             call: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per GPU row: (flops, bytes, dtype) from the operator with its `External id` (`op_of_row`:
    op_rows(); `ops`: the trace's cpu_op events, parsers/_kineto_json.Ops); kernels only (memcpy
    and memset rows have their own bytes). `call` tells executions of one operator apart (each CUDA
    graph replay of a captured one). A fp32 GEMM whose kernel name says tf32 is tf32."""
    used = np.unique(op_of_row[op_of_row >= 0])
    n_ops = ops.size
    op_flops, op_bytes = np.full(n_ops, np.nan), np.full(n_ops, np.nan)
    op_dtype = np.full(n_ops, "", dtype=object)
    known: dict[tuple, tuple[float, float, str]] = {}  # one op_work per distinct call (each layer, each step)
    for i in used.tolist():
        args = ops.inputs(i)
        call_key = (ops.name[i], bytes(args.dims), bytes(args.types), bytes(args.concrete), args.flops,
                    args.kernel_num_gb, args.kernel_flop)
        if (work := known.get(call_key)) is None:
            work = known[call_key] = _op_work_or_counted(ops.name[i], args)
        op_flops[i], op_bytes[i], op_dtype[i] = work
    flops, moved = spread(op_of_row, dur_ns, op_flops, op_bytes, call)
    dtype = np.where(op_of_row >= 0, op_dtype[np.maximum(op_of_row, 0)] if n_ops else "", "")
    fp32 = np.flatnonzero(dtype == "fp32")
    dtype[fp32[_name_mask([name[i] for i in fp32.tolist()], lambda n: bool(_TF32.search(n)))]] = "tf32"
    return flops, moved, dtype.astype(object)


def _op_work_or_counted(name: str, args: Any) -> tuple[float, float, str]:
    """op_work of the operator's inputs (`args`: _kineto_columns.Ops.inputs); where we have no
    formula, torch's own FLOP count (with_flops=True), then Inductor's estimate (_inductor_work)."""
    flops, moved, dtype = op_work(name, args.dims, args.types, args.concrete)
    if math.isnan(flops) and type(args.flops) in (int, float) and args.flops > 0:
        flops = float(args.flops)  # torch's own count (with_flops=True) where we have no formula; 0 is no count
    flops, moved = _inductor_work(args, flops, moved)
    return flops, moved, dtype
