"""What several test modules share, in one place: where the traces are, strict JSON, the CLI
run in this process, the HTML report opened in Chromium, the Chrome trace format checked, and
independent readings and small frames more than one module compares against. Test modules
import from here (and from the themed builders: malformed.py, shifted.py, promise.py), never
from one another or from conftest.py, which holds the fixtures."""
from __future__ import annotations

import ast
import gzip
import importlib
import importlib.util
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pandas as pd
import pytest

if TYPE_CHECKING:  # the annotation's type only; the module is imported where it is used
    from tracelab.reports.memory.memory import RankMemory

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
PUBLIC_TRACES = DATA / "public"  # the few public traces a plain clone's tests need
SHARED_TRACES = ROOT.parent / "shared" / "traces"  # the full collection, beside the checkout in CI
REQUIRE_SHARED = "TRACELAB_REQUIRE_SHARED"  # set (CI's full run): a missing trace fails instead of skipping


SHARED_MARK = "shared"  # a test that reads a trace only ../shared holds: CI selects it to run beside ../shared
RUNNING_MARKS: set[str] = set()  # the marks of the test now running (conftest's pytest_runtest_setup)


def benchmark(name: str):
    """The module benchmarks/NAME.py (scripts, not a package), loaded from its file."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shared_trace(relpath: str) -> Path:
    """A public trace by its path under shared/traces (e.g. "hta/cpu_only/rank-34...json.gz"):
    the copy in tests/data/public, else ../shared/traces. When neither holds it (a plain clone
    has no ../shared) the calling test skips, naming the file. Call it inside a test.
    A test that is not slow and reads a trace tests/data/public lacks must be marked `shared`:
    CI runs the default tests in a plain clone, where they skip, and runs `-m "slow or shared"`
    beside ../shared; an unmarked one would run nowhere, so it fails, wherever it runs."""
    if (PUBLIC_TRACES / relpath).exists():
        return PUBLIC_TRACES / relpath
    if not RUNNING_MARKS & {SHARED_MARK, "slow"}:
        pytest.fail(f"{relpath} is not in tests/data/public: mark the test @pytest.mark.{SHARED_MARK} "
                    "(CI runs the tests marked so beside ../shared)")
    if (SHARED_TRACES / relpath).exists():
        return SHARED_TRACES / relpath
    reason = f"{relpath} is neither in tests/data/public nor in {SHARED_TRACES}"
    if os.environ.get(REQUIRE_SHARED):
        pytest.fail(f"{reason} ({REQUIRE_SHARED} is set)")
    pytest.skip(reason)


def needs(package: str):
    """A mark that skips a test module's tests where `package` is not installed, found without
    importing it (importorskip at module level would import it while collecting)."""
    missing = importlib.util.find_spec(package) is None
    return pytest.mark.skipif(missing, reason=f"{package} is not installed")


class LazyModule:
    """A module imported at its first attribute use, for the heavy ones (torch ~2.3 s of CPU,
    scipy.stats ~1.3 s, the workloads): every xdist worker collects every test module, so an
    import at module level is paid by each worker whether or not it runs those tests.
    A private name asked before the import is not there: collection probes every module-level
    object for private ones (pytest's `_mock_name`), and that must not import the module."""

    def __init__(self, name: str):
        self._name = name
        self._module = None

    def __getattr__(self, attr: str):
        if self._module is None:
            if attr.startswith("_"):
                raise AttributeError(attr)
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)


def slow_beyond(cases: list, fast, relpath=lambda case: case if isinstance(case, str) else None) -> list:
    """`cases` for pytest.mark.parametrize: those in `fast` run by default, the others marked slow,
    so that the default run checks a rule once per kind of input and CI's slow stage on every one.
    A fast case whose public trace (`relpath(case)`, under shared/traces; None: one of ours) only
    ../shared holds is marked shared (shared_trace says why)."""
    return [pytest.param(case, marks=_shared_marks(relpath(case))) if case in fast
            else pytest.param(case, marks=pytest.mark.slow) for case in cases]


_PARAM = type(pytest.param(None))  # what pytest.param makes: values, marks, id


def slow_after(fast: int):
    """A decorator put right above @pytest.mark.parametrize: that parametrisation's first `fast`
    cases not already slow run by default, the others are marked slow, so that the default run
    checks the rule on a case or two and CI's slow stage on every one (for a list already built,
    slow_beyond marks by case)."""
    def mark(fn):
        made = fn.pytestmark[-1]  # the parametrize just below (decorators apply bottom-up)
        if made.name != "parametrize":
            raise TypeError(f"slow_after is put right above @pytest.mark.parametrize, not {made.name} ({fn.__name__})")
        names, values = made.args[0], list(made.args[1])
        single = len(names.split(",") if isinstance(names, str) else names) == 1
        cases = [v if isinstance(v, _PARAM) else pytest.param(*((v,) if single else v)) for v in values]
        kept = [c for c in cases if not any(m.name == "slow" for m in c.marks)][:fast]
        cases = [c if any(c is k for k in kept) else _slow(c) for c in cases]
        fn.pytestmark[-1] = pytest.mark.parametrize(names, cases, **made.kwargs).mark
        return fn
    return mark


def _slow(case):
    if any(m.name == "slow" for m in case.marks):
        return case
    return pytest.param(*case.values, marks=(*case.marks, pytest.mark.slow), id=case.id)


def on_shared(*values, relpath: str | None = None):
    """A parametrize case that reads public trace `relpath` (its path under shared/traces; by
    default the first value): marked shared where tests/data/public lacks it."""
    return pytest.param(*values, marks=_shared_marks(relpath or values[0]))


def _shared_marks(relpath: str | None) -> tuple:
    return (pytest.mark.shared,) if relpath and not (PUBLIC_TRACES / relpath).exists() else ()


# ---- strict JSON ----------------------------------------------------------------------------------


def _refuse(constant: str):
    raise ValueError(f"not strict JSON: {constant}")


def strict_json(text: str):
    """The document, or ValueError on NaN, Infinity or -Infinity (json.loads takes them)."""
    return json.loads(text, parse_constant=_refuse)


# ---- the import statements of a module ---------------------------------------------------------------

_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")  # the statement lists a statement holds


def import_statements(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of a syntax tree, those inside functions, classes and branches too.
    An import is a statement, so only the statement lists are walked (ast.walk visits every
    expression as well, ten times the nodes, a quarter of a check's CPU over the whole package)."""
    return _imports_in(tree.body)


def _imports_in(statements: list[ast.AST]) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in statements:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        for name in _BODIES:
            inner = getattr(node, name, None)
            if isinstance(inner, list):
                yield from _imports_in(inner)


# ---- the CLI in this process ----------------------------------------------------------------------


def stake_ns(scenario: dict) -> int:
    """What ranks a finding with this whatif JSON scenario row's saving: over its steps, the saving
    without the profiler where the row predicts it, else the profiled replay's."""
    user = scenario.get("saving_unprofiled_ns")
    return max(0, int((user if user is not None else scenario["saving_ns"]) * scenario["steps"]))


def run_cli(capsys, *args: str) -> tuple[int, list[str]]:
    """`tracelab ARGS` in this process (the CLI's own entry point): exit status, stderr lines."""
    status, _, err = run_cli_output(capsys, *args)
    return status, err.splitlines()


def run_cli_output(capsys, *args: str) -> tuple[int, str, str]:
    """`tracelab ARGS` in this process: exit status, stdout, stderr."""
    from tracelab import cli

    argv, sys.argv = sys.argv, ["tracelab", *args]
    environ = dict(os.environ)  # --step and --scheduler reach the parsers through it
    try:
        cli.main()
        status = 0
    except SystemExit as done:
        status = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    finally:
        sys.argv = argv
        os.environ.clear()
        os.environ.update(environ)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# ---- the HTML report in headless Chromium ---------------------------------------------------------

ARTIFACTS = Path(os.environ.get("TRACELAB_TEST_ARTIFACTS", ROOT / "test-artifacts"))
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def open_page(chromium: str, page: Path, screenshot: Path | None = None) -> dict:
    """Load the page headless; return its DOM after scripts ran, the console messages and
    the URLs the page (not the browser's own background services) asked the network for."""
    with tempfile.TemporaryDirectory() as tmp:
        net_log = Path(tmp) / "net.json"
        args = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp}/profile", "--enable-logging=stderr", "--v=0",
                "--virtual-time-budget=20000", f"--log-net-log={net_log}"]
        args += [f"--screenshot={screenshot}", "--window-size=1400,3000"] if screenshot else ["--dump-dom"]
        proc = subprocess.run([*args, page.resolve().as_uri()], capture_output=True, text=True, timeout=120)
        requests = _page_requests(net_log)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return {"dom": proc.stdout, "console": console, "requests": requests, "rc": proc.returncode}


def _page_requests(net_log: Path) -> list[str]:
    """URL requests started for a page: Chromium's own (update checks, ...) have no origin."""
    log = json.loads(net_log.read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [e["params"]["url"] for e in log["events"]
            if e["type"] == start and e.get("params", {}).get("initiator", "not an origin") != "not an origin"]


def plots_in(dom: str) -> tuple[int, int]:
    """(plots the report says it rendered, plot divs that hold a plotly SVG)."""
    said = re.search(r'data-plots="(\d+)"', dom)
    drawn = len(re.findall(r'<div class="plot js-plotly-plot" id="fig\d+"', dom))
    return (int(said.group(1)) if said else -1), drawn


def check_rendered(chromium: str, page: Path) -> dict:
    got = open_page(chromium, page)
    expected = page.read_text().count('<div class="plot" id="fig')
    assert got["rc"] == 0
    assert got["console"] == [], got["console"]
    assert got["requests"] == [], got["requests"]
    assert expected > 0 and plots_in(got["dom"]) == (expected, expected)
    assert got["dom"].count('class="main-svg"') >= expected
    return got


# ---- the Chrome trace event format, as Perfetto reads it ------------------------------------------

TRACE_PHASES = {"X", "M", "s", "f"}


def format_errors(doc: dict) -> list[str]:
    """What breaks the Chrome trace event format (JSON object form) as Perfetto reads it:
    required fields per phase, named processes and threads, complete events nested on each
    track, every flow id one start and one finish, each inside a slice of its track."""
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["no traceEvents list"]
    errors, named, tracks, flows = [], set(), defaultdict(list), defaultdict(list)
    for n, e in enumerate(doc["traceEvents"]):
        found = _event_errors(e)
        errors += [f"event {n}: {m}" for m in found]
        if found:
            continue
        if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name"):
            named.add((e["name"], e["pid"]) if e["name"] == "process_name" else (e["name"], e["pid"], e["tid"]))
        elif e.get("ph") == "X":
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        elif e.get("ph") in ("s", "f"):
            flows[e.get("id")].append(e)
    for (pid, tid), spans in tracks.items():
        if ("process_name", pid) not in named or ("thread_name", pid, tid) not in named:
            errors.append(f"track {pid}/{tid} has no process or thread name")
        errors += [f"track {pid}/{tid}: {m}" for m in _nesting_errors(spans)]
    for fid, ends in flows.items():
        if sorted(e["ph"] for e in ends) != ["f", "s"]:
            errors.append(f"flow {fid}: {[e['ph'] for e in ends]}, not one s and one f")
        errors += [f"flow {fid} at {e['ts']} binds to no slice" for e in ends
                   if not any(a <= e["ts"] <= b for a, b in tracks.get((e["pid"], e["tid"]), []))]
    return errors


def _event_errors(e: dict) -> list[str]:
    ph = e.get("ph")
    if ph not in TRACE_PHASES:
        return [f"phase {ph!r}"]
    need = {"X": ("name", "pid", "tid", "ts", "dur"), "M": ("name", "pid", "args"),
            "s": ("name", "pid", "tid", "ts", "id"), "f": ("name", "pid", "tid", "ts", "id")}[ph]
    out = [f"{ph} without {k}" for k in need if k not in e]
    if out:
        return out
    if not isinstance(e["name"], str) or not all(isinstance(e[k], int) for k in ("pid", "tid") if k in e):
        out.append("name not a string or pid/tid not integers")
    out += [f"{k}={e[k]!r}" for k in ("ts", "dur") if k in e and not (isinstance(e[k], (int, float)) and e[k] >= 0)]
    if ph == "f" and e.get("bp") != "e":
        out.append("a flow finish that does not bind to its enclosing slice")
    return out


def _nesting_errors(spans: list[tuple[float, float]]) -> list[str]:
    """Complete events of one track must nest: each ends before its parent ends."""
    open_ends: list[float] = []
    for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
        while open_ends and open_ends[-1] <= start:
            open_ends.pop()
        if open_ends and end > open_ends[-1] + 1e-9:
            return [f"slice {start}-{end} overlaps its parent ending at {open_ends[-1]}"]
        open_ends.append(end)
    return []


# ---- steps read straight from the Kineto JSON -----------------------------------------------------

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}


def _ns(us) -> int:
    return round(float(us) * 1000)


def kineto_steps(path: Path, pattern: str, leave_out: str | None = None) -> dict[int, tuple[int, int]]:
    """step -> (GPU rows, their summed dur ns): each GPU event's launch call (same
    correlation), then the step range on any thread of the launch's pid holding its start;
    a pattern without a number counts its ranges in start order per pid. `leave_out`: a
    pattern of the GPU events' names not counted (searched, any case)."""
    events = json.loads(gzip.open(path).read())["traceEvents"]
    regex = re.compile(pattern, re.IGNORECASE)
    ranges = defaultdict(list)
    for e in events:
        if e.get("cat") == "user_annotation" and regex.fullmatch(e["name"]):
            ranges[e["pid"]].append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), e["name"]))
    numbered = {}
    for pid, rs in ranges.items():
        for i, (start, end, name) in enumerate(sorted(rs)):
            digits = re.findall(r"\d+", name)
            numbered.setdefault(pid, []).append((start, end, int(digits[0]) if digits else i))
    launch = {}
    for e in events:
        if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {}):
            launch.setdefault(e["args"]["correlation"], e)
    out = Counter(), Counter()
    skip = re.compile(leave_out, re.IGNORECASE) if leave_out else None
    for e in events:
        if e.get("cat") not in GPU_CATS or (skip and skip.search(e["name"])):
            continue
        call = launch.get(e["args"].get("correlation"))
        if call is None:
            continue
        at = _ns(call["ts"])
        hits = [s for start, end, s in numbered.get(call["pid"], []) if start <= at < end]
        if hits:
            out[0][hits[-1]] += 1
            out[1][hits[-1]] += _ns(e["dur"])
    return {s: (out[0][s], out[1][s]) for s in out[0]}


def kineto_step_ranges(path: Path) -> dict[int, tuple[float, float]]:
    """step number -> (start, end) in us of a CPU trace's `step N` range (tracelab run's)."""
    events = json.loads(gzip.open(path).read())["traceEvents"]
    return {int(e["name"].split()[1]): (e["ts"], e["ts"] + e["dur"]) for e in events
            if e.get("ph") == "X" and e.get("cat") == "user_annotation" and re.fullmatch(r"step \d+", e["name"])}


def kineto_cpu_stalls_us(path: Path, min_us: float = 1000.0) -> dict[int, float]:
    """step -> us of a CPU-only trace's untraced stretches of at least `min_us` while no CPU
    operator (a gloo collective's range on its thread included) ran on any thread, each in the step
    whose range holds its end, from the first step's start on: timeline/stalls.py's rule, straight
    from the JSON."""
    events = json.loads(gzip.open(path).read())["traceEvents"]
    ranges = kineto_step_ranges(path)
    ops = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                 if e.get("ph") == "X" and (e.get("cat") == "cpu_op" or e["name"].startswith("gloo:")))
    merged = [list(ops[0])]
    for b, e in ops[1:]:
        if b > merged[-1][1]:
            merged.append([b, e])
        else:
            merged[-1][1] = max(merged[-1][1], e)
    per = dict.fromkeys(ranges, 0.0)
    for (_, g0), (g1, _) in zip(merged[:-1], merged[1:]):
        step = next((k for k, (b, e) in ranges.items() if b < g1 <= e), None)
        if g1 - g0 >= min_us and step is not None and g0 >= ranges[min(ranges)][0]:
            per[step] += g1 - g0
    return per


def per_step(events: pd.DataFrame) -> dict[int, tuple[int, int]]:
    g = events.dropna(subset=["step"]).groupby("step")["dur_ns"].agg(["size", "sum"])
    return {int(s): (int(n), int(t)) for s, (n, t) in g.iterrows()}


# ---- memory digests of given steps ----------------------------------------------------------------


def memory_steps(rank: int, peak: int, reserved: int | None = None, calls: tuple[int, ...] = (0, 0)) -> pd.DataFrame:
    """A rank's memory step rows: one per entry of `calls` (its allocation calls), each peaking at `peak` bytes."""
    return pd.DataFrame([{"rank": rank, "step": s, "device": 0, "allocated_start_bytes": 0, "allocated_end_bytes": 0,
                          "peak_allocated_bytes": peak, "peak_at_ns": 0, "peak_during": "", "reserved_bytes": reserved,
                          "held_back_bytes": None, "alloc_calls": c, "alloc_ns": 1000 * c, "alloc_sync_calls": 0}
                         for s, c in enumerate(calls)])


def memory_digest(steps: pd.DataFrame) -> RankMemory:
    """A rank's memory digest holding just these steps (no top allocations, no snapshot)."""
    from tracelab.reports.memory import memory as analysis

    empty = pd.DataFrame({c: [] for c in analysis.TOP_COLUMNS})
    return analysis.RankMemory(-1, steps, empty, pd.DataFrame(), pd.DataFrame())


# ---- a decode capture whose later tokens repeat the first ones' numbers ---------------------------

TOKEN_RENAME = {"token 4": "token 1", "token 5": "token 2"}  # tokens 1..5 -> a second sample's 1, 2


def renamed_token_copy(tmp_path: Path) -> Path:
    """decode-1gpu-steps-torch's trace with its ranges renamed by TOKEN_RENAME, written under tmp_path."""
    trace = json.loads(gzip.open(DATA / "decode-1gpu-steps-torch/rank0.pt.trace.json.gz").read())
    for e in trace["traceEvents"]:
        e["name"] = TOKEN_RENAME.get(e.get("name"), e.get("name"))
    out = tmp_path / "rank0.pt.trace.json"
    out.write_text(json.dumps(trace))
    return out


# ---- small frames of GPU and host rows ------------------------------------------------------------


def kernel_rows(rows: list[tuple], rank: int = 0) -> pd.DataFrame:
    """Classified kernel rows of one rank. rows: (name, stream, start, dur, launch_start, launch_dur), all in step 0."""
    from tracelab.core import classify, schema

    name, stream, start, dur, launch, launch_dur = zip(*rows)
    return schema.validate(classify.classified(schema.coerce({
        "rank": rank, "source": "torch", "kind": "kernel", "name": list(name), "device": 0, "stream": list(stream),
        "start_ns": list(start), "dur_ns": list(dur), "step": 0, "launch_start_ns": list(launch),
        "launch_dur_ns": list(launch_dur)}, n_rows=len(rows), spec=schema.PARSED)))


def host_rows(rows: list[tuple]) -> pd.DataFrame:
    """A host frame on thread 1. rows: (kind, name, start, dur)."""
    from tracelab.core import schema

    kind, name, start, dur = zip(*rows)
    return schema.host_frame(kind, name, [1] * len(rows), start, dur)


def nsys_with_memory(tmp_path: Path, rows: list[tuple]) -> Path:
    """A copy of graph-1gpu-nsys with CUDA_GPU_MEMORY_USAGE_EVENTS of these rows: (ns after its first
    kernel, address, bytes, memKind, memoryOperationType)."""
    path = tmp_path / "rank0.sqlite"
    shutil.copy(DATA / "graph-1gpu-nsys/rank0.sqlite", path)
    with sqlite3.connect(path) as con:
        pid, t0 = con.execute("SELECT globalPid, MIN(start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        con.execute("CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER, globalPid INTEGER, deviceId INTEGER, "
                    "address INTEGER, bytes INTEGER, memKind INTEGER, memoryOperationType INTEGER)")
        con.executemany("INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [(t0 + dt, pid, 0, addr, size, kind, op) for dt, addr, size, kind, op in rows])
    return path


def memory_snapshot() -> dict:
    """A snapshot as torch.cuda.memory._snapshot() lays it out: at the dump, one 20 MiB segment
    holding a 4 MiB weight (allocated before the history) and an 8 MiB activation."""
    frames = [{"filename": "/x/torch/nn/modules/linear.py", "line": 125, "name": "forward"},
              {"filename": "/w/lm.py", "line": 60, "name": "forward"}, {"filename": "/w/train.py", "line": 9, "name": "step"}]
    mib = 2**20
    trace = [{"action": "segment_alloc", "addr": 0x100, "size": 20 * mib, "stream": 0, "time_us": 1_000, "frames": []},
             {"action": "alloc", "addr": 0x100 + 4 * mib, "size": 8 * mib, "stream": 0, "time_us": 1_010, "frames": frames},
             {"action": "alloc", "addr": 0x100 + 12 * mib, "size": 2 * mib, "stream": 0, "time_us": 1_020, "frames": frames},
             {"action": "free_requested", "addr": 0x100 + 12 * mib, "size": 2 * mib, "stream": 0, "time_us": 1_030,
              "frames": frames},
             {"action": "free_completed", "addr": 0x100 + 12 * mib, "size": 2 * mib, "stream": 0, "time_us": 1_031,
              "frames": frames}]
    blocks = [{"address": 0x100, "size": 4 * mib, "requested_size": 4 * mib, "state": "active_allocated", "frames": []},
              {"address": 0x100 + 4 * mib, "size": 8 * mib, "requested_size": 8 * mib, "state": "active_allocated",
               "frames": frames},
              {"address": 0x100 + 12 * mib, "size": 8 * mib, "state": "inactive", "frames": []}]
    return {"segments": [{"device": 0, "address": 0x100, "total_size": 20 * mib, "stream": 0, "segment_type": "large",
                          "allocated_size": 12 * mib, "active_size": 12 * mib, "blocks": blocks}],
            "device_traces": [trace], "allocator_settings": {"expandable_segments": False}}


# ---- small nsys exports, in the shapes nsys wrote them ---------------------------------------------

NSYS_PID = 4242
NSYS_GLOBAL_PID = NSYS_PID << 24  # nsys's serialised GlobalId: pid in bits 24-47
NSYS_GLOBAL_TID = NSYS_GLOBAL_PID + NSYS_PID  # the process's main thread
# The tables an export holds, by the nsys that wrote it (evidence: nsys 2021.1.1's own report
# scripts join TARGET_INFO_CUDA_GPU on deviceId and name memory kinds 0-4 without ENUM tables;
# pipit's nsys 2022.2.1 export (schema 2.9.1) has EXPORT_META_DATA and TARGET_INFO_GPU and no
# ENUM tables; nsys 2024.5.1 (schema 3.13.2) has META_DATA_EXPORT and the ENUM_* tables).
NSYS_SHAPES = {
    "2021.1": {"gpu": "TARGET_INFO_CUDA_GPU", "meta": None, "enums": False, "nvtx_text_id": True},
    "2021.1-inline-nvtx": {"gpu": "TARGET_INFO_CUDA_GPU", "meta": None, "enums": False, "nvtx_text_id": False},
    "2022.2": {"gpu": "TARGET_INFO_GPU", "meta": "EXPORT_META_DATA", "enums": False, "nvtx_text_id": True},
    "2024.5": {"gpu": "TARGET_INFO_GPU", "meta": "META_DATA_EXPORT", "enums": True, "nvtx_text_id": True},
    "no-gpu-table": {"gpu": None, "meta": "META_DATA_EXPORT", "enums": True, "nvtx_text_id": True},
}
NSYS_VERSIONS = {"2021.1": ("2021.1.1.66", "2.1.0"), "2021.1-inline-nvtx": ("2021.1.1.66", "2.1.0"),
                 "2022.2": ("2022.2.1.31", "2.9.1"), "2024.5": ("2024.5.1.113", "3.13.2"),
                 "no-gpu-table": ("2024.5.1.113", "3.13.2")}
_NSYS_TABLES = {
    "StringIds": "id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL",
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, "
                                    "globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, "
                                    "returnValue INTEGER NOT NULL, callchainId INTEGER"),
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
                                   "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
                                   "globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, "
                                   "gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER, blockY INTEGER, "
                                   "blockZ INTEGER"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
                                   "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
                                   "globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, "
                                   "srcKind INTEGER, dstKind INTEGER"),
    "TARGET_INFO_CUDA_GPU": ("deviceId INTEGER NOT NULL, name TEXT, numMultiprocessors INTEGER, coreClockRate INTEGER, "
                             "computeCapabilityMajor INTEGER, computeCapabilityMinor INTEGER, numThreadsPerWarp INTEGER, "
                             "maxWarpsPerMultiprocessor INTEGER, maxIPC INTEGER"),
    "TARGET_INFO_GPU": ("id INTEGER NOT NULL, name TEXT, busLocation TEXT, totalMemory INTEGER, memoryBandwidth INTEGER, "
                        "clockRate INTEGER, smCount INTEGER, computeMajor INTEGER, computeMinor INTEGER"),
}


def _nvtx_table(text_id: bool) -> str:
    return ("start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER, "
            "color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER"
            + (", textId INTEGER, domainId INTEGER" if text_id else ", domainId INTEGER"))


def nsys_export(path: Path, shape: str, ops: list[dict], ranges: list[tuple] = (),
                device: str = "NVIDIA A100-SXM4-80GB") -> Path:
    """A small nsys SQLite export in `shape` (NSYS_SHAPES) on device 0 of one process.

    ops: dicts with kind ("kernel" or "memcpy"), name, start, end, stream and call: (start, end,
    API name) of the launch call (correlation ids are given in order); a memcpy has copy_kind and
    src_kind/dst_kind (nsys's memory kinds: 0 pageable, 1 pinned, 2 device). ranges: NVTX push/pop
    ranges on the main thread (start, end, text); a shape without NVTX textId keeps texts inline."""
    spec = NSYS_SHAPES[shape]
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        return strings.setdefault(text, len(strings) + 1)

    with closing(sqlite3.connect(path)) as con:
        for table, columns in _NSYS_TABLES.items():
            if not table.startswith("TARGET_INFO") or table == spec["gpu"]:
                con.execute(f"CREATE TABLE {table} ({columns})")
        for corr, op in enumerate(ops, start=1):
            call_start, call_end, api = op["call"]
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?, 0, NULL)",
                        (call_start, call_end, NSYS_GLOBAL_TID, corr, sid(api)))
            common = (op["start"], op["end"], 0, 1, op["stream"], corr, NSYS_GLOBAL_PID)
            if op["kind"] == "kernel":
                con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 1, 1, 128, 1, 1)",
                            (*common, sid(op["name"]), sid(op["name"].split("(")[0])))
            else:
                con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (*common, op.get("bytes", 1 << 20), op["copy_kind"], op["src_kind"], op["dst_kind"]))
        con.execute(f"CREATE TABLE NVTX_EVENTS ({_nvtx_table(spec['nvtx_text_id'])})")
        for start, end, text in ranges:
            if spec["nvtx_text_id"]:
                con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, textId) VALUES (?, ?, 59, ?, ?)",
                            (start, end, NSYS_GLOBAL_TID, sid(text)))
            else:
                con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, text) VALUES (?, ?, 59, ?, ?)",
                            (start, end, NSYS_GLOBAL_TID, text))
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in strings.items()])
        _nsys_gpu(con, spec["gpu"], device)
        _nsys_meta(con, spec, NSYS_VERSIONS[shape])
        con.commit()
    return path


def _nsys_gpu(con: sqlite3.Connection, table: str | None, device: str) -> None:
    if table == "TARGET_INFO_CUDA_GPU":
        con.execute("INSERT INTO TARGET_INFO_CUDA_GPU VALUES (0, ?, 108, 1410000000, 8, 0, 32, 64, 4)", (device,))
    elif table == "TARGET_INFO_GPU":
        con.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, ?, '0000:07:00.0', 85899345920, 2039000000000, "
                    "1410000000, 108, 8, 0)", (device,))


def _nsys_meta(con: sqlite3.Connection, spec: dict, versions: tuple[str, str]) -> None:
    if spec["meta"]:
        con.execute(f"CREATE TABLE {spec['meta']} (name TEXT, value TEXT)")
        con.executemany(f"INSERT INTO {spec['meta']} VALUES (?, ?)",
                        [("EXPORT_PRODUCT_VERSION", versions[0]), ("EXPORT_SCHEMA_VERSION", versions[1])])
    if spec["enums"]:
        con.execute("CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER PRIMARY KEY, name TEXT, label TEXT)")
        con.executemany("INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, ?)", [
            (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"), (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
            (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"), (7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown")])
        con.execute("CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER PRIMARY KEY, name TEXT, label TEXT)")
        con.executemany("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)", [
            (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"), (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"),
            (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device")])

