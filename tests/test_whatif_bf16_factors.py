"""autocast:bf16=@FILE: each product by its own factor and added time from a factors file, autocast's
dispatch per recorded CPU operator, factors of another device refused; checked against the plain
autocast:bf16=F scenario and the host frame's own operators."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tracelab.core.errors import UsageError
from tracelab.reports.whatif.analyse import whatif
from tracelab.reports.whatif.bf16_factors import FORMAT
from tracelab.reports.whatif.nodes import rank_graph

from helpers import host_rows, kernel_rows

# (name, scope, dur): launched at 0, 100, 200, 300 (10 ns calls), each kernel 20 ns after its call
KERNELS = [("vectorized_elementwise_add", "forward", 10), ("sm80_xmma_gemm_f32f32_tn", "forward", 40),
           ("sm80_xmma_gemm_f32f32_nn", "backward", 40), ("vectorized_elementwise_mul", "backward", 10)]
LAUNCH_AT, LAUNCH_NS, START_AFTER = (0, 100, 200, 300), 10, 20
PRODUCTS = [(name, dur) for name, _, dur in KERNELS if "gemm" in name]


def _graph(cpu_ops: bool = False):
    events = kernel_rows([(name, 7, at + START_AFTER, dur, at, LAUNCH_NS) for (name, _, dur), at in zip(KERNELS, LAUNCH_AT)])
    events["scope"] = [scope for _, scope, _ in KERNELS]
    rows = [("step", "step 0", 0, 1000)]
    if cpu_ops:  # one operator inside each launch call: the profiler recorded it there
        rows += [("cpu_op", "aten::add", at + 1, 5) for at in LAUNCH_AT]
    return rank_graph(events, host_rows(rows), 0)


def _file(tmp_path, products, default=1.0, device="cuda", dispatch=None, name="f.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"format": FORMAT, "device": device, "machine": "test GPU", "measured_at": "now",
                                "default": default, "products": products, "dispatch_ns_per_op": dispatch,
                                "dispatch_machine": "test GPU" if dispatch is not None else None}))
    return path


def _predicted(g, spec: str) -> float:
    return float(whatif({0: g}, {0: None}, [spec]).scenarios.iloc[0]["predicted_ns"])


def _scale_by(factor: float):
    """The kernels made `factor` times as long, each product's long enough to decide the step."""
    return [(n, s, d * factor if "gemm" in n else d) for n, s, d in KERNELS]


@pytest.mark.parametrize("factor", [0.5, 3.0, 40.0])
def test_listed_and_default_factors_match_one_factor_for_all(tmp_path, factor: float) -> None:
    g = _graph()
    listed = [{"rank": 0, "name": PRODUCTS[0][0], "index": 0, "factor": factor}]  # the other at the default
    path = _file(tmp_path, listed, default=factor)
    assert _predicted(g, f"autocast:bf16=@{path}") == pytest.approx(_predicted(g, f"autocast:bf16={factor}"))


@pytest.mark.parametrize("factor", [3.0, 40.0])
def test_added_ns_is_the_products_own_time_times_the_factor_less_one(tmp_path, factor: float) -> None:
    g = _graph()
    # added = dur * (factor - 1), from the kernels' own durations: the same step as scaling them
    listed = [{"rank": 0, "name": n, "index": 0, "factor": 1.0, "added_ns": d * (factor - 1)} for n, d in PRODUCTS]
    path = _file(tmp_path, listed, default=1000.0)  # a product missed would take 1000x
    assert _predicted(g, f"autocast:bf16=@{path}") == pytest.approx(_predicted(g, f"autocast:bf16={factor}"))


def test_a_product_not_listed_takes_the_default_and_the_note_counts_it(tmp_path) -> None:
    g = _graph()
    path = _file(tmp_path, [{"rank": 0, "name": PRODUCTS[1][0], "index": 5, "factor": 1.0}], default=40.0)  # no 6th
    w = whatif({0: g}, {0: None}, [f"autocast:bf16=@{path}"])
    assert w.scenarios.iloc[0]["predicted_ns"] == pytest.approx(_predicted(g, "autocast:bf16=40"))
    note = next(n for n in w.notes if n.code == "autocast_factors")
    assert (note.values["listed"], note.values["products"]) == (0, len(PRODUCTS))
    assert "test GPU" in note.text and "left out" in note.text


def test_dispatch_adds_its_cost_to_each_recorded_cpu_operator(tmp_path) -> None:
    g = _graph(cpu_ops=True)
    dispatch_ns = 50.0
    without = _predicted(g, f"autocast:bf16=@{_file(tmp_path, [], default=1.0)}")
    with_dispatch = _predicted(g, f"autocast:bf16=@{_file(tmp_path, [], default=1.0, dispatch=dispatch_ns, name='d.json')}")
    # host-bound: every launch is issued later by the dispatch of the operators recorded up to it, but
    # the first: the replay starts it where the trace did (what came before it is before the step)
    ops = len(LAUNCH_AT) - 1
    assert with_dispatch - without == pytest.approx(ops * dispatch_ns)
    notes = whatif({0: g}, {0: None}, [f"autocast:bf16=@{tmp_path / 'd.json'}"]).notes
    assert "50 ns to each CPU operator" in next(n.text for n in notes if n.code == "autocast_factors")
    assert "dispatch" not in next(n.text for n in notes if n.code == "autocast_model").split("are not")[0]


def test_factors_of_another_device_are_refused(tmp_path) -> None:
    path = _file(tmp_path, [], device="cpu")
    with pytest.raises(UsageError, match="factors measured on cpu .* do not fit a GPU trace"):
        whatif({0: _graph()}, {0: None}, [f"autocast:bf16=@{path}"])


@pytest.mark.parametrize("content", ["not json", json.dumps({"format": "other"}), json.dumps([1]),
                                     json.dumps({"format": FORMAT, "device": "tpu", "default": 1}),
                                     json.dumps({"format": FORMAT, "device": "cpu", "default": float("nan")}),
                                     json.dumps({"format": FORMAT, "device": "cpu", "default": 1, "products": [
                                         {"rank": 0, "name": "x", "index": 0, "factor": -1}]}),
                                     json.dumps({"format": FORMAT, "device": "cpu", "default": 1, "products": [
                                         {"rank": 0, "name": "x", "index": 0, "factor": 1, "added_ns": "a"}]}),
                                     json.dumps({"format": FORMAT, "device": "cpu", "default": 1,
                                                 "dispatch_ns_per_op": -5}),
                                     json.dumps({"format": FORMAT, "device": "cpu", "default": 1, "products": [
                                         {"name": "x", "factor": 1}]}),  # no rank, no index
                                     json.dumps({"format": FORMAT, "device": "cpu", "default": 1, "products": [5]}),
                                     json.dumps({"format": FORMAT, "device": "cpu", "default": 1, "products": {"a": 1}})])
def test_broken_factors_files_are_refused_in_one_line(tmp_path, content: str) -> None:
    from tracelab.reports.whatif.scenarios import parse

    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(UsageError, match=str(path).replace(".", r"\.")):
        parse(f"autocast:bf16=@{path}")
    with pytest.raises(UsageError, match="cannot read"):
        parse(f"autocast:bf16=@{tmp_path / 'missing.json'}")


def test_index_counts_a_name_within_its_rank_and_step() -> None:
    from tracelab.reports.whatif.bf16_factors import step_index

    rank = np.array([0, 0, 0, 1, 0, 0])
    step = np.array([1, 1, 1, 1, 2, 1])
    name = np.array(["a", "b", "a", "a", "a", "a"], dtype=object)
    start = np.array([30, 10, 10, 5, 1, 50])
    # rank 0 step 1 "a": starts 10, 30, 50 -> 0, 1, 2; the rest first of their own
    assert step_index(rank, step, name, start).tolist() == [1, 0, 0, 0, 0, 2]
