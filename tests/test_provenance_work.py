"""Inductor's own estimate of each Triton kernel's work (issue 28): read from the generated
code at compile time into the provenance map (workloads/provenance.kernel_work), given to the
kernels' rows at load (tracelab/provenance.with_work), and read from a Kineto trace whose
launch ranges carry it (parsers/_shapes.py)."""
from __future__ import annotations

import gzip
import json
import shutil

import numpy as np
import pandas as pd
import pytest

import tracelab
from tracelab.ingest import provenance
from tracelab.core.errors import TraceFormatError

from helpers import DATA, shared_trace
from helpers import run_cli_output
from helpers import LazyModule, needs

# imports torch: imported by the tests that use it, not at collection (helpers.LazyModule says why)
compile_time = LazyModule("tracelab.workloads.provenance")

CPU_RUN = DATA / "decode-compile-cpu-torch"  # tiny Llama: dim 128, 16 heads of 8, 8 KV heads, ffn 256, fp32

# Two kernels as Inductor writes them into its output code under benchmark_kernel (the format
# of torch/_inductor/codegen/triton.py: size_hints, triton_meta's signature, inductor_meta),
# shortened; the second's estimate as Python prints a small float, with an exponent.
Q = "'" * 3
OUTPUT_CODE = f"""
triton_red_fused_mm_0 = async_compile.triton('triton_red_fused_mm_0', {Q}
@triton_heuristics.reduction(
    size_hints={{'x': 4096, 'r0_': 4096}},
    triton_meta={{'signature': {{'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'out_ptr0': '*bf16', 'xnumel': 'i32'}}}},
    inductor_meta={{'kernel_name': 'triton_red_fused_mm_0', 'mutated_arg_names': [], 'kernel_num_gb': 0.033562624, 'kernel_flop': 33554432}}
)
@triton.jit
def triton_red_fused_mm_0(in_ptr0, in_ptr1, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):
    pass
{Q}, device_str='cuda')

triton_poi_fused_add_1 = async_compile.triton('triton_poi_fused_add_1', {Q}
@triton_heuristics.pointwise(
    size_hints={{'x': 128}},
    triton_meta={{'signature': {{'in_out_ptr0': '*fp32', 'in_ptr0': '*fp32', 'in_ptr1': '*bf16', 'xnumel': 'i32'}}}},
    inductor_meta={{'kernel_name': 'triton_poi_fused_add_1', 'kernel_num_gb': 1.28e-06, 'kernel_flop': 0}},
)
@triton.jit
def triton_poi_fused_add_1(in_out_ptr0, in_ptr0, in_ptr1, xnumel, XBLOCK : tl.constexpr):
    pass
{Q}, device_str='cuda')

cpp_fused_mul_2 = async_compile.cpp_pybinding(['float*', 'const float*'], r{Q}
extern "C" void kernel(float* in_out_ptr0, const float* in_ptr0) {{ }}
{Q})
"""


@needs("torch")
def test_kernel_work_reads_inductor_meta():
    work = compile_time.kernel_work(OUTPUT_CODE)
    assert work == {"triton_red_fused_mm_0": {"bytes": 33_562_624, "flops": 33_554_432, "dtype": "bf16"},
                    "triton_poi_fused_add_1": {"bytes": 1_280, "dtype": "fp32"}}  # flop 0: none counted


@needs("torch")
def test_kernel_work_needs_benchmark_kernel():
    """Without benchmark_kernel Inductor writes no kernel_num_gb: the kernel is left out, not zero."""
    assert compile_time.kernel_work(OUTPUT_CODE.replace("'kernel_num_gb'", "'other'")) == {}


# ---- a CPU capture with a hand-checked map -----------------------------------------------------

# per call, from the tiny model's shapes (fp32, 4 bytes):
#  cpp_fused__unsafe_view_mul_silu_4: silu(w1 x) * w3 x over [1, 256]: reads 2 x 256, writes 256
#  the attention kernel: QK^T and PV over 16 heads of 8 against a KV cache of 16 positions
#   (prompt 8 + 6 new tokens, rounded up to 8): 2 x 2 x 16 x 16 x 8 FLOPs
SILU = "cpp_fused__unsafe_view_mul_silu_4"
ATTENTION = ("cpp_fused__safe_softmax__unsafe_view_add_bmm_clone_expand_index_index_put_mul_scalar_tensor_select_"
             "split_with_sizes_stack_sub_transpose_unsqueeze_view_where_2")
HAND_WORK = {SILU: {"bytes": 3 * 256 * 4, "dtype": "fp32"}, ATTENTION: {"flops": 2 * 2 * 16 * 16 * 8}}


def _with_map(tmp_path, work) -> tracelab.core.schema.Profile:
    run = tmp_path / "run"
    shutil.copytree(CPU_RUN, run)
    mapping = json.loads((run / "rank0.provenance.json").read_text())
    (run / "rank0.provenance.json").write_text(json.dumps({**mapping, "version": 2, "work": work}))
    return tracelab.load(run / "rank0.pt.trace.json.gz")


def _calls(name: str) -> int:
    with gzip.open(CPU_RUN / "rank0.pt.trace.json.gz") as f:
        events = json.load(f)["traceEvents"]
    return sum(1 for e in events if e.get("name") == f"graph_0_{name}")


def test_map_work_goes_to_its_kernels_rows(tmp_path):
    events = _with_map(tmp_path, HAND_WORK).events
    silu = events[events["name"] == f"graph_0_{SILU}"]
    attention = events[events["name"] == f"graph_0_{ATTENTION}"]
    assert len(silu) == _calls(SILU) > 0 and int(silu["count"].sum()) == _calls(SILU)
    assert silu["bytes"].sum() == 3072 * _calls(SILU) and (silu["dtype"] == "fp32").all()
    assert silu["flops"].isna().all()  # none in the map: unknown, not zero
    assert attention["flops"].sum() == 8192 * _calls(ATTENTION) and attention["bytes"].isna().all()
    rest = events[~events.index.isin(silu.index.union(attention.index))]
    plain = tracelab.load(CPU_RUN / "rank0.pt.trace.json.gz").events
    pd.testing.assert_series_equal(rest["bytes"], plain.loc[rest.index, "bytes"])


def test_a_version_1_map_changes_no_work():
    plain = tracelab.load(CPU_RUN / "rank0.pt.trace.json.gz").events
    assert plain["bytes"].isna().sum() > 0
    assert provenance.read_work(CPU_RUN / "rank0.provenance.json") == {}


def test_the_trace_s_own_work_wins():
    events = pd.DataFrame({"name": ["k", "k", "graph_0_k"], "count": [1, 3, 2], "flops": [5.0, np.nan, np.nan],
                           "bytes": [np.nan, 7.0, np.nan], "dtype": pd.array(["", "bf16", ""], dtype="string")})
    out = provenance.with_work(events, {"k": {"bytes": 100, "flops": 10, "dtype": "fp32"}})
    assert out["flops"].tolist() == [5.0, 30.0, 20.0]
    assert out["bytes"].tolist() == [100.0, 7.0, 200.0]
    assert out["dtype"].tolist() == ["fp32", "bf16", "fp32"]


@pytest.mark.parametrize("work", [{SILU: {"bytes": -1}}, {SILU: {"flops": "many"}}, {SILU: 5},
                                  {SILU: {"bytes": True}}, {SILU: {"dtype": 16}}, [1], None])
def test_bad_work_names_the_file(tmp_path, capsys, work):
    with pytest.raises(TraceFormatError, match="provenance"):
        _with_map(tmp_path, work)
    status, _, err = run_cli_output(capsys, "breakdown", str(tmp_path / "run"))
    assert status == 2 and "rank0.provenance.json" in err and len(err.strip().splitlines()) == 1


# ---- a Kineto trace whose Triton launch ranges carry the estimate ---------------------------------


def test_kineto_launch_range_work(tmp_path):
    """HTA's Inductor example (a triton_poi_fused_add_cos_sin_0 over [10, 10] fp32 tensors), its
    launch range given the two args torch writes under benchmark_kernel: 3 x 100 x 4 bytes."""
    with gzip.open(shared_trace("hta/triton_example/triton_example.json.gz")) as f:
        trace = json.load(f)
    for e in trace["traceEvents"]:
        if e.get("cat") == "cpu_op" and e.get("name") == "triton_poi_fused_add_cos_sin_0":
            e["args"].update(kernel_num_gb=1.2e-06, kernel_flop=0)
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(trace))
    events = tracelab.load(path).events
    row = events[events["name"] == "triton_poi_fused_add_cos_sin_0"]
    assert len(row) == 1 and row["bytes"].iloc[0] == pytest.approx(1200) and np.isnan(row["flops"].iloc[0])


@pytest.mark.slow
def test_the_recorder_sees_inductor_s_output_code(tmp_path):
    """A CPU compile (in its own process: record() sets Inductor's global config): the handler gets
    the generated code, and a C++ kernel has no work to give."""
    import subprocess
    import sys
    code = f"""
import json, torch
from pathlib import Path
import tracelab.workloads.provenance as P
seen = []
real = P.kernel_work
P.kernel_work = lambda code: (seen.append(code), real(code))[1]
recorder = P.record(Path({str(tmp_path)!r}), 0)
torch.compile(lambda x: (x * 2 + 1).sum(), fullgraph=True)(torch.randn(64))
written = json.loads(recorder.write().read_text())
print(json.dumps({{"codes": len(seen), "cpp": sum("cpp_fused" in c for c in seen), "work": written["work"],
                  "version": written["version"]}}))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"codes": 1, "cpp": 1, "work": {}, "version": 2}
