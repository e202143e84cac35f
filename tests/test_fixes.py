"""Findings that name the cause and the fix (reports/fixes/): each on a real capture where it
fires, its numbers recomputed from the trace file itself, and on one where it must not."""
from __future__ import annotations

import gzip
import json
import re
import statistics

import numpy as np
import pytest

from tracelab.ingest.session import Session
from tracelab.reports import fmt

from helpers import DATA, shared_trace, slow_after

SIMT = re.compile(r"sgemm|simt|_ffma_", re.IGNORECASE)
GEMV = re.compile(r"gemv", re.IGNORECASE)
TENSOR_CORE_ALIGN1 = re.compile(r"tensorop.*align[12](?![0-9])", re.IGNORECASE)


def _found(*paths) -> list:
    paths = [str(p) for p in paths]
    found = Session.open(paths, keep_events=True).findings()
    for f in found:
        json.dumps(f.evidence, allow_nan=False)  # strict JSON, as every --format json
    return found


def _by_fix(found: list, word: str) -> list:
    return [f for f in found if word in f.text]


def _kernel_ns(path, pattern: re.Pattern) -> int:
    """The GPU time of the kernels whose name matches, straight from the Kineto JSON (the
    parser's rounding: each dur in us to whole ns)."""
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    return sum(round(e["dur"] * 1000) for e in events if e.get("cat") == "kernel" and pattern.search(e["name"])
               and not GEMV.search(e["name"]))


def _gpu_busy_share(path) -> float:
    """The kernels' summed time over the window from the first fp32 SIMT GEMM's start to the last
    one's end, straight from the Kineto JSON: near one, the GEMMs run back to back on the path;
    well under it, the GPU waits on the host between them."""
    with gzip.open(path) as f:
        kernels = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"]
    simt = [e for e in kernels if SIMT.search(e["name"]) and not GEMV.search(e["name"])]
    start_us, end_us = min(e["ts"] for e in simt), max(e["ts"] + e["dur"] for e in simt)
    inside = [e for e in kernels if e["ts"] >= start_us and e["ts"] + e["dur"] <= end_us]
    return sum(e["dur"] for e in inside) / (end_us - start_us)


@pytest.mark.slow
def test_fp32_simt_gemms_off_the_path_get_no_tf32_advice():
    """A host-bound step (its GPU busy a small share of the time): faster GEMMs save nothing, so
    neither TF32 nor bf16 autocast (which adds host work) is offered; the host's time is named."""
    folder = DATA / "train-1gpu-steps-torch"
    trace = folder / "rank0.pt.trace.json.gz"
    assert _gpu_busy_share(trace) < 0.2
    (found,) = [f for f in _found(folder) if f.code == "tf32"]
    simt_ns = _kernel_ns(trace, SIMT)
    assert found.evidence["simt_ns"] == simt_ns and f"take {fmt.duration(simt_ns)}" in found.text
    w = found.evidence["whatif"]  # ranked by what the step would gain: nothing
    assert found.at_stake_ns == int(w["saving_ns_per_step"] * w["steps"])
    assert w["saving_ns_per_step"] < 0.005 * w["step_ns"] and found.values["fix_offered"] is False
    assert "TF32 (" not in found.text and "autocast" not in found.text and "set_float32" not in found.text
    assert "not on the step's path" in found.text and "host's time per step is what to cut" in found.text


@pytest.mark.slow
def test_fp32_simt_gemms_on_the_path_name_tf32():
    """A GPU-bound trace whose fp32 GEMMs are on the path: the fix, with its what-if's saving."""
    folder = DATA / "roofline-1gpu-torch"
    assert _gpu_busy_share(folder / "rank0.pt.trace.json.gz") > 0.9
    (found,) = [f for f in _found(folder) if f.code == "tf32"]
    assert found.values["fix_offered"] is True and found.values["saving_ns"] >= 0.005 * found.values["step_ns"]
    assert "torch.set_float32_matmul_precision(\"high\")" in found.text and "not on the" not in found.text
    assert found.evidence["simt_ns"] == _kernel_ns(folder / "rank0.pt.trace.json.gz", SIMT)


def test_a_fix_without_gain_in_the_user_s_time_is_not_offered():
    """The rule itself (whatif/findings.with_saving): the fix's clause is swapped for its no-gain words
    where the step without the profiler gains under 0.5%, though the profiled replay gains more."""
    from types import SimpleNamespace

    from tracelab.reports.findings.finding import NO_GAIN, Finding, fix_writer
    from tracelab.reports.whatif.findings import with_saving

    write = fix_writer("GEMMs; ", "allow TF32", "off the path")
    f = Finding("GEMMs; allow TF32", 1, "roofline", {"fix": "allow TF32", "scenario_text": "x"}, "tf32", {"run": ""},
                write)
    row = SimpleNamespace(name="scale", args="k=0.5", saving_ns=2e6, step_ns=10e6, steps=4, saving_frac=0.2,
                          predicted_unprofiled_ns=None)
    offered = with_saving(f, row)
    assert offered.text.startswith("GEMMs; allow TF32;") and offered.values["fix_offered"] is True
    for predicted_ns, offered in ((7.9e6, True), (7.97e6, False), (9e6, False)):  # of the user's 8 ms step: 0.5% is 40 us
        row.predicted_unprofiled_ns = predicted_ns
        got = with_saving(f, row, unprofiled={"unprofiled_step_ns": 8e6, "unprofiled_source": "measured"})
        assert got.values["fix_offered"] is offered and ("allow TF32" in got.text) is offered
        assert ("off the path" in got.text) is not offered
        # the clause judges by the same figure: the profiled replay's 20% is no gain to the user's step
        assert ("nothing to gain now" in got.text) is not offered
        saved, step = f"{(8e6 - predicted_ns) / 1e6:.2f} ms", "8.00 ms"
        assert (f"{saved} of {step} without" if not offered else f"{saved} of {step} per step without") in got.text
    bare = Finding("stalls; prefetch", 1, "idle", {"fix": "prefetch", "scenario_text": "x"}, "host_stall", {"run": ""},
                   fix_writer("stalls; ", "prefetch"))
    row.predicted_unprofiled_ns = 9e6  # a fix without words of its own for no gain: the shared ones
    got = with_saving(bare, row, unprofiled={"unprofiled_step_ns": 8e6, "unprofiled_source": "measured"})
    assert got.text.startswith(f"stalls; {NO_GAIN};") and "prefetch" not in got.text


def test_tf32_roof_from_the_trace_s_flops():
    """roofline-1gpu-torch's fp32 GEMM region: 5 calls of a 4096^3 mm (expected.results.json),
    at the H100's TF32 roof 494.7 TFLOP/s."""
    folder = DATA / "roofline-1gpu-torch"
    expected = json.loads((folder / "expected.results.json").read_text())["regions"]["gemm_square_fp32"]
    flops = expected["flops"] * expected["calls"]
    found = _by_fix(_found(folder), "allow TF32")
    assert len(found) == 1
    assert found[0].evidence["flops"] == pytest.approx(flops, rel=1e-9)
    assert found[0].evidence["tc_min_ns"] == pytest.approx(flops / 494.7e3, rel=1e-9)
    assert f"would take {fmt.duration(flops / 494.7e3)}" in found[0].text


@pytest.mark.slow
@pytest.mark.parametrize("folder", [  # every finding of a capture each: the other two the rule again, under -m slow
    "train-small-1gpu-torch", *(pytest.param(f, marks=pytest.mark.slow) for f in ("decode-1b-1gpu-torch", "idle-1gpu-large-torch"))])
def test_no_tf32_finding_without_fp32_simt_gemms(folder):
    """bf16 GEMMs on tensor cores, or fp32 ones under 5% of the GPU time."""
    assert not _by_fix(_found(DATA / folder), "CUDA cores")


@pytest.mark.slow
def test_no_tf32_finding_on_cpu_operators():
    assert not _by_fix(_found(DATA / "train-cpu-torch"), "CUDA cores")


@pytest.mark.slow  # over 1.2 s of CPU here: the default run stays under 90 s
def test_volta_gets_fp16_not_tf32():
    path = shared_trace("hta/trace_diff/test/test.json.gz")
    found = _by_fix(_found(path), "CUDA cores")
    assert len(found) == 1 and "no TF32" in found[0].text and "float16" in found[0].text
    assert found[0].evidence["simt_ns"] == _kernel_ns(path, SIMT)


@pytest.mark.slow  # over 1.2 s of CPU here: the default run stays under 90 s
def test_unaligned_tensor_core_gemms_name_padding():
    path = shared_trace("hta/trace_diff/control/control.json.gz")
    found = _by_fix(_found(path), "unaligned")
    assert len(found) == 1 and "pad it" in found[0].text
    assert found[0].evidence["unaligned_ns"] == _kernel_ns(path, TENSOR_CORE_ALIGN1)


@pytest.mark.slow
@pytest.mark.parametrize("folder", [  # every finding of a capture each: the other two the rule again, under -m slow
    "roofline-1gpu-torch", *(pytest.param(f, marks=pytest.mark.slow) for f in ("train-1gpu-steps-torch", "idle-1gpu-small-torch"))])
def test_simt_align1_kernels_are_no_alignment_finding(folder):
    """cutlass_80_simt_sgemm_*_align1: SIMT kernels are align1 whatever the shapes."""
    assert not _by_fix(_found(DATA / folder), "unaligned")


# ---- DDP: the gradient all-reduce exposed after backward ------------------------------------------

AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def _ddp_rank(rank: int, late_ns: int, allreduce_ns: int, msg_bytes: float, steps: int = 3):
    """One rank's hand-made steps of 10 ms: forward 0-2 ms, backward 2-6 ms (4 kernels), one
    all-reduce that starts after backward (plus `late_ns`, the time the other rank waits) and
    runs `allreduce_ns`, then the optimizer."""
    from tracelab.core import classify, schema
    from tracelab.core.schema import Profile
    rows = []
    for s in range(steps):
        t = s * 10_000_000
        rows.append(("gemm_fwd", "forward", t, 2_000_000, np.nan))
        rows += [(f"gemm_bwd{k}", "backward", t + 2_000_000 + k * 1_000_000, 1_000_000, np.nan) for k in range(4)]
        ar_start = t + 6_000_000 + late_ns
        rows.append((AR, "backward/nccl:all_reduce", ar_start, allreduce_ns, msg_bytes))
        rows.append(("adam", "optimizer", ar_start + allreduce_ns, 500_000, np.nan))
    name, scope, start, dur, msg = zip(*rows)
    step = [int(st // 10_000_000) for st in start]
    events = schema.validate(classify.classified(schema.coerce({
        "rank": rank, "source": "torch", "kind": "kernel", "name": list(name), "device": 0, "stream": 7,
        "scope": list(scope), "start_ns": list(start), "dur_ns": list(dur), "step": step,
        "msg_bytes": list(msg)}, n_rows=len(rows), spec=schema.PARSED)))
    return Profile(events, {"source": "torch", "rank": rank, "trace_start_epoch_ns": 10**18, "path": ""})


def _ddp_found(profiles) -> list:
    from tracelab.reports.align.align import comparison
    from tracelab.reports.ranks import label
    from tracelab.reports.findings.finding import Evidence
    from tracelab.reports.fixes.ddp import ddp_findings
    inputs = label(["run"], [True], [profiles])
    return ddp_findings(Evidence(inputs, comparison(inputs, "kernel")))


def test_one_bucket_after_backward_names_bucket_cap():
    """Both ranks arrive together; each all-reduce of 8 MiB takes 2 ms after backward, beside no
    compute kernel: 2 ms exposed per 10.5 ms step, nothing of it waiting."""
    found = _ddp_found([_ddp_rank(r, 0, 2_000_000, 8 * 2**20) for r in (0, 1)])
    assert len(found) == 1
    e = found[0].evidence
    assert e["exposed_ns"] == e["fixable_ns"] == 2_000_000 and e["wait_ns"] == 0
    assert found[0].at_stake_ns == 3 * 2_000_000
    assert "bucket_cap_mb below the gradients' size (its gradients are 8.00 MiB)" in found[0].text


def test_waiting_for_a_late_rank_is_no_bucket_finding():
    """Rank 1 arrives 3 ms late: rank 0's all-reduce runs 3.04 ms, 3 ms of it waiting; 40 us
    of transfer is under 5% of the step: the straggler's finding, not this one."""
    late = [_ddp_rank(0, 0, 3_040_000, 8 * 2**20), _ddp_rank(1, 3_000_000, 40_000, 8 * 2**20)]
    assert not _ddp_found(late)


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["ddp-2gpu-equal-torch",
                                    *(pytest.param(f, marks=pytest.mark.slow)  # every finding of a job each: the rule, again
                                      for f in ("tp-2gpu-late-torch", "ddp-2gpu-late-nsys", "train-2gpu-torch"))])
def test_no_ddp_finding_where_the_exposure_is_waiting(folder):
    """Our 2-GPU runs: the all-reduce's exposed time is the wait for the other rank (one 5.6 MB
    bucket takes 39 us once both arrive), or a TP decode with no backward."""
    assert not _by_fix(_found(DATA / folder), "gradient all-reduce")


@pytest.mark.slow
@pytest.mark.shared
def test_no_ddp_finding_from_one_rank_of_the_job():
    """HTA's rank 0 of 2, DDP with 5 buckets per step, 84% exposed: how much is waiting for rank
    1 this input cannot tell, so no bucket advice."""
    path = shared_trace("hta/nccl_parser_config/nccl_data.json.gz")
    assert not _by_fix(_found(path), "gradient all-reduce")


# ---- host-bound steps of short kernels: CUDA graphs ------------------------------------------------


def _short_kernels(path) -> tuple[int, int]:
    """(kernels launched one by one, those shorter than their launch call), from the JSON: each
    kernel's launch call by correlation id."""
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    launches = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = e
    kernels = [e for e in events if e.get("cat") == "kernel" and e["args"].get("correlation") in launches]
    ts = [launches[k["args"]["correlation"]]["ts"] for k in kernels]
    alone = [k for k, t in zip(kernels, ts) if ts.count(t) == 1]
    return len(alone), sum(round(k["dur"] * 1000) < round(launches[k["args"]["correlation"]]["dur"] * 1000)
                           for k in alone)


@pytest.mark.slow
def test_host_bound_short_kernels_name_cuda_graphs(capsys):
    from helpers import run_cli_output
    folder = DATA / "idle-1gpu-small-torch"
    found = _by_fix(_found(folder), "reduce-overhead")
    assert len(found) == 1
    launched, short = _short_kernels(folder / "rank0.pt.trace.json.gz")
    e = found[0].evidence
    assert (e["launched"], e["short_kernels"]) == (launched, short)
    status, out, _ = run_cli_output(capsys, "idle", str(folder), "--format", "json")
    steps = [s for s in json.loads(out)["steps"] if s["bound"] == "host"]
    stake = [s["idle_host_ns"] + s["idle_launch_ns"] for s in steps]
    # the total a sum, the figure per step their median over the host-bound steps
    assert e["stake_ns"] == sum(stake) and e["stake_ns_per_step"] == pytest.approx(statistics.median(stake))
    # the what-if's saving, in the user's time where the replay predicts the step without the profiler
    w = e["whatif"]
    user = w.get("unprofiled_saving_ns")
    assert found[0].at_stake_ns == int((w["saving_ns_per_step"] if user is None else user) * w["steps"])
    # the replay's saving replaces the idle's bound (which leaves out the eager queue's gaps between kernels)
    assert e["bound_text"] == f"; at most {statistics.median(stake) / 1e6:,.1f} ms per step of {e['span_ns_per_step'] / 1e6:,.1f} " \
        "ms to gain (the GPU's idle before and during launches, an upper bound)"
    assert e["bound_text"] not in found[0].text and "what if the host issued work as fast" in found[0].text


@slow_after(1)
@pytest.mark.parametrize("folder", ["idle-1gpu-large-torch", "idle-1gpu-large-nsys", "decode-1gpu-proton"])
def test_no_graphs_finding_on_gpu_bound_or_untimed_steps(folder):
    assert not _by_fix(_found(DATA / folder), "reduce-overhead")


@pytest.mark.slow
def test_replayed_kernels_are_not_counted_as_launched_one_by_one():
    """graph-1gpu-torch: each step replays a 20-kernel graph (one cudaGraphLaunch) beside its eager
    run: the replayed kernels share their launch call and stay out of the short-kernel count."""
    found = _by_fix(_found(DATA / "graph-1gpu-torch"), "reduce-overhead")
    launched, short = _short_kernels(DATA / "graph-1gpu-torch" / "rank0.pt.trace.json.gz")
    assert found and (found[0].evidence["launched"], found[0].evidence["short_kernels"]) == (launched, short)
    assert found[0].evidence["replayed"] == 100


def _odd_copy(tmp_path, n: int):
    """roofline-1gpu-torch with the bf16 8192^3 mm's second operand recorded as [8192, n] (its
    kernels' times are the real ones): a hand-made shape on a real trace."""
    folder = DATA / "roofline-1gpu-torch"
    with gzip.open(folder / "rank0.pt.trace.json.gz") as f:
        trace = json.load(f)
    ids = set()
    for e in trace["traceEvents"]:
        args = e.get("args") or {}
        if e.get("cat") == "cpu_op" and e["name"] == "aten::mm" and args.get("Input Dims") == [[8192, 8192], [8192, 8192]] \
                and args.get("Input type", [""])[0] == "c10::BFloat16":
            args["Input Dims"] = [[8192, 8192], [8192, n]]
            ids.add(args["External id"])
    out = tmp_path / "run"
    out.mkdir()
    (out / "rank0.pt.trace.json").write_text(json.dumps(trace))
    kernel_ns = sum(round(e["dur"] * 1000) for e in trace["traceEvents"]
                    if e.get("cat") == "kernel" and e["args"].get("External id") in ids)
    return out, kernel_ns


def test_odd_gemm_shape_names_the_dimension_and_its_padding(tmp_path):
    run, kernel_ns = _odd_copy(tmp_path, 8190)
    found = _by_fix(_found(run), "no multiple of 16 bytes")
    assert len(found) == 1 and kernel_ns > 0
    shape = found[0].evidence["odd_shapes"][0]
    assert (shape["m"], shape["n"], shape["k"], shape["dtype"], shape["odd"]) == (8192, 8190, 8192, "bf16", ["N"])
    assert shape["dur_ns"] == kernel_ns == found[0].at_stake_ns and shape["calls"] == 5
    assert "N = 8,190 -> 8,192" in found[0].text


@pytest.mark.slow
def test_even_gemm_shapes_are_no_finding(tmp_path):
    run, _ = _odd_copy(tmp_path, 8192 - 64)  # a multiple of 8: aligned
    assert not _by_fix(_found(run), "no multiple of 16 bytes")
    assert tracelab_meta(run).odd_gemms == []


def tracelab_meta(run):
    import tracelab
    return tracelab.load(run / "rank0.pt.trace.json").meta


@pytest.mark.parametrize("size, multiple, to", [(8190, 8, 8192), (50257, 8, 50304), (5, 4, 8), (5, 8, 8),
                                                (100, 8, 104), (1000, 4, 1024), (3, 4, 4)])
def test_padding_adds_little_work(size, multiple, to):
    from tracelab.reports.fixes.gemm import PAD_GROWTH, padded
    assert padded(size, multiple) == to and to % multiple == 0
    assert to - size <= max(PAD_GROWTH * size, multiple - 1)


def test_a_tiny_odd_dimension_is_padded_to_its_alignment_not_64():
    """HTA's MI250 toy: aten::mm of [128, 5] x [5, 128] fp32 (read from the raw JSON). K = 5 -> 64
    was advised (12.8x the GEMM's work); fp32 needs multiples of 4: 8."""
    path = shared_trace("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    with gzip.open(path, "rt") as f:
        mm = [e["args"] for e in json.load(f)["traceEvents"] if e.get("name") == "aten::mm"]
    assert [a["Input Dims"] for a in mm] == [[[128, 5], [5, 128]]] and mm[0]["Input type"][0] == "float"
    found = _by_fix(_found(path), "no multiple of 16 bytes")
    assert len(found) == 1 and "K = 5 -> 8)" in found[0].text and "-> 64" not in found[0].text


def _kernels_per_step_by_launch(path) -> dict[str, tuple[int, int]]:
    """Per 'token N' range of a Kineto trace: (kernels launched inside it, of them by cudaGraphLaunch),
    the launch found by correlation id, straight from the JSON."""
    with gzip.open(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if e.get("cat") == "user_annotation" and re.fullmatch(r"token \d+", e["name"])]
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    out = {}
    for s in steps:
        inside = [calls[k["args"]["correlation"]] for k in events if k.get("cat") == "kernel"
                  and (c := calls.get(k["args"].get("correlation"))) and s["ts"] <= c["ts"] <= s["ts"] + s["dur"]]
        out[s["name"]] = (len(inside), sum(c["name"] == "cudaGraphLaunch" for c in inside))
    return out


def test_steps_that_replay_cuda_graphs_are_not_told_to_use_them():
    """The compiled decode's 'token N' steps each replay one CUDA graph (reduce-overhead) and launch
    a few kernels beside it; the eager prefill outside them launches the rest one by one. Over the
    trace half the kernels are replayed (150 of 301), so the advice to 'capture the step in a CUDA
    graph' fired on steps that are graph replays already; it now weighs the host-bound steps' own
    kernels."""
    path = DATA / "decode-1gpu-steps-torch" / "rank0.pt.trace.json.gz"
    per_step = _kernels_per_step_by_launch(path)
    assert len(per_step) == 5 and all(replayed > 0.5 * n for n, replayed in per_step.values())
    assert not _by_fix(_found(path.parent), "CUDA graph")
    whole = _by_fix(_found(DATA / "decode-1gpu-torch"), "CUDA graph")  # no steps: the eager prefill dominates
    assert len(whole) == 1 and "is host-bound over the whole trace, which has no steps" in whole[0].text
