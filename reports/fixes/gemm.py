"""GEMMs that leave the tensor cores idle or run on unaligned kernels, from the kernel names
and, where the trace gives it, their work. Pure: a rank's `sums` and `roofline` digests
(reports/compare.RANK_SUMMARIES) in, a frame and findings out.

Names tell the math units: cuBLAS's and CUTLASS's fp32 CUDA-core kernels are `*sgemm*`
(`ampere_sgemm_128x64_nn`, `cutlass_80_simt_sgemm_64x64_8x5_nn_align1`, `sgemm_largek_lds64`)
or xmma kernels that say `ffma` (`sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_..._ffma_aligna4_...`);
tensor-core ones say `tensorop`, `hmma`, `gmma`, `nvjet`, `tf32` or a 16-bit type. GEMVs stay
out: a matrix-vector product is memory-bound on any unit. A CUTLASS kernel's `alignN` (xmma's
`alignaN`/`alignbN`/`aligncN`) is how many elements it loads at once; tensor-core kernels
come as align1/align2 only where a matrix's leading dimension is no multiple of 16 bytes (the
SIMT ones always are align1, which says nothing).
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pandas as pd

from tracelab.core.devices import meta_tensor_dtypes

from ..fmt import flop, tflops
from ..findings.finding import SECTIONS, Finding, Said, fix_writer, ms
from ..timeline.causes import bound_words
from ..topics import result_of

SIMT = re.compile(r"sgemm|simt|_ffma_", re.IGNORECASE)
TENSOR_CORE = re.compile(r"tensorop|hmma|gmma|nvjet|tf32|bf16|f16f16|s1688|s16816|h1688|h16816|imma|wgmma|e4m3",
                         re.IGNORECASE)
UNALIGNED = re.compile(r"align[abc]?[12](?![0-9])", re.IGNORECASE)
GEMV = re.compile(r"gemv", re.IGNORECASE)
MIN_GPU_SHARE = 0.05  # kernels under this share of the rank's GPU time are no finding
NAMED = 2  # kernels named in a sentence
COLUMNS = ["kernel", "dur_ns", "count", "known_ns", "flops", "bytes", "tc_min_ns"]


def gemm_kernels(sums: pd.DataFrame) -> pd.DataFrame:
    """One rank's GEMM kernels (op_class gemm, GPU rows) with their time and calls: kernel,
    dur_ns, count, simt, tensor_core, unaligned (booleans from the name, module docstring)."""
    on = ((sums["op_class"] == "gemm") & (sums["kind"] == "kernel")).to_numpy()
    kernel = sums["kernel"][on]
    codes = kernel.cat.codes.to_numpy() if isinstance(kernel.dtype, pd.CategoricalDtype) else pd.factorize(kernel)[0]
    keep = codes >= 0  # a missing name: no group, as groupby drops it
    group, first = pd.factorize(codes[keep])  # in order of first appearance, as groupby(sort=False)
    total = {c: np.zeros(len(first), np.int64) for c in ("dur_ns", "count")}
    for c, ns in total.items():
        np.add.at(ns, group, sums[c].to_numpy(dtype=np.int64)[on][keep])
    at = np.unique(group, return_index=True)[1]
    order = np.argsort(-total["dur_ns"], kind="stable")  # the longest first, ties in order of first appearance
    flags = np.array([_flags(str(k)) for k in kernel.iloc[np.flatnonzero(keep)[at]]], dtype=bool).reshape(-1, 3)
    return pd.DataFrame({"kernel": kernel.iloc[np.flatnonzero(keep)[at][order]].reset_index(drop=True),
                         **{c: ns[order] for c, ns in total.items()},
                         **{c: flags[order, k] for k, c in enumerate(("simt", "tensor_core", "unaligned"))}})


@lru_cache(maxsize=4096)
def _flags(name: str) -> tuple[bool, bool, bool]:
    """(simt, tensor_core, unaligned) of one GEMM kernel's name (module docstring); each rank
    of a job has the same few names: tested once per process."""
    tensor_core = TENSOR_CORE.search(name) is not None
    simt = SIMT.search(name) is not None and not tensor_core and GEMV.search(name) is None
    tensor_core = tensor_core and not simt
    return simt, tensor_core, tensor_core and UNALIGNED.search(name) is not None


def gpu_ns(sums: pd.DataFrame) -> int:
    return int(sums.loc[sums["kind"] != "cpu_op", "dur_ns"].sum())


def _of(ev, i) -> tuple[pd.DataFrame, int]:
    """(gemm_kernels, gpu_ns) of input `i`'s sums, made once per command (both sources read them)."""
    return ev.shared(("gemm", id(i)), lambda: (gemm_kernels(i.sums), gpu_ns(i.sums)))


def with_tensor_core_roof(kernels: pd.DataFrame, roof: dict) -> pd.DataFrame:
    """The kernels (COLUMNS) with their work from the roofline digest (NaN where the trace gives
    none) and `tc_min_ns`: the least time their FLOPs and bytes need at the device's TF32
    tensor-core roof, max(flops / TF32 peak, bytes / HBM bandwidth), NaN without FLOPs or device."""
    rows = roof["rows"].set_index("key") if len(roof["rows"]) else pd.DataFrame(columns=["flops", "bytes", "known_ns"])
    out = kernels[["kernel", "dur_ns", "count"]].copy()
    for column in ("known_ns", "flops", "bytes"):
        out[column] = out["kernel"].astype(str).map(rows[column]).astype("float64")
    device = roof.get("device")
    tf32 = device.peak_tflop_s("tf32") if device is not None else None
    if tf32 is None:
        out["tc_min_ns"] = np.nan
        return out[COLUMNS]
    compute = out["flops"] / (tf32 * 1e3)  # TFLOP/s = 1e3 FLOP/ns
    memory = (out["bytes"] / device.hbm_gb_s).fillna(0.0)
    out["tc_min_ns"] = np.fmax(compute, memory).where(out["flops"].notna())
    return out[COLUMNS]


def _names(kernels: pd.DataFrame) -> str:
    """'a takes' or 'a, b and 3 more take' (the largest first)."""
    names = [_short(str(k)) for k in kernels["kernel"].head(NAMED)]
    rest = len(kernels) - len(names)
    verb = "takes" if len(kernels) == 1 else "take"
    return ", ".join(names) + (f" and {rest} more" if rest else "") + f" {verb}"


def _short(name: str, chars: int = 72) -> str:
    return name if len(name) <= chars else name[:chars - 1] + "\u2026"


def _share(part: float, whole: float) -> str:
    return "<1%" if 0 < part < 0.01 * whole else f"{100 * part / whole:.0f}%"


def _run(group: str, several: bool) -> str:
    return f"{group}: " if several and group else ""


def _pick(ev, select) -> dict[str, tuple]:
    """Per run, the rank whose selected GEMM kernels take most time, where that is at least
    MIN_GPU_SHARE of its GPU time: {group: (input, kernels, its GPU ns)}."""
    best: dict[str, tuple] = {}
    best_ns: dict[str, int] = {}
    for i in ev.inputs:
        k, total = _of(ev, i)
        if not total:
            continue
        chosen = np.asarray(select(k), dtype=bool)
        time = int(k["dur_ns"].to_numpy()[chosen].sum())  # the rows taken only for the one kept
        if time >= MIN_GPU_SHARE * total and (i.group not in best or time > best_ns[i.group]):
            best[i.group], best_ns[i.group] = (i, k[chosen], total), time
    return best


def tf32_findings(ev) -> list[Finding]:
    """Per run, the rank whose fp32 GEMMs take most time on CUDA-core (SIMT) kernels, where that
    is at least MIN_GPU_SHARE of its GPU time: TF32 or bf16 autocast, and where the trace gives their
    FLOPs and the device is known, the time the TF32 tensor-core roof would allow them."""
    several = len({i.group for i in ev.inputs}) > 1
    out = []
    for group, (i, simt, total) in _pick(ev, lambda k: k["simt"]).items():
        k = _of(ev, i)[0]
        gemm_ns, tc_ns = int(k["dur_ns"].sum()), int(k.loc[k["tensor_core"], "dur_ns"].sum())
        roof = i.digest("roofline")
        work = with_tensor_core_roof(simt, roof)
        time = int(simt["dur_ns"].sum())
        device = roof.get("device")
        dtypes = device.tensor_dtypes if device is not None else meta_tensor_dtypes(i.meta)
        if dtypes is not None and "fp16" not in dtypes:
            continue  # a GPU without tensor cores runs every GEMM on CUDA cores: nothing to move
        fix = _fix(device, dtypes)
        # the fix is said only where the run's what-if of it saves time (whatif/findings.with_saving)
        write = fix_writer(f"{_run(group, several)}rank {i.rank} runs fp32 GEMMs on CUDA cores, not tensor cores: "
                           f"{_names(simt)} {ms(time)}, {_share(time, total)} of its GPU time"
                           + (f" ({_share(tc_ns, gemm_ns)} of its GEMM time is on tensor cores)" if tc_ns else "") + "; ",
                           fix, off_path_words(i), _roof_text(work, device))
        evidence = {"rank": i.rank, "kernels": simt["kernel"].astype(str).tolist(), "simt_ns": time, "gpu_ns": total,
                    "gemm_ns": gemm_ns, "tensor_core_ns": tc_ns, **_roof_evidence(work), "fix": fix}
        out.append(Finding(write(Said()), time, SECTIONS["roofline"], {**evidence, **_tf32_scenario(work)}, "tf32",
                           {"run": group, **evidence, "share": time / total}, write))
    return out


def _tf32_scenario(work: pd.DataFrame) -> dict:
    """The what-if of the fix (reports/whatif/findings.py): these kernels scaled by what the TF32
    roof allows of the ones whose work the trace gives (their time there over their time now);
    where the trace gives no work, the kernels taking no time at all: an upper bound, said so."""
    e = _roof_evidence(work)
    names = "|".join(re.escape(str(k)) for k in work["kernel"])
    if e["tc_min_ns"] is None or not e["known_ns"]:
        return {"scenario": f"scale:{names}=0",
                "scenario_text": "these GEMMs took no time at all (an upper bound: the trace does not give their work)"}
    return {"scenario": f"scale:{names}={e['tc_min_ns'] / e['known_ns']:.4g}",
            "scenario_text": "these GEMMs ran at the TF32 roof"}


def _fix(device, dtypes: frozenset[str] | None) -> str:
    """The fix for the features the device has (tracelab/devices.tensor_dtypes): TF32 or bf16 from
    Ampere on, fp16 autocast on Volta and Turing; for a device the trace does not make known, the
    rule itself rather than a feature it may lack."""
    named = f"the {device.name}" if device is not None else "this GPU"
    if dtypes is None:
        return ("run them on tensor cores: TF32 or bf16 autocast on GPUs of compute capability 8.0 and later, "
                "fp16 autocast on 7.x (the trace does not say which GPU ran them)")
    if "tf32" in dtypes:
        return ("allow TF32 (torch.backends.cuda.matmul.allow_tf32 = True, or "
                "torch.set_float32_matmul_precision(\"high\")) or run them under bf16 autocast")
    return f"{named} has no TF32 or bf16: run them under fp16 autocast (torch.autocast(\"cuda\", torch.float16))"


def off_path_words(i) -> str:
    """What a GEMM finding says instead of its fix where the run's what-if of that fix gains
    nothing: the GEMMs are not on the step's path, and what bounds most of its steps (the idle
    topic's result). A host-bound step is not told to make its GEMMs faster: autocast even adds
    host work per op; the host's time per step is what to cut."""
    steps = result_of("idle", i).steps if i.timed else None
    bounds = steps["bound"].value_counts() if steps is not None and len(steps) else None
    if bounds is None or not len(bounds):
        return "they are not on the step's path (the run's critical path runs through other work): faster GEMMs gain nothing now"
    bound, n = str(bounds.index[0]), int(bounds.iloc[0])
    stepless = bool(steps["step"].isna().all())  # the whole trace is one window
    where = f"the whole trace is {bound_words(bound)}" if stepless else f"{n} of {len(steps)} steps {bound_words(bound)}"
    cut = f"; the host's time{'' if stepless else ' per step'} is what to cut" if bound == "host" else ""
    return (f"they are not on the {'trace' if stepless else 'step'}'s path ({where}): faster GEMMs gain nothing "
            f"now{cut}")


def _roof_evidence(work: pd.DataFrame) -> dict:
    known = work[work["tc_min_ns"].notna()]  # known_ns: the time of the rows whose work the trace gives
    return {"flops": float(known["flops"].sum()) if len(known) else None,
            "known_ns": int(known["known_ns"].sum()), "tc_min_ns": float(known["tc_min_ns"].sum()) if len(known) else None}


def _roof_text(work: pd.DataFrame, device) -> str:
    """'; at the H100 SXM's TF32 roof (494.7 TFLOP/s) the 2.1 TFLOP of these kernels would take
    4.3 ms instead of 31.0 ms', over the kernels whose FLOPs the trace gives; '' without any."""
    e = _roof_evidence(work)
    if e["tc_min_ns"] is None:
        return ""
    whose = "" if e["known_ns"] == int(work["dur_ns"].sum()) else " whose work the trace gives"
    return (f"; at the {device.name}'s TF32 roof ({tflops(device.peak_tflop_s('tf32'))}) the "
            f"{flop(e['flops'])} of the kernels{whose} would take {ms(e['tc_min_ns'])} "
            f"instead of {ms(e['known_ns'])}")


def _odd_shapes(i) -> list[dict]:
    """The trace's GEMM shapes with an odd N or K (parsers/_gemm_dims.py, Kineto with shapes)."""
    return [o for o in i.meta.odd_gemms if isinstance(o, dict) and o.get("dur_ns")]


PAD_GROWTH = 1 / 16  # pad to a multiple of 64 only where that adds at most this share of the dimension


def padded(size: int, multiple: int) -> int:
    """The size to pad a dimension to: the next multiple of 64 where that adds at most PAD_GROWTH
    (a vocabulary of 50,257 -> 50,304), else the next multiple the alignment needs (K = 5 fp32 ->
    8, not 64: 12.8x the work)."""
    to_64 = -(-size // 64) * 64
    return to_64 if to_64 - size <= PAD_GROWTH * size else -(-size // multiple) * multiple


def _pad(o: dict) -> str:
    """'N = 50257 -> 50304' for each odd dimension (padded)."""
    return ", ".join(f"{d} = {o[d.lower()]:,} -> {padded(o[d.lower()], o['multiple']):,}" for d in o["odd"])


def _shapes_text(shapes: list[dict], total: int) -> str:
    time = sum(o["dur_ns"] for o in shapes)
    top = shapes[0]
    more = f" and {len(shapes) - 1} more shape{'s' if len(shapes) > 2 else ''}" if len(shapes) > 1 else ""
    return (f"{top['op']} with M = {top['m']:,}, N = {top['n']:,}, K = {top['k']:,} ({top['dtype'] or 'dtype unknown'}; "
            f"N and K must be multiples of {top['multiple']}){more} {'take' if more else 'takes'} {ms(time)}, "
            f"{_share(time, total)} of its GPU time: pad ({_pad(top)})")


def alignment_findings(ev) -> list[Finding]:
    """Per run, the rank whose GEMMs lose most time to alignment, where that is at least
    MIN_GPU_SHARE of its GPU time: GEMM shapes with a dimension that is no multiple of 16 bytes (where
    the trace gives shapes), and tensor-core GEMMs on align1/align2 kernels; pad the dimension.
    The two may be the same kernels: the time at stake is the larger, never their sum."""
    several = len({i.group for i in ev.inputs}) > 1
    best: dict[str, tuple] = {}
    for i in ev.inputs:
        k, total = _of(ev, i)
        odd_kernels, shapes = k[k["unaligned"]], _odd_shapes(i)
        stake = max(int(odd_kernels["dur_ns"].sum()), sum(o["dur_ns"] for o in shapes))
        if total and stake >= MIN_GPU_SHARE * total and (i.group not in best or stake > best[i.group][1]):
            best[i.group] = (i, stake, total, odd_kernels, shapes)
    out = []
    for group, (i, stake, total, odd_kernels, shapes) in best.items():
        parts = [_shapes_text(shapes, total)] if shapes else []
        if len(odd_kernels):
            time = int(odd_kernels["dur_ns"].sum())
            parts.append(f"{'its ' if shapes else ''}tensor-core GEMMs run on unaligned kernels: {_names(odd_kernels)} {ms(time)}, "
                         f"{_share(time, total)} of its GPU time; such align1/align2 kernels are chosen where a "
                         "matrix dimension is no multiple of 16 bytes (8 bf16 or 4 fp32 elements): pad it (e.g. the "
                         "vocabulary or hidden size to a multiple of 64) to get the vectorised kernels")
        head = (f"{_run(group, several)}rank {i.rank}'s GEMMs have a dimension that is no multiple of 16 bytes: "
                if shapes else f"{_run(group, several)}rank {i.rank}'s ")
        evidence = {"rank": i.rank, "kernels": odd_kernels["kernel"].astype(str).tolist(),
                    "unaligned_ns": int(odd_kernels["dur_ns"].sum()), "odd_shapes": shapes,
                    "odd_shapes_ns": sum(o["dur_ns"] for o in shapes), "gpu_ns": total}
        out.append(Finding(head + "; ".join(parts), stake, SECTIONS["roofline"], evidence, "alignment",
                           {"run": group, **evidence, "stake_ns": stake, "share": stake / total}))
    return out
