"""tracelab run: checks before launch (no process started), and end-to-end runs of the
tiny decode on 2 CPU ranks (gloo) under torch.profiler and under no profiler."""
from __future__ import annotations

import gzip
import os
import json
import re
import statistics
import textwrap
from pathlib import Path

import pytest

import tracelab
from tracelab.run import backends, launch, machine, runner
from tracelab.core.errors import RunError, ToolMissingError, UsageError
from tracelab.run.runner import RunSpec
from tracelab.workloads.configs import CONFIGS

from helpers import LazyModule, needs

pytestmark = needs("torch")

# imported by the first test that uses them, not at collection (helpers.LazyModule says why)
torch = LazyModule("torch")
decode = LazyModule("tracelab.workloads.decode")
llama = LazyModule("tracelab.workloads.model")

FAST = ["--new-tokens", "4", "--samples", "2", "--top-k", "1"]


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory) -> dict[str, Path]:
    """A good tiny checkpoint and broken neighbours."""
    root = tmp_path_factory.mktemp("ckpt")
    torch.manual_seed(0)
    state = llama.Transformer(CONFIGS["tiny"]).state_dict()
    paths = {"good": root / "good.pth", "shape": root / "shape.pth", "keys": root / "keys.pth",
             "int8": root / "int8.pth", "junk": root / "junk.pth"}
    torch.save(state, paths["good"])
    torch.save({**state, "layers.1.feed_forward.w2.weight": torch.zeros(128, 10)}, paths["shape"])
    torch.save({k: v for k, v in state.items() if k != "norm.weight"}, paths["keys"])
    torch.save({**state, "layers.0.attention.wqkv.scales": torch.ones(256)}, paths["int8"])
    paths["junk"].write_text("not a checkpoint")
    return paths


BAD = [
    # (spec fields, workload args, error type, words in the message)
    ({"workload": "nope"}, [], UsageError, "unknown workload 'nope'"),
    ({"backend": "bogus"}, [], UsageError, "unknown backend 'bogus'"),
    ({"ranks": 0}, [], UsageError, "at least 1, not 0"),
    ({"backend": "proton"}, [], UsageError, "proton needs a CUDA GPU"),
    ({"backend": "nsys"}, [], UsageError, "nsys needs a CUDA GPU"),
    ({"nnodes": "2"}, [], UsageError, "--rdzv-endpoint"),
    ({}, ["--model", "llama-9"], UsageError, "invalid choice: 'llama-9'"),
    ({}, ["--new-tokens", "x"], UsageError, "invalid int value: 'x'"),
    ({}, ["--new-tokens", "0"], UsageError, "at least 1, not 0"),
    ({}, ["--frobnicate"], UsageError, "unrecognized arguments: --frobnicate"),
    ({}, ["--out", "elsewhere"], UsageError, "give --out to tracelab run"),
    ({}, ["--backend", "none"], UsageError, "give --backend to tracelab run"),
    ({"ranks": 3}, ["--model", "tiny"], UsageError, "heads (16) do not divide over 3 ranks"),
    ({}, ["--allreduce", "symm-one-shot"], UsageError, "needs CUDA GPUs"),
    ({}, ["--allreduce", "nccl"], UsageError, "the ranks' process group here is gloo, not nccl"),
    ({}, ["--prompt-len", "200", "--new-tokens", "100"], UsageError, "exceed tiny's context of 256"),
]


@pytest.mark.parametrize("fields, args, error, words", BAD)
def test_bad_input_is_refused_before_launch(tmp_path, monkeypatch, fields, args, error, words):
    monkeypatch.setattr(machine, "gpu_count", lambda: 0)
    spec = RunSpec(**{"workload": "decode", "ranks": 2, "backend": "torch", "out_root": tmp_path / "runs",
                      "workload_args": args, **fields})
    with pytest.raises(error, match=re.escape(words)):
        runner.plan(spec)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("workload, option", [("decode", "--tuned"), ("train", "--steps"),
                                              ("allreduce", "--sizes"), ("overlap", "--variant")])
def test_workload_help_lists_its_own_options(tmp_path, monkeypatch, workload, option):
    # `tracelab run W -- --help` printed "error: W options:   --top-k TOP_K" (argparse's help
    # taken for a failure); now it prints the workload's help and exits 0, launching nothing
    from typer.testing import CliRunner

    from tracelab.cli import app
    monkeypatch.setattr(machine, "gpu_count", lambda: 0)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["run", workload, "--", "--help"])
    assert result.exit_code == 0, result.output
    assert f"{workload}'s own options" in result.output and option in result.output
    assert "error" not in result.output.lower() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("kind, words", [
    ("shape", "layers.1.feed_forward.w2.weight is [128, 10], the config needs [128, 256]"),
    ("keys", "lacks norm.weight (1 missing, 0 unexpected keys)"),
    ("int8", "quantized"),
    ("junk", "not a readable torch checkpoint"),
    ("missing", "no such checkpoint file"),
])
def test_bad_checkpoint_is_refused(tmp_path, monkeypatch, tiny_ckpt, kind, words):
    monkeypatch.setattr(machine, "gpu_count", lambda: 0)
    path = tiny_ckpt.get(kind, tmp_path / "absent.pth")
    spec = RunSpec("decode", 2, "none", tmp_path / "runs", ["--checkpoint", str(path)])
    with pytest.raises(UsageError, match=re.escape(words)) as e:
        runner.plan(spec)
    assert str(path) in str(e.value)


def test_defaults_do_what_the_run_says(tmp_path, monkeypatch):
    # train on two ranks synced no gradients (ddp=none), and a gloo decode recorded "nccl"
    monkeypatch.setattr(machine, "gpu_count", lambda: 0)
    config = {(workload, ranks): runner.plan(RunSpec(workload, ranks, "torch", tmp_path / "runs")).config
              for workload, ranks in [("train", 2), ("train", 1), ("decode", 2)]}
    assert config["train", 2]["ddps"] == ["bucketed"] and config["train", 1]["ddps"] == ["none"]
    assert config["decode", 2]["allreduce"] == "gloo"


@pytest.mark.parametrize("gpus, ranks, runs, note", [
    (1, 2, 1, "note: 1 GPU(s) visible: running 1 rank(s) instead of 2 (--ranks)"),
    (2, 4, 2, "note: 2 GPU(s) visible: running 2 rank(s) instead of 4 (--ranks)"),
    (2, 2, 2, None), (4, 2, 2, None),
    (0, 4, 4, None),  # CPU ranks (gloo): as many as asked
])
def test_ranks_from_the_gpus_seen(tmp_path, monkeypatch, gpus, ranks, runs, note):
    monkeypatch.setattr(machine, "gpu_count", lambda: gpus)
    monkeypatch.setattr(machine, "devices", lambda gpus: [])  # no CUDA here to ask
    p = runner.plan(RunSpec("decode", ranks, "torch", tmp_path))
    assert p.spec.ranks == runs and p.notes == ([note] if note else [])
    command = runner.torchrun_command(p, tmp_path)
    assert command[command.index("--nproc-per-node") + 1] == str(runs)
    assert runner.new_record(p, command)["ranks_asked"] == ranks


@pytest.mark.parametrize("spec, words", [
    # every node must start the same count of ranks
    (RunSpec("decode", 2, "torch", nnodes="2", rdzv_endpoint="h:29500"), "2 ranks per node but only 1 GPU(s) are visible"),
    # tiny's 8 key/value heads do not split over 3 ranks: the fallback cannot run either
    (RunSpec("decode", 4, "torch", workload_args=["--model", "tiny"]), "4 ranks per node but only 3 GPU(s) are visible, and 3 cannot run either: "
                                    "tiny: heads (16) do not divide over 3 ranks"),
])
def test_too_few_gpus_where_no_fallback_runs(tmp_path, monkeypatch, spec, words):
    monkeypatch.setattr(machine, "gpu_count", lambda: 3 if spec.ranks == 4 else 1)
    spec.out_root = tmp_path
    with pytest.raises(UsageError, match=re.escape(words)):
        runner.plan(spec)


def test_nsys_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "gpu_count", lambda: 1)
    monkeypatch.setattr(machine, "no_gpu_for_sure", lambda: False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(backends.NSYS_ENV, raising=False)
    with pytest.raises(ToolMissingError, match=f"not on the PATH; .* or set {backends.NSYS_ENV}="):
        runner.plan(RunSpec("decode", 1, "nsys", tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()


def test_nsys_from_the_path_or_the_variable(tmp_path, monkeypatch):
    (on_path := tmp_path / "bin" / "nsys").parent.mkdir()
    (named := tmp_path / "elsewhere" / "nsys").parent.mkdir()
    for exe in (on_path, named):
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.delenv(backends.NSYS_ENV, raising=False)
    assert backends.find_nsys() == on_path
    monkeypatch.setenv(backends.NSYS_ENV, str(named))
    assert backends.find_nsys() == named
    named.chmod(0o644)
    with pytest.raises(ToolMissingError, match="is not an executable file"):
        backends.find_nsys()


def test_nsys_command_wraps_each_rank(tmp_path, monkeypatch):
    nsys = tmp_path / "nsys"
    plan = runner.Plan(RunSpec("decode", 2, "nsys", tmp_path), "nsys", "tracelab.workloads.decode", {}, 2, nsys)
    cmd = runner.torchrun_command(plan, tmp_path / "run")
    at = cmd.index(str(nsys))
    assert cmd[at - 1] == "--no-python" and cmd[at + 1] == "profile"
    assert "--capture-range=cudaProfilerApi" in cmd and str(tmp_path / "run" / "rank%q{RANK}") in cmd
    assert cmd[-4:] == ["--backend", "nsys", "--out", str(tmp_path / "run")]
    assert runner.rank_env(plan)["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"


def test_run_folders_are_never_reused(tmp_path):
    first = runner.new_run_dir(tmp_path, "decode", "torch")
    second = runner.new_run_dir(tmp_path, "decode", "torch")
    assert first != second and first.is_dir() and second.is_dir()
    assert second.name.startswith(first.name[: len("decode-torch-20261121-221530")])


def test_failed_rank_from_torchrun_output():
    output = ["[default1]:ValueError: boom", "Root Cause (first observed failure):", "[0]:",
              "  time      : 2026-11-21_23:01:02", "  rank      : 3 (local_rank: 1)", "  exitcode  : 1 (pid: 7)"]
    assert launch.failed_rank(output) == (3, 1)
    assert launch.failed_rank(["rank      : 3 (local_rank: 1)"]) == (None, None)  # not under Root Cause


def _annotation_names(trace: Path, prefix: str = "") -> list[str]:
    """The trace's user annotations (record_function ranges) whose name starts with prefix, one per range."""
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    return [e["name"] for e in events if e.get("cat") == "user_annotation" and e.get("name", "").startswith(prefix)]


def _annotations(trace: Path, name: str) -> int:
    return _annotation_names(trace).count(name)


@pytest.mark.slow  # 0.6-3 s each here (torch.profiler's start); tests/test_decode.py checks the window fast
@pytest.mark.parametrize("argv, tokens, unprofiled", [
    (["--new-tokens", "6", "--samples", "2", "--profile-tokens", "2"], 2, 2 * 2),
    (["--new-tokens", "4", "--samples", "1"], 3, 3),  # the default window: all of a short sample's steps
    (["--new-tokens", "6", "--samples", "1", "--profile-tokens", "2", "--no-unprofiled"], 2, 0),
])
def test_decode_profiles_a_window_of_tokens(tmp_path, argv, tokens, unprofiled):
    """One rank alone: the trace holds tokens 1..N of one sample, counted straight from its JSON;
    the results hold both phases' steps, positive, their medians those of their samples."""
    assert decode.main([*argv, "--warmup", "0", "--top-k", "1", "--backend", "torch", "--out", str(tmp_path)]) == 0
    names = _annotation_names(tmp_path / "rank0.pt.trace.json.gz", "token ")
    assert sorted(names, key=lambda n: int(n.split()[1])) == [f"token {i}" for i in range(1, tokens + 1)]
    f = json.loads((tmp_path / "rank0.results.json").read_text())
    assert f["profiled_tokens"] == tokens and len(f["profiled_step_ns_samples"]) == tokens
    assert f["profiled_step_ns"] == round(statistics.median(f["profiled_step_ns_samples"])) > 0
    if unprofiled:
        assert len(f["unprofiled_step_ns_samples"]) == unprofiled and min(f["unprofiled_step_ns_samples"]) > 0
        assert f["unprofiled_step_ns"] == round(statistics.median(f["unprofiled_step_ns_samples"]))
    else:
        assert f["unprofiled_step_ns"] is None and f["unprofiled_step_ns_samples"] is None
    # tokens/s from the measured samples, which ran with the profiler off
    assert f["tokens_per_s"] == pytest.approx(int(argv[1]) / (sum(f["sample_s"]) / len(f["sample_s"])))


@pytest.mark.parametrize("argv, words", [
    (["--new-tokens", "5", "--profile-tokens", "5"], "--profile-tokens: must be 1 to --new-tokens - 1 (4), not 5"),
    (["--new-tokens", "5", "--profile-tokens", "0"], "--profile-tokens: must be 1 to --new-tokens - 1 (4), not 0"),
    (["--new-tokens", "1"], "--new-tokens: at least 2 under a profiler"),
])
def test_a_window_outside_the_sample_is_refused(argv, words):
    with pytest.raises(UsageError, match=re.escape(words)):
        decode.parse([*argv, "--backend", "torch"])
    decode.parse(["--new-tokens", "1", "--backend", "none"])  # nothing profiled: any length


@pytest.mark.slow
def test_decode_two_ranks_end_to_end(tmp_path, tiny_ckpt):
    args = ["--checkpoint", str(tiny_ckpt["good"]), *FAST]
    lines: list[str] = []
    result = runner.run(RunSpec("decode", 2, "torch", tmp_path / "runs", args), on_line=lines.append)
    run_dir = result.run_dir
    assert run_dir.parent == tmp_path / "runs" and run_dir.name.startswith("decode-torch-")
    assert [t.name for t in result.traces] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "ok" and record["config"]["model"] == "tiny" and record["versions"]["torch"]
    per_rank = record["results"]
    assert sorted(per_rank) == ["0", "1"]
    # tensor parallel ranks sample the same tokens, and the same as one rank alone
    alone = tmp_path / "alone"
    assert decode.main([*args, "--out", str(alone)]) == 0
    one_rank = json.loads((alone / "rank0.results.json").read_text())["first_tokens"]
    assert per_rank["0"]["first_tokens"] == per_rank["1"]["first_tokens"] == one_rank
    assert any("rank 1: " in line and "tokens/s" in line for line in lines)
    # progress: each phase, each measured sample, and the trace written with its size and time
    phases = ["starting 2 rank(s) of decode under torch", "rank 0: warm-up: 1 sample(s)", "rank 0: measuring: 2 sample(s)",
              "rank 0: profiling 3 tokens under torch", "rank 0: writing the torch trace"]
    assert [next(i for i, line in enumerate(lines) if phase in line) for phase in phases] == sorted(
        next(i for i, line in enumerate(lines) if phase in line) for phase in phases)
    assert sum("rank 1: sample " in line for line in lines) == 2
    wrote = [line for line in lines if "rank 0: torch wrote rank0.pt.trace.json.gz (" in line]
    assert len(wrote) == 1 and wrote[0].rstrip().endswith(" s")
    # the profiled window holds tokens 1..3 of one sample: 3 decode steps, no prefill
    assert record["profiled_steps"] == 3
    for trace in result.traces:
        assert _annotations(trace, "decode_one_token") == 3 and _annotations(trace, "prefill") == 0
        assert sorted(_annotation_names(trace, "token ")) == ["token 1", "token 2", "token 3"]
    for f in per_rank.values():  # tokens 1..3 of both measured samples without the profiler, once with it
        assert len(f["unprofiled_step_ns_samples"]) == 2 * 3 and len(f["profiled_step_ns_samples"]) == 3
        assert f["unprofiled_step_ns"] > 0 and f["profiled_step_ns"] > 0 and f["profiled_tokens"] == 3
    profiles = tracelab.load_many(run_dir)
    assert [p.rank for p in profiles] == [0, 1]


@pytest.mark.slow
def test_decode_backend_none_writes_results_only(tmp_path):
    result = runner.run(RunSpec("decode", 2, "none", tmp_path, FAST))
    names = sorted(p.name for p in result.run_dir.iterdir())
    assert names == ["logs", "rank0.results.json", "rank1.results.json", "run.json"]
    for rank, f in result.record["results"].items():
        assert f["rank"] == int(rank) and f["world_size"] == 2
        assert f["tokens_per_s"] == pytest.approx(4 / (sum(f["sample_s"]) / 2))


CRASHY = textwrap.dedent('''
    import argparse, os, sys
    from tracelab.run import backends

    def parse(argv=None, gpu=False):
        p = argparse.ArgumentParser()
        backends.add_arguments(p)
        return p.parse_args(argv)

    def needs_torch(args):
        return False

    if __name__ == "__main__":
        parse()
        if os.environ["RANK"] == "1":
            print("about to fail", file=sys.stderr)
            raise ValueError("rank one gives up")
''')


@pytest.mark.slow
def test_failing_rank_stops_the_run_and_shows_its_error(tmp_path, monkeypatch):
    (tmp_path / "crashy_workload.py").write_text(CRASHY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setitem(runner.WORKLOADS, "crashy", runner.Workload("crashy_workload", "crashy_workload"))
    with pytest.raises(RunError) as e:
        runner.run(RunSpec("crashy", 2, "none", tmp_path / "runs"))
    message = str(e.value)
    assert "rank 1 failed" in message and "ValueError: rank one gives up" in message
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"


@pytest.mark.slow  # about 1 s of CPU here: the default run stays under 90 s
def test_launch_ends_with_torchrun_even_when_a_child_keeps_the_pipe(monkeypatch):
    import time

    monkeypatch.setattr(launch, "DRAIN_S", 1)
    seen = []
    t0 = time.monotonic()
    status, output = launch.launch(["bash", "-c", "echo one; sleep 30 & echo two; exit 3"], dict(os.environ),
                                   seen.append, gpu=False)
    assert status == 3 and output == ["one", "two"] == seen
    assert time.monotonic() - t0 < 10


def test_torch_sessions_hide_the_spurious_cycle_warning(tmp_path, monkeypatch):
    """torch 2.10-2.11 warn that the profiler 'clears events at the end of each cycle' on a
    single start without a schedule (pytorch#180387): a false line in the user's run log. Any
    other warning of the start still reaches the user."""
    import warnings

    import torch

    from tracelab.run import backends

    class Warns:
        def __init__(self, **kwargs):
            pass

        def start(self):
            warnings.warn("Warning: Profiler clears events at the end of each cycle.Only events from the current "
                          "cycle will be reported.", UserWarning)
            warnings.warn("something else", UserWarning)

    monkeypatch.setattr(torch.profiler, "profile", Warns)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        backends.TorchSession("torch", tmp_path, 0)._start()
    assert [str(w.message) for w in seen] == ["something else"]


@pytest.mark.parametrize("available, initialized, world, barriers", [
    (True, True, 2, 1),  # ranks of one job: they leave start() together
    (True, True, 1, 0),  # one rank: nothing to wait for
    (True, False, 4, 0),  # no process group (a single process without one)
    (False, False, 4, 0),  # torch built without distributed
])
def test_a_profiled_window_starts_on_every_rank_together(monkeypatch, tmp_path, available, initialized, world,
                                                        barriers):
    from types import SimpleNamespace

    calls = []
    dist = SimpleNamespace(is_available=lambda: available, is_initialized=lambda: initialized,
                           get_world_size=lambda: world, barrier=lambda: calls.append("barrier"))
    monkeypatch.setattr(backends, "_torch", lambda: SimpleNamespace(distributed=dist))
    monkeypatch.setattr(backends, "_cuda_available", lambda: False)

    class Started(backends.Session):
        def _start(self):
            calls.append("start")

    Started("torch", tmp_path, 0).start()
    assert calls == ["start"] + ["barrier"] * barriers  # after the profiler started, never before
