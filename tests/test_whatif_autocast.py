"""autocast:bf16=F: the matrix products scaled, the casts autocast adds at the trace's own host and
device time per op; on a host-bound step the casts, not the products, decide the step."""
from __future__ import annotations

import numpy as np
import pytest

from tracelab.core.errors import UsageError
from tracelab.reports.whatif.analyse import whatif
from tracelab.reports.whatif.nodes import rank_graph
from tracelab.reports.whatif.autocast import CASTS_PER_PRODUCT
from tracelab.reports.whatif.scenarios import parse

from helpers import host_rows, kernel_rows

# (name, scope): launched at 0, 100, 200, 300 (10 ns calls), each kernel 20 ns after its call
KERNELS = [("vectorized_elementwise_add", "forward", 10), ("sm80_xmma_gemm_f32f32_tn", "forward", 40),
           ("sm80_xmma_gemm_f32f32_nn", "backward", 40), ("vectorized_elementwise_mul", "backward", 10)]
LAUNCH_AT, LAUNCH_NS, START_AFTER = (0, 100, 200, 300), 10, 20


def _step(kernels=KERNELS):
    events = kernel_rows([(name, 7, at + START_AFTER, dur, at, LAUNCH_NS)
                          for (name, _, dur), at in zip(kernels, LAUNCH_AT)])
    events["scope"] = [scope for _, scope, _ in kernels]
    host = host_rows([("step", "step 0", 0, 1000)])
    return rank_graph(events, host, 0), events


def _is_product(name: str) -> bool:
    return "gemm" in name


def test_casts_add_the_hosts_time_per_issued_op_before_each_product() -> None:
    g, events = _step()
    factor = 0.5
    w = whatif({0: g}, {0: None}, [f"autocast:bf16={factor}"])
    products = [k for k in KERNELS if _is_product(k[0])]
    forward = [k for k in products if k[1] == "forward"]
    casts = CASTS_PER_PRODUCT * len(forward) * 2  # a training step: each cast's gradient cast back
    # the host's time per issued op: a call and the gap before it (the first has none)
    gaps = np.diff(LAUNCH_AT) - LAUNCH_NS
    host_ns = float(np.median(np.r_[LAUNCH_NS, gaps + LAUNCH_NS]))
    # host-bound: the step grows by the casts' host time (the products, halved and with their casts'
    # kernels, still fit in the gaps)
    step_ns = int((events["start_ns"] + events["dur_ns"]).max())
    row = w.scenarios.iloc[0]
    assert row["step_ns"] == step_ns
    assert row["predicted_ns"] == pytest.approx(step_ns + casts * host_ns)
    device_ns = float(np.median([d for n, _, d in KERNELS if not _is_product(n)]))
    assert all(d * factor + casts / len(products) * device_ns < gaps.min() for n, _, d in products)
    assert any(n.code == "autocast_model" for n in w.notes)


def test_without_backward_products_each_forward_product_casts_its_inputs_once() -> None:
    kernels = [(n, "forward", d) for n, _, d in KERNELS]
    g, events = _step(kernels)
    w = whatif({0: g}, {0: None}, ["autocast:bf16=1"])
    casts = CASTS_PER_PRODUCT * sum(_is_product(n) for n, _, _ in kernels)
    host_ns = float(np.median(np.r_[LAUNCH_NS, np.diff(LAUNCH_AT)]))
    step_ns = int((events["start_ns"] + events["dur_ns"]).max())
    assert w.scenarios.iloc[0]["predicted_ns"] == pytest.approx(step_ns + casts * host_ns)


def test_a_trace_without_matrix_products_is_unmatched() -> None:
    kernels = [(n, s, d) for n, s, d in KERNELS if not _is_product(n)]
    g, events = _step(kernels)
    w = whatif({0: g}, {0: None}, ["autocast:bf16=0.5"])
    assert w.scenarios.iloc[0]["predicted_ns"] == w.scenarios.iloc[0]["step_ns"]
    assert any(n.code == "scenario_unmatched" for n in w.notes)


@pytest.mark.parametrize("spec", ["autocast", "autocast:bf16", "autocast:fp16=0.5", "autocast:bf16=x",
                                  "autocast:bf16=-1", "cuda-graph:x"])
def test_bad_autocast_and_cuda_graph_specs_are_refused(spec: str) -> None:
    with pytest.raises(UsageError):
        parse(spec)
