"""The train workload's speed options (workloads/train_speed.py) and --late rank0: refused where
they cannot run, documented in --help, and doing what they say (the attention's region and kernel,
the extra work on rank 0 alone); end to end on the CPU (slow): the trace's ranges and the results."""
from __future__ import annotations

import argparse
import gzip
import json

import pytest

from tracelab.core.errors import UsageError
from tracelab.run import backends
from tracelab.run.runner import RunSpec, run
from tracelab.workloads.configs import SIZES

from helpers import LazyModule, needs

pytestmark = needs("torch")

# imported by the first test that uses them, not at collection (helpers.LazyModule says why)
torch = LazyModule("torch")
late = LazyModule("tracelab.workloads.late")
train = LazyModule("tracelab.workloads.train")
train_speed = LazyModule("tracelab.workloads.train_speed")
lm = LazyModule("tracelab.workloads.lm")
options = LazyModule("tracelab.workloads.options.train")
GPU = "torch.cuda.is_available()"  # a skipif condition, evaluated when the test is set up


@pytest.mark.skipif(GPU, reason="the CPU's refusals")
@pytest.mark.parametrize("argv, words", [
    (["--cuda-graph"], "--cuda-graph: a CUDA graph needs a GPU"),
    (["--tf32"], "--tf32: TF32 is an NVIDIA GPU's tensor-core format"),
    (["--attention", "flash"], None),  # argparse's own refusal
])
def test_gpu_options_are_refused_on_the_cpu(argv, words, capsys):
    if words is None:
        with pytest.raises(SystemExit):
            train.parse(argv)
        assert "invalid choice: 'flash'" in capsys.readouterr().err
        return
    with pytest.raises(UsageError) as e:
        train.parse(argv)
    assert str(e.value).startswith(words)


def _graph_args(**changed) -> argparse.Namespace:
    args = dict(cuda_graph=True, ddps=["none"], host_stall_ms=None, late_every=1, compile=False, tf32=False,
                capturable=False)
    return argparse.Namespace(**{**args, **changed})


@pytest.mark.parametrize("changed, option", [
    ({"ddps": ["bucketed"]}, "--ddp"), ({"host_stall_ms": "0:5"}, "--host-stall-ms"),
    ({"late_every": 2}, "--late-every"), ({"compile": True}, "--compile")])
def test_a_graph_refuses_what_it_cannot_replay(changed, option):
    with pytest.raises(UsageError) as e:
        options.check_speed(_graph_args(**changed), gpu=True)
    assert f"not with {option}" in str(e.value)


def test_a_graph_takes_the_capturable_optimizer():
    args = _graph_args()
    options.check_speed(args, gpu=True)
    assert args.capturable is True
    plain = _graph_args(cuda_graph=False)
    options.check_speed(plain, gpu=True)
    assert plain.capturable is False


def test_help_documents_each_option(capsys):
    with pytest.raises(SystemExit):
        train.parse(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for words in ("--cuda-graph capture the whole step", "--compile torch.compile the model",
                  "--tf32 fp32 matrix products on TF32", "in an `sdpa` region", "rank0 or rank1 does --late-work"):
        assert words in text


@pytest.fixture
def regions(monkeypatch) -> list[str]:
    """The names of the regions opened, in order."""
    opened: list[str] = []
    real = backends.region

    def region(name, work=None):
        opened.append(name)
        return real(name, work)

    monkeypatch.setattr(backends, "region", region)
    return opened


@pytest.mark.parametrize("who, rank, step, works", [
    ("rank0", 0, 0, True), ("rank0", 0, 1, True), ("rank0", 1, 0, False),
    ("rank1", 1, 3, True), ("rank1", 0, 3, False), ("alternating", 1, 3, True), ("alternating", 0, 3, False)])
def test_late_work_goes_to_the_rank_named(regions, who, rank, step, works):
    late.late_work(who, 1, rank, torch.device("cpu"))(step)
    assert regions == (["extra_work"] if works else [])


def test_attention_choice_keeps_the_model_and_names_its_product(regions):
    torch.manual_seed(0)
    size = SIZES["tiny"]
    x = torch.randint(100, (2, 32))
    plain = lm.TrainLM(lm.model_args(size, 100, 32))
    want = plain(x)
    for choice in options.ATTENTION:
        model = lm.TrainLM(lm.model_args(size, 100, 32))
        model.load_state_dict(plain.state_dict())
        train_speed.use_attention(model, choice)
        regions.clear()
        torch.testing.assert_close(model(x), want, rtol=1e-4, atol=1e-5)
        assert regions == [options.SDPA_REGION] * size.layers


def test_precision_follows_tf32():
    saved = torch.get_float32_matmul_precision()
    try:
        train_speed.set_precision(argparse.Namespace(tf32=True))
        assert torch.get_float32_matmul_precision() == "high"
        train_speed.set_precision(argparse.Namespace(tf32=False))
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.set_float32_matmul_precision(saved)


TINY = ["--size", "tiny", "--vocab-size", "200", "--batch-size", "2", "--context-length", "32", "--steps", "3",
        "--warmup", "1"]


def _ranges(trace_path) -> dict[str, int]:
    events = json.loads(gzip.open(trace_path).read())["traceEvents"]
    names = [e.get("name") for e in events if e.get("cat") == "user_annotation"]
    return {n: names.count(n) for n in set(names)}


@pytest.mark.slow
def test_scope_and_attention_end_to_end(tmp_path):
    result = run(RunSpec("train", 1, "torch", tmp_path, [*TINY, "--late", "rank0", "--attention", "math"]))
    record = result.record["results"]["0"]
    assert (record["late"], record["attention"], record["compile"], record["cuda_graph"]) == ("rank0", "math", False, False)
    counts = _ranges(result.traces[0])
    # the profiled window's 3 steps: extra work once per step, the product once per layer and step
    assert counts["extra_work"] == 3 and counts[options.SDPA_REGION] == 3 * SIZES["tiny"].layers


@pytest.mark.slow
def test_compile_end_to_end(tmp_path):
    result = run(RunSpec("train", 1, "none", tmp_path, [*TINY, "--compile"]))
    record = result.record["results"]["0"]
    assert record["compile"] is True and record["rows"][0]["unprofiled_step_ns"] > 0


@pytest.mark.skipif(f"not {GPU}", reason="a CUDA graph needs a GPU")
def test_graphed_step_replays_the_work():
    x = torch.ones(4, device="cuda")
    calls = []

    def step():
        calls.append(1)
        x.mul_(2)

    replay = train_speed.graphed(step, torch.device("cuda"))
    x.fill_(1)
    replay()
    replay()
    assert x.tolist() == [4.0] * 4 and len(calls) == train_speed.GRAPH_WARMUP + 1
