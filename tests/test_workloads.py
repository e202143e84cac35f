"""The train, allreduce and overlap workloads on 2 CPU ranks (gloo): through `tracelab run`
with results checked against numbers computed here, the data-parallel gradients against
one process on the whole batch, bad input refused in one line, and the report's plots."""
from __future__ import annotations

import gzip
import importlib
import json
import multiprocessing
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tracelab.run import machine, runner
from tracelab.reports.html import workload_plots
from tracelab.run.runner import RunSpec

from helpers import LazyModule, needs

pytestmark = needs("torch")

# imported by the first test that uses them, not at collection (helpers.LazyModule says why)
torch = LazyModule("torch")
harness = LazyModule("tracelab.workloads.harness")
shared = LazyModule("tracelab.workloads.options.shared")

TINY = {"d_model": 64, "d_ff": 256, "layers": 2, "heads": 4, "vocab": 10000}


def _run(tmp_path_factory, workload: str, backend: str, args: list[str]) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp(workload)
    result = runner.run(RunSpec(workload, 2, backend, out, args))
    return result.run_dir, json.loads((result.run_dir / "run.json").read_text())


@pytest.fixture(scope="module")
def train_run(tmp_path_factory):
    return _run(tmp_path_factory, "train", "torch",
                ["--size", "tiny", "--phase", "step", "--ddp", "bucketed", "--bucket-mb", "0.5",
                 "--context-length", "32", "--batch-size", "4", "--steps", "3", "--warmup", "1"])


@pytest.fixture(scope="module")
def allreduce_run(tmp_path_factory):
    return _run(tmp_path_factory, "allreduce", "torch", ["--impl", "gloo", "--sizes", "4K,64K", "--iters", "20"])


@pytest.fixture(scope="module")
def overlap_run(tmp_path_factory):
    return _run(tmp_path_factory, "overlap", "none", ["--rows", "64,128", "--iters", "5", "--warmup", "1"])


def _annotations(trace: Path) -> set[str]:
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    return {e["name"] for e in events if e.get("cat") == "user_annotation"}


def _assert_step_times(record: dict, unprofiled_steps: int, profiled_steps: int) -> None:
    """Both phases' steps there and positive, each median that of its samples."""
    import statistics

    for phase, n in (("unprofiled", unprofiled_steps), ("profiled", profiled_steps)):
        samples = record[f"{phase}_step_ns_samples"]
        if n is None:  # a phase not run
            assert samples is None and record[f"{phase}_step_ns"] is None
            continue
        assert len(samples) == n and all(isinstance(t, int) and t > 0 for t in samples)
        assert record[f"{phase}_step_ns"] == round(statistics.median(samples))


@pytest.mark.slow
def test_train_results(train_run):
    run_dir, record = train_run
    assert record["status"] == "ok" and sorted(record["results"]) == ["0", "1"]
    d, f, L, V = TINY["d_model"], TINY["d_ff"], TINY["layers"], TINY["vocab"]
    params = 2 * V * d + L * (4 * d * d + 3 * d * f + 2 * d) + d
    matmul_params = V * d + L * (4 * d * d + 3 * d * f)
    tokens = 4 // 2 * 32  # a rank's share of the batch x context
    for rank, result in record["results"].items():
        (row,) = result["rows"]
        assert (row["size"], row["phase"], row["ddp"], result["world_size"]) == ("tiny", "step", "bucketed", 2)
        assert row["params"] == params
        assert row["model_tflop_per_step"] * 1e12 == pytest.approx((6 * matmul_params + 12 * L * d * 32) * tokens)
        assert len(row["step_ms"]) == 3 and all(ms > 0 for ms in row["step_ms"])
        assert row["step_ms_mean"] == pytest.approx(sum(row["step_ms"]) / 3)
        assert row["step_ms_std"] >= 0 and row["mfu"] is None  # no known peak on the CPU
        # the profiled steps are the window's own step_ms; the same 3 steps timed again with the profiler off
        assert row["profiled_step_ns_samples"] == [round(ms * 1e6) for ms in row["step_ms"]]
        _assert_step_times(row, unprofiled_steps=3, profiled_steps=3)
    names = _annotations(run_dir / "rank1.pt.trace.json.gz")
    assert {"forward", "backward", "grad_sync", "optimizer"} <= names


@pytest.mark.slow
def test_allreduce_results(allreduce_run):
    run_dir, record = allreduce_run
    for result in record["results"].values():
        rows = result["rows"]
        assert [(r["impl"], r["msg_bytes"]) for r in rows] == [("gloo", 4096), ("gloo", 65536)]
        for r in rows:
            assert r["checked"] and r["rel_err"] == 0.0 and r["iters"] == 20
            assert r["latency_us"] >= r["rank_latency_us"] > 0  # the slowest rank's median
            assert r["busbw_gb_s"] == pytest.approx(2 * (2 - 1) / 2 * r["msg_bytes"] / r["latency_us"] / 1e3)
            # a step is one call: the window's 20 calls, and 20 more with the profiler off
            assert r["profiled_step_ns"] == pytest.approx(r["rank_latency_us"] * 1e3, abs=1)
            _assert_step_times(r, unprofiled_steps=20, profiled_steps=20)
    assert {"allreduce_gloo_4096", "allreduce_gloo_65536"} <= _annotations(run_dir / "rank0.pt.trace.json.gz")


@pytest.mark.slow
def test_overlap_results(overlap_run):
    _, record = overlap_run
    rows = record["results"]["0"]["rows"]
    assert [(r["op"], r["M"], r["N"], r["K"]) for r in rows] == [
        ("ag-matmul", 64, 64, 128), ("ag-matmul", 128, 64, 128), ("matmul-rs", 64, 64, 128), ("matmul-rs", 128, 64, 128)]
    assert all(r["unfused_us"] > 0 and r["matmul_us"] > 0 and r["speedup"] is None for r in rows)
    for r in rows:  # under none, the window's 5 calls per variant are the unprofiled steps
        assert sorted(r["step_times"]) == ["matmul", "unfused"]
        for variant, times in r["step_times"].items():
            _assert_step_times(times, unprofiled_steps=5, profiled_steps=None)
            assert times["unprofiled_step_ns"] <= r[f"{variant}_us"] * 1e3 + 1  # this rank's median, the slowest's


@pytest.mark.slow
def test_plots_from_run_json(train_run, allreduce_run, overlap_run):
    cases = [(train_run, "step time", "bar"), (allreduce_run, "bus bandwidth", "scatter"),
             (overlap_run, "time per shape", "bar")]
    for (_, record), words, kind in cases:
        (note, fig), = workload_plots.workload_figures(record)  # overlap: no speedup without fused
        assert words in note and fig["data"] and all(t["type"] == kind for t in fig["data"])
    ar = workload_plots.allreduce_bandwidth(allreduce_run[1]["results"]["0"])
    assert ar["data"][0]["x"] == [4096, 65536]
    assert workload_plots.workload_figures({"figures": {"0": {"workload": "decode", "tokens_per_s": 1.0}}}) == []


def test_overlap_speedup_plot_sits_beside_the_reference():
    rows = [{"op": "ag-matmul", "model": "8B", "M": 8192, "N": 1792, "K": 4096, "speedup": 1.5},
            {"op": "matmul-rs", "model": "8B", "M": 8192, "N": 1792, "K": 4096, "speedup": 0.9}]
    fig = workload_plots.overlap_speedup({"rows": rows, "world_size": 2})
    assert [t["y"] for t in fig["data"]] == [[1.5], [0.9], [1.34]]  # the last: symm-mem-recipes' published speedup


# -- data parallel: the gradients of every variant equal one process's on the whole batch --

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _grads_worker(rank: int, port: int, variants: list[str], out: str) -> None:
    import torch.distributed as dist

    from tracelab.workloads.ddp import broadcast_parameters, make_sync
    from tracelab.workloads.configs import SIZES
    from tracelab.workloads.lm import TrainLM, loss_fn, model_args

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    args = model_args(SIZES["tiny"], 1000, 16)
    tokens = torch.randint(1000, (4, 17), generator=torch.Generator().manual_seed(7))  # the global batch
    results = {}
    for variant in variants:
        torch.manual_seed(rank)  # different weights per rank: the broadcast must make them equal
        model = TrainLM(args)
        broadcast_parameters(model)
        sync = make_sync(variant, model, bucket_mb=0.05) if variant != "none" else None
        mine = tokens[2 * rank: 2 * rank + 2]  # [2, 17]: this rank's half
        if sync:
            sync.before_backward()
        loss_fn(model(mine[:, :-1]), mine[:, 1:]).backward()
        if sync:
            sync.finish()
        results[variant] = {n: p.grad.clone() for n, p in model.named_parameters()}
    if rank == 0:
        torch.manual_seed(0)
        model = TrainLM(args)  # rank 0's weights, what every rank got
        loss_fn(model(tokens[:, :-1]), tokens[:, 1:]).backward()
        results["single"] = {n: p.grad.clone() for n, p in model.named_parameters()}
    torch.save(results, f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.mark.slow
def test_data_parallel_gradients_equal_single_process(tmp_path):
    variants = ["naive", "flat", "overlap", "bucketed", "none"]
    ctx = multiprocessing.get_context("spawn")
    port, out = _free_port(), str(tmp_path / "grads")
    procs = [ctx.Process(target=_grads_worker, args=(r, port, variants, out)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    grads = [torch.load(f"{out}.{r}") for r in range(2)]
    single = grads[0]["single"]
    for variant in variants[:-1]:
        for rank in range(2):
            for name, want in single.items():
                got = grads[rank][variant][name]
                assert torch.allclose(got, want, rtol=1e-4, atol=1e-6), (variant, rank, name)
    # without a sync each rank keeps the gradient of its own half: the check above can fail
    assert not torch.allclose(grads[0]["none"]["output.weight"], single["output.weight"], rtol=1e-4, atol=1e-6)


# -- bad input: one line naming the option, exit 2, before any process group --

BAD = [
    # (workload, argv, WORLD_SIZE, words in the one line)
    ("tracelab.workloads.train", ["--size", "huge"], 1, "--size: unknown huge"),
    ("tracelab.workloads.train", ["--phase", "sprint"], 1, "--phase: unknown sprint"),
    ("tracelab.workloads.train", ["--batch-size", "3"], 2, "--batch-size: 3 sequences do not divide over 2 ranks"),
    ("tracelab.workloads.train", ["--ddp", "naive"], 1, "data parallel needs ranks"),
    ("tracelab.workloads.train", ["--steps", "0"], 1, "--steps: must be positive"),
    ("tracelab.workloads.train", ["--size", "tiny,small", "--backend", "torch"], 1, "a profiled run takes one size"),
    ("tracelab.workloads.allreduce", ["--impl", "nccl2"], 1, "--impl: unknown nccl2"),
    ("tracelab.workloads.allreduce", ["--impl", "multimem"], 1, "multimem needs NVLink multicast (NVLS), which is off"),
    ("tracelab.workloads.allreduce", ["--impl", "symm-one-shot"], 1, "CUDA GPUs are needed for symm-one-shot"),
    ("tracelab.workloads.allreduce", ["--sizes", "4K,4112"], 2, "4112 do not divide over 2 rank(s) in 16-byte vectors"),
    ("tracelab.workloads.allreduce", ["--sizes", "4 parsecs"], 1, "is not a size"),
    ("tracelab.workloads.overlap", ["--variant", "fused"], 1, "fused needs CUDA GPUs with symmetric memory"),
    ("tracelab.workloads.overlap", ["--rows", "64,65"], 2, "--rows: 65 rows do not divide over 2 rank(s)"),
    ("tracelab.workloads.overlap", ["--models", "405B"], 1, "--models: unknown 405B"),
]


@pytest.mark.parametrize("workload, argv, world_size, words", BAD)
def test_bad_input_one_line(monkeypatch, capsys, workload, argv, world_size, words):
    workload = importlib.import_module(workload)  # by name: collecting imports no workload
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.setattr(harness, "join", lambda *a: pytest.fail("joined the job despite bad input"))
    assert workload.main([*argv, "--out", "/nonexistent/never-written"]) == harness.EXIT_FAILED
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"tracelab {workload.__name__.rsplit('.', 1)[1]}: error: ")
    assert words in err[0]


@pytest.mark.slow
def test_bad_input_on_two_ranks_stops_both(tmp_path):
    """Under torchrun every rank refuses the same way before joining: nobody waits."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
           "-m", "tracelab.workloads.train", "--batch-size", "3", "--out", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.startswith("tracelab train:")]
    assert done.returncode != 0
    assert lines == ["tracelab train: error: --batch-size: 3 sequences do not divide over 2 ranks"]


def test_runner_refuses_bad_workload_options_before_launch(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "gpu_count", lambda: 0)
    spec = RunSpec("allreduce", 2, "none", tmp_path / "runs", ["--sizes", "4K,100"])
    with pytest.raises(runner.UsageError, match=r"100 do not divide over 2 rank\(s\)"):
        runner.plan(spec)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("text, sizes", [
    ("4K", [4096]), ("4K-32K", [4096, 8192, 16384, 32768]), ("1M,4096,1M", [4096, 1 << 20]),
    ("2GB", [2 << 30]), ("64kb", [65536]),
])
def test_parse_sizes(text, sizes):
    assert shared.parse_sizes(text) == sizes


# -- the 2-GPU captures in tests/data (benchmarks/gpu_workloads.sh at da8b67c): regions under every profiler --

DATA = Path(__file__).resolve().parent / "data"
REGIONS = {
    "allreduce": {f"allreduce_{impl}_{n}" for impl in ("symm-one-shot", "triton-one-shot") for n in (4096, 1048576)},
    "train": {"forward", "backward", "grad_sync"},
    "overlap": {f"{op}_{v}_M4096_N1792_K4096" for op in ("ag-matmul", "matmul-rs") for v in ("matmul", "unfused")},
}


@pytest.mark.parametrize("workload, backend", [  # each workload and each profiler once; the other pairs under -m slow
    (w, b) if (w, b) in {("allreduce", "proton"), ("overlap", "torch"), ("train", "nsys")}
    else pytest.param(w, b, marks=pytest.mark.slow) for w in sorted(REGIONS) for b in ("proton", "torch", "nsys")])
def test_gpu_capture_has_the_workload_regions(workload, backend):
    import tracelab

    df = tracelab.events(tracelab.load_many(DATA / f"{workload}-2gpu-{backend}"))
    assert sorted(df["rank"].unique()) == [0, 1]
    for rank, part in df.groupby("rank"):
        scopes = {s for scope in part["scope"].unique() for s in scope.split("/")}
        assert REGIONS[workload] <= scopes, (rank, REGIONS[workload] - scopes)


@pytest.mark.parametrize("backend", ["proton", "torch", "nsys"])
def test_gpu_allreduce_capture_counts_every_call(backend):
    """2 sizes x (3 warm-up + 5 timed calls) per implementation inside the window; torch's
    CUDA one-shot and (in this capture) our Triton kernel share one kernel name."""
    import tracelab

    df = tracelab.events(tracelab.load_many(DATA / f"allreduce-2gpu-{backend}"))
    for rank, part in df.groupby("rank"):
        calls = part.groupby(part["kernel"].astype(str))["count"].sum()
        assert calls["ncclDevKernel_AllReduce_Sum_bf16_RING_LL"] == 16, rank
        assert calls["one_shot_all_reduce_kernel"] == 32, rank
