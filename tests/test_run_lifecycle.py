"""tracelab run before and after the ranks: refusals that come before torch is imported,
no torch at all, the profiler's chatter kept off the terminal, SIGINT/SIGTERM passed on to
every rank and recorded in run.json, traces cut short set aside."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tracelab.run import launch, machine, runner

from tracelab.ingest import results
from tracelab.core.errors import RunError
from tracelab.ingest.loading import expand
from tracelab.run.runner import Plan, RunSpec

ROOT = Path(__file__).resolve().parents[1]
TORCH_RUN = ROOT / "tests" / "data" / "decode-2gpu-torch"  # a real 2-rank Kineto pair


def _tracelab_without_torch(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    """`tracelab ARGS` from the checkout root where `import torch` fails as if torch were not
    installed (a package of that name first on sys.path raising ModuleNotFoundError)."""
    fake = tmp_path / "no-torch" / "torch"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    code = (f"import sys; sys.path.insert(0, {str(fake.parent)!r}); sys.argv = ['tracelab', *{list(args)!r}]; "
            "from tracelab.cli import main; main()")
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    return done, time.monotonic() - t0


@pytest.mark.slow
def test_without_torch_run_is_one_line(tmp_path):
    done, _ = _tracelab_without_torch(tmp_path, "run", "decode", "--ranks", "2", "--out", str(tmp_path / "runs"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "tracelab run needs PyTorch (pip install 'tracelab[run]')" in done.stderr
    assert not (tmp_path / "runs").exists()


BAD_OPTIONS = [
    (["run", "nope"], "unknown workload 'nope'"),
    (["run", "decode", "--ranks", "0"], "--ranks: must be at least 1, not 0"),
    (["run", "decode", "--backend", "bogus"], "unknown backend 'bogus'"),
    (["run", "decode", "--nnodes", "2"], "several nodes need --rdzv-endpoint"),
    (["run", "decode", "--nnodes", "two", "--rdzv-endpoint", "host:29500"], "expected a number or MIN:MAX"),
    (["run", "decode", "--", "--out", "elsewhere"], "give --out to tracelab run"),
    (["run", "decode", "--", "--backend=none"], "give --backend to tracelab run"),
    (["run", "decode", "--ranks", "two"], "Invalid value for '--ranks'"),
]
if machine.no_gpu_for_sure():
    BAD_OPTIONS += [(["run", "decode", "--backend", b], f"{b} needs a CUDA GPU") for b in ("proton", "nsys")]


def _refusal(args: list[str], monkeypatch, tmp_path: Path) -> str:
    """What `tracelab ARGS` says, in this process, with `import torch` made to fail."""
    from typer.testing import CliRunner

    from tracelab.cli import app
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0
    return f"{result.output}{result.exception or ''}"


@pytest.mark.parametrize("args, words", BAD_OPTIONS, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_bad_options_are_refused_before_torch_is_imported(tmp_path, monkeypatch, args, words):
    # torch cannot be imported here: the refusal must come first (it took 13-26 s of torch import)
    t0 = time.perf_counter()
    said = _refusal(args, monkeypatch, tmp_path)
    assert words in said and "PyTorch" not in said
    assert time.perf_counter() - t0 < 0.5 and not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_bad_option_from_the_command_line_is_one_line(tmp_path):
    done, _ = _tracelab_without_torch(tmp_path, "run", "decode", "--ranks", "0")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "at least 1, not 0" in done.stderr


# ---- the profiler's chatter -------------------------------------------------------------------

NOISE = [
    # (a line of torchrun's output, run on a GPU?, kept off the terminal?)
    ("[default0]:USDT:2026-11-23 18:35:09 7097:7097 SyncActivityProfilerHandler.cpp:52] profiler_start", False, True),
    ("[default1]:USDT:2026-11-23 18:35:24 7098:7098 SyncActivityProfilerHandler.cpp:59] profiler_stop", True, True),
    ("[default0]:ERROR:2026-11-23 18:35:09 7097:7097 DeviceProperties.cpp:47] gpuGetDeviceCount failed with code 35",
     False, True),
    ("[default0]:ERROR:2026-11-23 18:35:09 7097:7097 DeviceProperties.cpp:47] gpuGetDeviceCount failed with code 35",
     True, False),  # on a GPU machine the driver is missing: a real error
    ("[default0]:ERROR:2026-11-23 18:35:09 7097:7097 DeviceProperties.cpp:47] gpuGetDeviceCount failed with code 2",
     False, False),
    ("[default0]:USDT:2026-11-23 18:35:09 7097:7097 Other.cpp:1] something else", False, False),
    ("[default0]:rank 0: 2.903 s per sample, 68.90 tokens/s", False, False),
    ("[default1]:ValueError: profiler_start", False, False),
    ("[default1]:[rank1]:[W1206 03:38:56.630018985 CPUAllocator.cpp:245] Memory block of unknown size was allocated "
     "before the profiling started, profiler results will not include the deallocation event", True, True),
    ("[default1]:[rank1]:[W1206 03:38:56.630018985 CPUAllocator.cpp:245] Memory block of size 8 freed twice", False, False),
]


@pytest.mark.parametrize("line, gpu, noise", NOISE)
def test_noise(line, gpu, noise):
    assert launch.is_noise(line, gpu) == noise


def test_launch_keeps_noise_off_the_terminal_but_in_its_output():
    lines = [line for line, _, _ in NOISE]
    script = "".join(f"echo {json.dumps(line)}\n" for line in lines)
    seen: list[str] = []
    status, output = launch.launch(["bash", "-c", script], dict(os.environ), seen.append, gpu=False)
    assert status == 0 and output == lines
    assert seen == [line for line, gpu, noise in NOISE if not launch.is_noise(line, False)]
    assert not any("USDT" in line and "profiler_" in line for line in seen)


# ---- SIGINT and SIGTERM ---------------------------------------------------------------------

FAKE_TORCHRUN = textwrap.dedent('''
    # two "ranks" that note the signal they get, as torchrun's workers would finish their traces
    import os, signal, subprocess, sys, time
    out = sys.argv[1]
    rank = """
    import os, signal, sys, time
    def done(signum, frame):
        print("Traceback (most recent call last):", flush=True)  # as a rank's KeyboardInterrupt prints
        open(os.path.join(sys.argv[1], "rank%s.%s" % (sys.argv[2], signal.Signals(signum).name)), "w").close()
        sys.exit(0)
    signal.signal(signal.SIGINT, done)
    signal.signal(signal.SIGTERM, done)
    open(os.path.join(sys.argv[1], "rank%s.ready" % sys.argv[2]), "w").close()
    time.sleep(60)
    """
    ranks = [subprocess.Popen([sys.executable, "-c", rank, out, str(r)]) for r in (0, 1)]
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    while any(p.poll() is None for p in ranks):
        time.sleep(0.05)
''')


def _signal_when_ready(folder: Path, signum: int) -> threading.Thread:
    def send() -> None:
        deadline = time.monotonic() + 60
        while len(list(folder.glob("rank*.ready"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signum)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_goes_on_to_every_rank(tmp_path, signum):
    (fake := tmp_path / "torchrun.py").write_text(FAKE_TORCHRUN)
    original = signal.getsignal(signum)
    if original is signal.SIG_IGN:  # a job a shell started with & ignores SIGINT, and stop_on_signals leaves it so
        signal.signal(signum, signal.default_int_handler)
    try:
        before = signal.getsignal(signum)
        _signal_when_ready(tmp_path, signum)
        seen: list[str] = []
        with pytest.raises(launch.Stopped) as stop, launch.stop_on_signals():
            launch.launch([sys.executable, str(fake), str(tmp_path)], dict(os.environ), seen.append, gpu=False)
        assert signal.getsignal(signum) is before  # the handler put back
    finally:
        signal.signal(signum, original)
    assert stop.value.signum == signum
    name = signal.Signals(signum).name
    assert sorted(p.name for p in tmp_path.glob(f"rank*.{name}")) == [f"rank0.{name}", f"rank1.{name}"]
    assert not any("Traceback" in line for line in seen), seen  # what the ranks print once stopped stays off


def test_an_ignored_signal_stays_ignored():
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with launch.stop_on_signals():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def _plan(tmp_path: Path) -> Plan:
    return Plan(RunSpec("decode", 2, "torch", tmp_path / "runs"), "torch", "tracelab.workloads.decode", {}, 0)


def _rank_files(run_dir: Path, cut_rank: int) -> None:
    """What two ranks leave: results and traces, the trace of `cut_rank` cut short."""
    for rank in (0, 1):
        (run_dir / results.RESULTS_FILE.format(rank=rank)).write_text(json.dumps({"rank": rank}))
        data = (TORCH_RUN / f"rank{rank}.pt.trace.json.gz").read_bytes()
        (run_dir / f"rank{rank}.pt.trace.json.gz").write_bytes(data[: len(data) // 2] if rank == cut_rank else data)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_is_marked_and_its_cut_trace_set_aside(tmp_path, monkeypatch, signum):
    pytest.importorskip("torch")  # run.json records torch's version

    def stopped(cmd, env, on_line, gpu):
        _rank_files(Path(cmd[cmd.index("--out") + 1]), cut_rank=1)
        raise launch.Stopped(signum)

    monkeypatch.setattr(runner, "launch", stopped)
    with pytest.raises(runner.RunInterrupted) as e:
        runner.execute(_plan(tmp_path))
    (run_dir,) = (tmp_path / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "interrupted" and e.value.signum == signum
    assert record["traces"] == ["rank0.pt.trace.json.gz"]
    assert record["partial_traces"] == ["rank1.pt.trace.json.gz.partial"]
    assert "rank1.pt.trace.json.gz.partial" in str(e.value) and signal.Signals(signum).name in str(e.value)
    assert expand([run_dir]) == [run_dir / "rank0.pt.trace.json.gz"]  # a folder reader skips the cut one


def test_a_failed_run_sets_aside_its_cut_trace_too(tmp_path, monkeypatch):
    pytest.importorskip("torch")

    def failed(cmd, env, on_line, gpu):
        _rank_files(Path(cmd[cmd.index("--out") + 1]), cut_rank=0)
        return 1, ["[default0]:boom"]

    monkeypatch.setattr(runner, "launch", failed)
    with pytest.raises(RunError, match=r"cut short \(renamed \*\.partial\): rank0\.pt\.trace\.json\.gz\.partial"):
        runner.execute(_plan(tmp_path))
    (run_dir,) = (tmp_path / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert (record["status"], record["traces"]) == ("failed", ["rank1.pt.trace.json.gz"])


def _truncated(path: Path, tmp: Path) -> Path:
    cut = tmp / f"cut-{path.name}"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return cut


@pytest.mark.parametrize("rel", ["decode-2gpu-torch/rank0.pt.trace.json.gz", "decode-2gpu-proton/rank0.hatchet",
                                 "decode-2gpu-nsys/rank0.sqlite"])
def test_complete_and_cut_traces_told_apart(tmp_path, rel):
    whole = tmp_path / Path(rel).name
    shutil.copy(ROOT / "tests" / "data" / rel, whole)
    assert runner.is_complete(whole)
    assert not runner.is_complete(_truncated(whole, tmp_path))


@pytest.mark.slow
def test_sigint_of_a_real_run_marks_run_json(tmp_path):
    """`tracelab run` itself, stopped with SIGINT while its ranks run (slow: torch starts)."""
    pytest.importorskip("torch")
    proc = subprocess.Popen([sys.executable, "-m", "tracelab", "run", "decode", "--ranks", "2", "--backend", "torch",
                             "--out", str(tmp_path), "--", "--new-tokens", "200", "--samples", "50"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as from a terminal
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("*/logs/**/stderr.log")) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # the ranks are in their decode loop
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "Traceback" not in err and err.splitlines()[-1].startswith("tracelab: error: "), err  # issue 29
    (run_dir,) = tmp_path.iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "interrupted" and "run stopped" in err.splitlines()[-1]
    for name in record["traces"]:
        assert runner.is_complete(run_dir / name)


def test_run_json_records_the_machines_load_per_cpu_at_start_and_end(tmp_path, monkeypatch):
    """What else the machine ran (the gate says where its two sides differ): os.getloadavg's 1-minute
    figure over the CPUs this process may use, at launch and at the end."""
    pytest.importorskip("torch")
    loads = iter([3.0, 6.0])
    monkeypatch.setattr(os, "getloadavg", lambda: (next(loads), 0.0, 0.0))
    cpus = len(os.sched_getaffinity(0))

    def ran(cmd, env, on_line, gpu):
        _rank_files(Path(cmd[cmd.index("--out") + 1]), cut_rank=None)
        return 0, []

    monkeypatch.setattr(runner, "launch", ran)
    runner.execute(_plan(tmp_path))
    (run_dir,) = (tmp_path / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["load_per_cpu"] == {"start": round(3.0 / cpus, 3), "end": round(6.0 / cpus, 3)}
