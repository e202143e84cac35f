"""tracelab roofline (issue 20): FLOPs and bytes from the trace itself, checked against the
shapes the capture script knew and against raw walks of the files; the device's roofs."""
from __future__ import annotations

import functools
import gzip
import json
import math
import sqlite3

import numpy as np
import pandas as pd
import pytest

import tracelab
from tracelab.ingest import runfolder
from tracelab.core import devices
from tracelab.core.errors import UsageError
from tracelab.reports.roofline.roofline import roofline, with_scope_work

from helpers import DATA, run_cli_output, shared_trace, strict_json

SHAPES = DATA / "roofline-1gpu-torch"
EXPECTED = json.loads((SHAPES / "expected.results.json").read_text())["regions"]
H100 = devices.by_option("H100")


def _raw_kernels_by_region() -> dict[str, list[float]]:
    """Kernel durations (us) per user_annotation region, walked from the raw JSON: kernel ->
    its launching cpu_op (External id) -> the region around that op's start."""
    trace = json.load(gzip.open(SHAPES / "rank0.pt.trace.json.gz"))
    events = trace["traceEvents"]
    op_ts = {e["args"]["External id"]: e["ts"] for e in events if e.get("cat") == "cpu_op"}
    regions = [e for e in events if e.get("cat") == "user_annotation"]
    out: dict[str, list[float]] = {}
    for e in events:
        if e.get("cat") != "kernel":
            continue
        ts = op_ts[e["args"]["External id"]]
        region = next(r["name"] for r in regions if r["ts"] <= ts < r["ts"] + r["dur"])
        out.setdefault(region, []).append(e["dur"])
    return out


@pytest.fixture(scope="module")
def by_scope():
    events = tracelab.load(SHAPES / "rank0.pt.trace.json.gz").events
    return roofline(events, H100, "scope").rows.set_index("key"), events


@pytest.mark.parametrize("region", ["gemm_square_bf16", "gemm_square_fp32", "gemm_skinny_bf16", "linear_bf16",
                                   "bmm_bf16", "gemv_bf16", "sdpa_bf16"])
def test_flops_equal_2mnk_and_rates_equal_flops_over_raw_kernel_time(by_scope, region):
    rows, _ = by_scope
    expected = EXPECTED[region]
    assert rows.loc[region, "flops"] == expected["flops"] * expected["calls"]  # exactly: integer shapes
    raw_s = sum(_raw_kernels_by_region()[region]) / 1e6
    assert rows.loc[region, "tflop_s"] == pytest.approx(expected["flops"] * expected["calls"] / raw_s / 1e12, rel=0.01)


@pytest.mark.parametrize("region", ["gemm_square_bf16", "gemm_square_fp32", "gemm_skinny_bf16", "linear_bf16",
                                    "bmm_bf16", "add_bf16", "gelu_bf16", "sum_fp32", "sdpa_bf16", "fill_zero"])
def test_bytes_equal_the_tensors_read_and_written(by_scope, region):
    _, events = by_scope
    expected = EXPECTED[region]
    kernels = events[(events["scope"] == region) & (events["kind"] == "kernel")]  # not cuBLAS's workspace memsets
    assert kernels["bytes"].sum() == pytest.approx(expected["bytes"] * expected["calls"], rel=1e-12)


@pytest.mark.parametrize("region, bound", [("gemm_square_bf16", "compute"), ("gemm_square_fp32", "compute"),
                                           ("linear_bf16", "compute"), ("sdpa_bf16", "compute"),
                                           ("gemv_bf16", "memory"), ("gemm_skinny_bf16", "memory"),
                                           ("add_bf16", "memory"), ("copy_h2d", "memory"), ("copy_d2d", "memory")])
def test_bound_against_the_h100_ridge(by_scope, region, bound):
    rows, _ = by_scope
    assert rows.loc[region, "bound"] == bound


def test_lost_time_is_time_beyond_the_roof_and_sorted(by_scope):
    rows, events = by_scope
    gemm = rows.loc["gemm_square_bf16"]
    least_ns = gemm["flops"] / 989.4e3  # H100 SXM dense bf16: 989.4 TFLOP/s = 989.4e3 FLOP/ns
    kernel_ns = events[(events["scope"] == "gemm_square_bf16") & (events["kind"] == "kernel")]["dur_ns"].sum()
    memset = rows.loc["gemm_square_bf16", "dur_ns"] - kernel_ns  # cuBLAS's workspace memsets: own bytes
    assert gemm["roofline_frac"] == pytest.approx(gemm["min_ns"] / gemm["dur_ns"])
    assert gemm["min_ns"] == pytest.approx(least_ns, rel=1e-3) or gemm["min_ns"] > least_ns
    assert 0 <= memset < 0.01 * gemm["dur_ns"]
    lost = rows["lost_ns"].dropna().to_numpy()
    assert (np.diff(lost) <= 0).all()


def _copy_bytes(kind: str) -> float:
    """Bytes of the capture's memcpy events of one kind ("DtoD", "HtoD"), from the raw JSON."""
    events = json.load(gzip.open(SHAPES / "rank0.pt.trace.json.gz"))["traceEvents"]
    return float(sum(e["args"]["bytes"] for e in events if e.get("cat") == "gpu_memcpy" and kind in e["name"]))


@pytest.mark.parametrize("source", ["rank0.pt.trace.json.gz", "rank0.sqlite"])
def test_copies_count_gb_s_as_the_roof_does(source):
    """One convention per column (issue 28): GB/s is the traffic the roof fraction counts, a
    device-to-device copy read plus written, so GB/s / bandwidth is the fraction of the roof."""
    folder = SHAPES if source.endswith("gz") else DATA / "roofline-1gpu-nsys"
    rows = roofline(tracelab.load(folder / source).events, H100, "kernel").rows.set_index("key")
    h2d, d2d = rows.loc["Memcpy HtoD"], rows.loc["Memcpy DtoD"]
    if source.endswith("gz"):
        assert d2d["bytes"] == 2 * _copy_bytes("DtoD") and h2d["bytes"] == _copy_bytes("HtoD")
    assert h2d["min_ns"] == pytest.approx(h2d["bytes"] / H100.host_link_gb_s)
    assert d2d["min_ns"] == pytest.approx(d2d["bytes"] / H100.hbm_gb_s)  # read and written
    assert d2d["gb_s"] / H100.hbm_gb_s == pytest.approx(d2d["roofline_frac"])
    assert h2d["gb_s"] / H100.host_link_gb_s == pytest.approx(h2d["roofline_frac"])


def test_unknown_work_is_unknown_not_zero():
    events = tracelab.load(DATA / "roofline-1gpu-nsys" / "rank0.sqlite").events
    result = roofline(events, H100, "kernel")
    kernels = result.rows[result.rows["key"].str.contains("nvjet")]
    assert len(kernels) and kernels["bytes"].isna().all() and kernels["lost_ns"].isna().all()
    assert (kernels["bound"] == "unknown").all()  # FLOPs from NVTX sizes, but no dtype: no roof
    elementwise = result.rows[result.rows["key"] == "vectorized_elementwise_kernel"]
    assert elementwise["flops"].isna().all() and elementwise["bytes"].isna().all()
    con = sqlite3.connect(DATA / "roofline-1gpu-nsys" / "rank0.sqlite")
    copies = con.execute("SELECT sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()[0]
    assert events[events["kind"] == "memcpy"]["bytes"].sum() == copies
    assert result.known_ns < result.gpu_ns


def test_proton_scope_metrics_spread_over_the_scope_kernels():
    profile = tracelab.load(DATA / "roofline-1gpu-proton" / "rank0.hatchet")
    metrics = profile.meta.scope_metrics
    events = with_scope_work(profile.events, metrics)
    for scope, m in metrics.items():
        under = events[(events["scope"] == scope) | events["scope"].str.startswith(scope + "/")]
        if not len(under):  # proton timed no kernel there (its copies): the work has nowhere to go
            continue
        if "flops" in m:
            assert under["flops"].sum() == pytest.approx(m["flops"])
        if "bytes" in m:
            assert under["bytes"].sum() == pytest.approx(m["bytes"])
    assert set(events.loc[events["scope"] == "gemm_square_bf16", "dtype"]) == {"16-bit"}


@pytest.mark.slow
def test_decode_gb_s_from_the_trace_agrees_with_the_workload():
    """gpt-fast's 'bandwidth achieved' (weights x tokens/s) against bytes / token span from the trace."""
    folder = DATA / "decode-1b-1gpu-torch"
    results = json.loads((folder / "rank0.results.json").read_text())
    events = tracelab.load(folder / "rank0.pt.trace.json.gz").events
    tokens = events[events["step"].notna()]
    for _, token in tokens.groupby("step"):
        span_ns = (token["start_ns"] + token["dur_ns"]).max() - token["start_ns"].min()
        assert token["bytes"].sum() / span_ns == pytest.approx(results["bandwidth_gb_s"], rel=0.03)
        assert token.loc[token["op_class"] == "gemm", "bytes"].sum() == pytest.approx(results["weight_bytes"], rel=0.01)


@pytest.mark.slow
def test_train_flops_from_the_trace_agree_with_the_workload_mfu():
    folder = DATA / "train-small-1gpu-torch"
    row = json.loads((folder / "run.json").read_text())["results"]["0"]["rows"][0]
    events = tracelab.load(folder / "rank0.pt.trace.json.gz").events
    steps = events[events["step"].notna()].groupby("step")
    for (_, step), step_ms in zip(steps, row["step_ms"]):
        assert step["flops"].sum() / 1e12 == pytest.approx(row["model_tflop_per_step"], rel=0.02)
        span_ms = ((step["start_ns"] + step["dur_ns"]).max() - step["start_ns"].min()) / 1e6
        mfu = step["flops"].sum() / (span_ms * 1e9) / row["peak_tflops"]
        assert mfu == pytest.approx(row["model_tflop_per_step"] * 1e12 / (step_ms * 1e9) / row["peak_tflops"], rel=0.03)


@pytest.mark.parametrize("name, entry", [("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
                                         ("NVIDIA H100 NVL", "H100 NVL"), ("NVIDIA H200", "H200"),
                                         ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
                                         ("NVIDIA B200", "B200"), ("Tesla V100-SXM2-32GB", "V100 SXM2"),
                                         ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S"), ("NVIDIA A10", "A10"),
                                         ("AMD Instinct MI300X", "MI300X")])
def test_device_names_as_cuda_gives_them(name, entry):
    assert devices.detect({"name": name}).name == entry


def test_proton_device_by_arch_and_bandwidth():
    assert devices.detect({"arch": "90", "memory_bandwidth_gb_s": 3352.32}).name == "H100 SXM"
    assert devices.detect({"arch": "90", "memory_bandwidth_gb_s": 4814.0}).name == "H200"
    assert devices.detect({"arch": "75", "memory_bandwidth_gb_s": 320.0}) is None
    assert devices.detect({"type": "HIP", "name": "AMD Radeon Graphics", "arch": "90"}) is None  # gfx90a
    assert devices.detect({"name": "NVIDIA A100-SXM4-80GB"}).name == "A100 SXM 80GB"  # not A10
    with pytest.raises(UsageError):
        devices.by_option("TPU v5")


@pytest.mark.shared
def test_a_device_the_table_lacks_is_unknown_never_its_nearest_kin():
    """A named GPU not in the table (nsys-ai's mock.sqlite: a GeForce RTX 3080, sm_86) and an unnamed
    proton device whose bandwidth is far from every entry of its architecture (Triton's triton.json:
    an sm_86 part of 176 GB/s) are unknown, not the A10 (sm_86, 600 GB/s) they were taken for."""
    mock = shared_trace("nsys-ai/mock.sqlite")
    with sqlite3.connect(f"file:{mock}?mode=ro", uri=True) as db:
        (name,), = db.execute("SELECT name FROM TARGET_INFO_GPU").fetchall()
    assert "RTX 3080" in name and devices.detect({"name": name, "arch": "86", "memory_bandwidth_gb_s": 760.0}) is None
    assert runfolder.meta_device(tracelab.load(mock).meta)[0] is None
    props = json.loads(shared_trace("proton/triton.json").read_text())[1]["CUDA"]["0"]
    gb_s = props["bus_width"] / 8 * props["memory_clock_rate"] * 2 / 1e6  # bits -> bytes, kHz DDR -> GB/s
    assert props["arch"] == "86" and gb_s == pytest.approx(176.0, rel=0.01)
    assert devices.detect({"arch": "86", "memory_bandwidth_gb_s": gb_s}) is None
    assert runfolder.meta_device(tracelab.load(shared_trace("proton/triton.json")).meta)[0] is None
    assert devices.detect({"arch": "86", "memory_bandwidth_gb_s": 600.0 * 1.05}).name == "A10"  # within 10%


def test_cli_json_is_strict_with_the_device_and_rows(capsys):
    status, out, err = run_cli_output(capsys, "roofline", str(DATA / "roofline-1gpu-nsys"), "--format", "json")
    assert status == 0, err
    doc = strict_json(out)
    assert doc["device"]["name"] == "H100 SXM" and doc["device"]["source"] == "trace"
    assert {"kernel", "dur_ns", "tflop_s", "gb_s", "intensity", "bound", "roofline_frac", "lost_ns"} <= set(doc["rows"][0])
    assert any(r["flops"] is None for r in doc["rows"])


def test_cli_device_option_and_peaks(capsys):
    status, out, _ = run_cli_output(capsys, "roofline", str(SHAPES), "--format", "json", "--device", "A100")
    assert status == 0 and strict_json(out)["device"]["name"] == "A100 SXM 80GB"
    status, out, _ = run_cli_output(capsys, "roofline", str(SHAPES), "--format", "json",
                                    "--peak-tflops", "100", "--peak-gb-s", "1000")
    rows = {r["kernel"]: r for r in strict_json(out)["rows"]}
    gemm = rows["nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT"]
    assert gemm["min_ns"] == pytest.approx(gemm["flops"] / 100e3)


@pytest.mark.parametrize("args, says", [(["--peak-tflops", "100"], "together"), (["--device", "Z80"], "unknown device"),
                                        (["--by", "step"], "--by"), (["--peak-tflops", "-1", "--peak-gb-s", "5"], "above 0")])
def test_cli_bad_options_are_one_line(capsys, args, says):
    status, _, err = run_cli_output(capsys, "roofline", str(SHAPES), *args)
    assert status == 2 and len(err.strip().splitlines()) == 1 and says in err


def test_cpu_trace_has_no_roof(capsys):
    status, out, err = run_cli_output(capsys, "roofline", str(DATA / "train-cpu-torch"), "--format", "json")
    assert status == 0, err
    doc = strict_json(out)
    assert doc["device"] is None or doc["device"]["name"] is None
    assert all(r["roofline_frac"] is None for r in doc["rows"])


def test_shape_formulas_by_hand():
    from tracelab.parsers._shapes import op_work

    bf16 = json.dumps(["c10::BFloat16"] * 3)
    flops, moved, dtype = op_work("aten::addmm", json.dumps([[8], [4, 16], [16, 8]]), bf16, "[]")
    assert (flops, moved, dtype) == (2 * 4 * 8 * 16, 2 * (8 + 64 + 128 + 32), "bf16")
    flops, _, _ = op_work("aten::_flash_attention_forward", json.dumps([[2, 128, 8, 64]] * 3), bf16, "[]")
    assert flops == 4 * 2 * 8 * 128 * 128 * 64  # [B, L, H, E]: QK^T and PV
    flops, _, _ = op_work("aten::scaled_dot_product_attention", json.dumps([[2, 8, 128, 64]] * 3 + [[], [], []]),
                          bf16, json.dumps(["", "", "", "", "", "True", ""]))
    assert flops == 4 * 2 * 8 * 128 * 128 * 64 / 2  # causal
    flops, _, _ = op_work("aten::cudnn_convolution", json.dumps([[1, 3, 32, 32], [16, 3, 3, 3], [], [], [], []]),
                          json.dumps(["float", "float"]), json.dumps(["", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"]))
    assert flops == 2 * 16 * 32 * 32 * 3 * 9
    assert all(math.isnan(x) for x in op_work("aten::mm", "[[4]]", bf16, "[]")[:2])  # a bad shape: unknown
    assert math.isnan(op_work("aten::my_op", "[[4]]", bf16, "[]")[0])


def test_report_has_the_roofline_section_with_a_log_log_plot(tmp_path, capsys):
    out = tmp_path / "report.html"
    status, _, err = run_cli_output(capsys, "report", str(SHAPES), "-o", str(out))
    assert status == 0, err
    page = out.read_text()
    assert 'id="roofline"' in page and "work known for 76.726 of 76.726 ms" in page
    figures = json.loads(page.split('id="tracelab-figures">')[1].split("</script>")[0])
    roof = [f for f in figures.values() if f["layout"].get("xaxis", {}).get("title", {}).get("text") == "FLOP per byte"]
    assert len(roof) == 1 and roof[0]["layout"]["yaxis"]["type"] == "log"
    points = roof[0]["data"][0]
    events = tracelab.load(SHAPES / "rank0.pt.trace.json.gz").events
    rows = roofline(events, H100, "kernel").rows
    plotted = rows[rows["intensity"].notna()]
    assert sorted(points["y"]) == sorted(plotted["tflop_s"].round(4).tolist())
    assert any(d.get("name", "").startswith("roof bf16/fp16: 989") for d in roof[0]["data"])


@functools.lru_cache(maxsize=None)
def _proton_scope(folder, by="scope"):
    """The capture's roofline rows by `by`, and its profile: once per test process (the tests only read them)."""
    profile = tracelab.load(DATA / folder / "rank0.hatchet")
    events = with_scope_work(profile.events, profile.meta.scope_metrics)
    return roofline(events, devices.detect(profile.meta.devices[0]), by).rows.set_index("key"), profile


@functools.lru_cache(maxsize=1)
def _torch_scope_rows() -> pd.DataFrame:
    """The same script's roofline rows by scope under torch, once per test process."""
    return roofline(tracelab.load(SHAPES / "rank0.pt.trace.json.gz").events, H100, "scope").rows.set_index("key")


@pytest.mark.parametrize("region", ["gemm_square_bf16", "gemm_square_fp32", "linear_bf16", "bmm_bf16", "sdpa_bf16",
                                    "gemv_bf16", "add_bf16", "gelu_bf16"])
def test_proton_known_shapes_rates_over_raw_kernel_time(region):
    """proton's scope metrics (the script's per-call work, added per entry) over its kernels' time,
    walked from the raw hatchet JSON: the same FLOPs as 2MNK, the same rates as torch within 1%."""
    rows, profile = _proton_scope("roofline-1gpu-proton")
    assert profile.meta.devices[0]["arch"] == "90"
    tree = json.loads((DATA / "roofline-1gpu-proton" / "rank0.hatchet").read_text())[0]
    node = next(c for c in tree["children"] if c["frame"]["name"] == region)
    kernel_ns = sum(k["metrics"]["time (ns)"] for k in node["children"])
    expected = EXPECTED[region]
    if expected.get("flops") and region not in ("add_bf16",):
        assert rows.loc[region, "flops"] == expected["flops"] * expected["calls"]
        assert rows.loc[region, "tflop_s"] == pytest.approx(expected["flops"] * expected["calls"] / kernel_ns / 1e3,
                                                            rel=0.01)
    assert rows.loc[region, "gb_s"] == pytest.approx(expected["bytes"] * expected["calls"] / kernel_ns, rel=0.01)
    torch_rows = _torch_scope_rows()
    if region.startswith(("gemm", "linear", "bmm", "sdpa")):  # the same kernels, another run: within 5%
        assert rows.loc[region, "tflop_s"] == pytest.approx(torch_rows.loc[region, "tflop_s"], rel=0.05)
        assert rows.loc[region, "bound"] == torch_rows.loc[region, "bound"]


def test_our_proton_runs_carry_their_work():
    rows, _ = _proton_scope("decode-1b-1gpu-proton")
    results = json.loads((DATA / "decode-1b-1gpu-proton" / "rank0.results.json").read_text())
    tokens = results["new_tokens"] - 1  # decode_one_token runs for every token after prefill's
    assert rows.loc["decode_one_token", "bytes"] == results["weight_bytes"] * tokens
    rows, _ = _proton_scope("train-small-1gpu-proton")
    run = json.loads((DATA / "train-small-1gpu-proton" / "run.json").read_text())
    row = run["results"]["0"]["rows"][0]
    assert rows.loc["forward", "flops"] == pytest.approx(row["model_tflop_per_step"] * 1e12 / 3 * row["steps"])


def test_nsys_flops_from_emit_nvtx_sizes_equal_2mnk():
    """nsys with emit_nvtx(record_shapes=True): FLOPs from the ranges' sizes, checked against the
    script's shapes; NVTX has no dtype, so bytes and the roof stay unknown."""
    events = tracelab.load(DATA / "roofline-1gpu-nsys" / "rank0.sqlite").events
    rows = roofline(events, H100, "scope").rows
    rows = rows.assign(region=rows["key"].str.split("/").str[0]).set_index("region")
    for region in ("gemm_square_bf16", "gemm_square_fp32", "gemm_skinny_bf16", "linear_bf16", "bmm_bf16",
                   "gemv_bf16", "sdpa_bf16"):
        expected = EXPECTED[region]
        assert rows.loc[region, "flops"] == expected["flops"] * expected["calls"]
        assert rows.loc[region, "bound"] == "unknown" and pd.isna(rows.loc[region, "roofline_frac"])
    con = sqlite3.connect(DATA / "roofline-1gpu-nsys" / "rank0.sqlite")
    sized = con.execute("SELECT count(*) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                        "WHERE COALESCE(n.text, s.value) LIKE 'aten::mm,%sizes = [%'").fetchone()[0]
    assert sized == 15  # 5 calls each of the square bf16, square fp32 and skinny products


@pytest.mark.slow
def test_roofline_and_idle_sections_render_in_chromium(chromium, tmp_path, capsys):
    """The report of a host-bound H100 train capture: its roofline plot (log axes, the roofs) and
    the idle bars draw in a real headless Chromium with no console error and no request."""
    from helpers import check_rendered

    out = tmp_path / "report.html"
    status, _, err = run_cli_output(capsys, "report", str(DATA / "idle-1gpu-small-torch"), "-o", str(out))
    assert status == 0, err
    page = out.read_text()
    assert 'id="roofline"' in page and 'id="idle"' in page
    got = check_rendered(chromium, out)
    assert "FLOP per byte" in got["dom"]  # the roofline plot's axis, drawn by plotly


def test_torch_flops_arg_where_no_formula_applies(tmp_path):
    """An operator tracelab has no formula for, with the `flops` torch.profiler(with_flops=True)
    wrote: its kernel gets those FLOPs; a broken shape beside it stays unknown."""
    trace = json.load(gzip.open(SHAPES / "rank0.pt.trace.json.gz"))
    for e in trace["traceEvents"]:
        if e.get("cat") == "cpu_op" and e["name"] == "aten::gelu":
            e["name"], e["args"]["flops"] = "aten::my_gelu", 1234
        if e.get("cat") == "cpu_op" and e["name"] == "aten::add":
            e["args"]["Input Dims"] = "not a list"
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(trace))
    events = tracelab.load(path).events
    gelu = events[(events["scope"] == "gelu_bf16") & (events["kind"] == "kernel")]
    add = events[(events["scope"] == "add_bf16") & (events["kind"] == "kernel")]
    assert gelu["flops"].tolist() == [1234.0] * 5 and gelu["bytes"].isna().all()
    assert add["flops"].isna().all() and add["bytes"].isna().all()


def test_cuda_graph_replays_get_their_captured_ops_work():
    """A graph captured inside the trace and replayed once per step (tests/data/graph-1gpu-torch):
    each replay's Linear has the captured addmm's 2MNK, like the eager pass of the same layer."""
    expected = json.loads((DATA / "graph-1gpu-torch" / "expected.results.json").read_text())
    events = tracelab.load(DATA / "graph-1gpu-torch" / "rank0.pt.trace.json.gz").events
    per_layer = 2 * 64 * expected["width"] * expected["width"] * expected["steps"] * expected["replays"]
    for layer in range(expected["layers"]):
        replayed = events[events["scope"] == f"capture/layer{layer}"]
        eager = events[events["scope"] == f"eager/layer{layer}"]
        assert replayed["flops"].sum() == pytest.approx(per_layer) and eager["flops"].sum() == pytest.approx(per_layer)


def test_a_cpu_only_trace_says_so_with_its_rank(capsys):
    """HTA's gloo rank 34 has no GPU event: the coverage line names rank 34 (read from the file's
    distributedInfo) and says there is no GPU activity, not 'rank -: 0.000 ms of 0.000 ms (-%)'."""
    path = shared_trace("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    gpu = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert not gpu and doc["distributedInfo"]["rank"] == 34
    status, out, err = run_cli_output(capsys, "roofline", str(path))
    assert status == 0, err
    assert "rank 34: no GPU kernel, memcpy or memset in this trace" in out and "rank -" not in out and "(-%)" not in out
    status, out, err = run_cli_output(capsys, "roofline", str(path), "--format", "json")
    assert strict_json(out)["coverage"] == [{"rank": 34, "gpu_ns": 0, "known_ns": 0}]


@pytest.mark.slow
@pytest.mark.shared
def test_an_a100_whose_name_gives_no_size_is_told_by_its_memory():
    """HTA's NCCL trace ran on 'NVIDIA A100-PG509-200' with 42,297,524,224 bytes (read from its
    deviceProperties): the 40 GB part, 1,555 GB/s of HBM, not the 80 GB one's 2,039 GB/s it got."""
    path = shared_trace("hta/nccl_parser_config/nccl_data.json.gz")
    with gzip.open(path, "rt") as f:
        props = json.load(f)["deviceProperties"][0]
    assert props["name"] == "NVIDIA A100-PG509-200" and props["totalGlobalMem"] < 60 * 2**30
    found, source = runfolder.meta_device(tracelab.load(path).meta)
    assert (found.name, found.hbm_gb_s, source) == ("A100 40GB", 1555.0, "trace")
    assert devices.detect({"name": "NVIDIA A100-PG509-200", "memory_bytes": 85_899_345_920}).name == "A100 SXM 80GB"
    assert devices.detect({"name": "NVIDIA A100-SXM4-80GB"}).name == "A100 SXM 80GB"  # no size given: the name's


def test_only_the_first_gpu_names_the_device():
    """Triton's cuda.json lists an sm_89 part of 1,008 GB/s first (no entry within 10%: unknown) and
    an sm_90 one second (bandwidths from its bus width and memory clock, read from the file): the
    trace's device is unknown, not the second GPU's kind applied to kernels that ran on the first."""
    path = shared_trace("proton/cuda.json")
    gpus = json.loads(path.read_text())[1]["CUDA"]
    gb_s = {k: g["bus_width"] / 8 * g["memory_clock_rate"] * 2 / 1e6 for k, g in gpus.items()}
    assert gpus["0"]["arch"] == "89" and gpus["1"]["arch"] == "90" and gb_s["0"] == pytest.approx(1008.1, abs=1)
    assert devices.detect({"arch": "89", "memory_bandwidth_gb_s": gb_s["0"]}) is None
    assert devices.detect({"arch": "90", "memory_bandwidth_gb_s": gb_s["1"]}) is not None
    assert runfolder.meta_device(tracelab.load(path).meta) == (None, "unknown")


def test_no_op_loses_time_below_the_fastest_of_its_kind_in_the_trace():
    """lost_ns counts each row's time beyond max(its roofline time, the fastest op of its kind in the
    rank's trace): a kernel's fixed cost is no loss (a 2-kernel capture of an 11 us step read '0.011 ms
    lost to the roofline at 0.00145 GB/s'). Checked per group against a walk over the rows; roofline_frac
    and GB/s keep the pure roofline (GB/s / bandwidth is still the memory roof's fraction)."""
    events = tracelab.load(SHAPES / "rank0.pt.trace.json.gz").events
    gpu = events[events["kind"] != "cpu_op"]
    fastest = gpu.groupby(gpu["kind"].astype(str))["dur_ns"].min().to_dict()
    rows = roofline(events, H100, "kernel").rows.set_index("key")
    pure = roofline(events, H100, "kernel").rows.set_index("key")["min_ns"]
    for key, g in gpu.groupby(gpu["kernel"].astype(str)):
        lost = 0.0
        for _, r in g.iterrows():
            peak = H100.peak_tflop_s(str(r["dtype"]))
            compute = r["flops"] / (peak * 1e3) if peak and not pd.isna(r["flops"]) else np.nan
            copy = r["kind"] == "memcpy"
            host = copy and "DtoD" not in str(r["name"]) and "Device -> Device" not in str(r["name"])
            memory = r["bytes"] / (H100.host_link_gb_s if host else H100.hbm_gb_s) * (2 if copy and not host else 1)
            least = np.fmax(compute, memory)
            if not np.isnan(least):
                lost += r["dur_ns"] - max(least, fastest[str(r["kind"])])
        if not np.isnan(rows.loc[key, "lost_ns"]):
            assert rows.loc[key, "lost_ns"] == pytest.approx(lost, rel=1e-9, abs=1), key
    floored = [k for k in rows.index if not np.isnan(rows.loc[k, "lost_ns"])
               and rows.loc[k, "lost_ns"] < rows.loc[k, "known_ns"] - pure[k] - 1]
    assert floored  # the floor bites somewhere in a real capture (its small copies and fills)
    one = gpu[gpu["dur_ns"] == gpu["dur_ns"].min()].head(1).assign(bytes=16.0, flops=np.nan)
    tiny = roofline(one, H100, "kernel").rows.iloc[0]
    assert tiny["lost_ns"] == 0 and tiny["gb_s"] == pytest.approx(16 / one["dur_ns"].iloc[0])
