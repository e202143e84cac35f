"""Options (tracelab/core/options.py): one value carries the step pattern, scheduler, limits, cache
settings and memory budget; Options.from_environment is the only reader of the environment in
tracelab, its parsers and reports (the run side, which launches torchrun, excepted); an Options
given in Python wins over every variable, in this process and in the workers that parse."""
from __future__ import annotations

import ast
import gzip
import json
import os
import pickle
import shutil
import time
from pathlib import Path

import pytest

import tracelab
from helpers import DATA, ROOT
from tracelab import Session
from tracelab.core.errors import MemoryLimitError, TraceFormatError, UsageError
from tracelab.core.options import Options
from tracelab.ingest import cache

RUN = DATA / "train-2gpu-torch"  # two real Kineto ranks
RANK0 = RUN / "rank0.pt.trace.json.gz"
PACKAGE = ROOT / "tracelab"
RUN_SIDE = {"run", "workloads"}  # launch torchrun: set and read their child processes' variables
READER = ("tracelab/core/options.py", "Options.from_environment")
ENV_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


class _EnvReads(ast.NodeVisitor):
    """Each use of os.environ, os.getenv and the like (however os is imported), with the
    function or class it sits in."""

    def __init__(self) -> None:
        self.scope: list[str] = []
        self.os_names = {"os"}
        self.found: list[tuple[str, int]] = []

    def _scoped(self, node) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_Import(self, node: ast.Import) -> None:
        self.os_names |= {a.asname or a.name for a in node.names if a.name == "os"}

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "os" and any(a.name in ENV_NAMES for a in node.names):
            self.found.append((".".join(self.scope), node.lineno))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in ENV_NAMES and isinstance(node.value, ast.Name) and node.value.id in self.os_names:
            self.found.append((".".join(self.scope), node.lineno))
        self.generic_visit(node)


def env_reads(source: str) -> list[tuple[str, int]]:
    if not any(name in source for name in ("environ", "getenv", "putenv")):  # none there: no need to parse
        return []
    visitor = _EnvReads()
    visitor.visit(ast.parse(source))
    return visitor.found


def _package_modules() -> list[Path]:
    """Every module of tracelab as installed: tracelab/ with parsers/ and reports/ (symlinked in)."""
    found = []
    for folder, subfolders, files in os.walk(PACKAGE, followlinks=True):
        if Path(folder) == PACKAGE:
            subfolders[:] = [d for d in subfolders if d not in RUN_SIDE]
        found += [Path(folder) / f for f in files if f.endswith(".py")]
    return found


def test_only_from_environment_reads_the_environment():
    modules = _package_modules()
    assert {"session.py", "chrome.py", "cachedir.py", "limits.py"} <= {m.name for m in modules}
    reads = [(str(m.relative_to(ROOT)), where, line) for m in modules
             for where, line in env_reads(m.read_text())]
    assert [(path, where) for path, where, _ in reads] == [READER], reads


@pytest.mark.parametrize("source", [
    "import os\ndef f():\n    return os.environ.get('X')",
    "import os as o\nclass C:\n    def f(self):\n        return o.getenv('X')",
    "from os import environ",
    "import os\nos.environ['X'] = '1'",
])
def test_the_check_finds_each_way_of_reading(source):
    assert len(env_reads(source)) == 1
    assert env_reads("import os\nos.path.join('a', 'b')") == []


# ---- from_environment --------------------------------------------------------------------------

@pytest.mark.parametrize("variable, value, field, expected", [
    ("TRACELAB_STEP_PATTERN", "decode_one_token", "step_pattern", "decode_one_token"),
    ("TRACELAB_STEP_PATTERN", "", "step_pattern", None),
    ("TRACELAB_SCHEDULER", "tcp://127.0.0.1:9", "scheduler", "tcp://127.0.0.1:9"),
    ("TRACELAB_MAX_TRACE_BYTES", "2e9", "max_trace_bytes", 2_000_000_000),
    ("TRACELAB_MAX_TRACE_BYTES", "", "max_trace_bytes", 2 * 1024**3),
    ("TRACELAB_MAX_NAME_CHARS", "100", "max_name_chars", 100),
    ("TRACELAB_MAX_MEMORY_BYTES", "0", "max_memory_bytes", 0),
    ("TRACELAB_MAX_MEMORY_BYTES", " ", "max_memory_bytes", None),
    ("TRACELAB_CACHE", "0", "cache", False),
    ("TRACELAB_CACHE", "1", "cache", True),
    ("TRACELAB_CACHE_DIR", "/somewhere/else", "cache_dir", Path("/somewhere/else")),
    ("TRACELAB_CACHE_MAX_BYTES", "1000", "cache_max_bytes", 1000),
    ("MALLOC_MMAP_THRESHOLD_", "131072", "keep_malloc", True),
])
def test_each_variable_sets_its_field(monkeypatch, variable, value, field, expected):
    monkeypatch.setenv(variable, value)
    assert getattr(Options.from_environment(), field) == expected


def test_unset_variables_give_the_defaults(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("TRACELAB_", "MALLOC_")):
            monkeypatch.delenv(name)
    assert Options.from_environment() == Options()


@pytest.mark.parametrize("value", ["lots", "-1"])
def test_a_bad_number_names_its_variable_unless_the_field_is_given(monkeypatch, value):
    monkeypatch.setenv("TRACELAB_MAX_TRACE_BYTES", value)
    with pytest.raises(UsageError, match=f"TRACELAB_MAX_TRACE_BYTES: {value!r} is not a number of 0 or more"):
        Options.from_environment()
    assert Options.from_environment(max_trace_bytes=5).max_trace_bytes == 5  # the variable is not read


def test_overrides_win_and_none_means_not_given(monkeypatch):
    monkeypatch.setenv("TRACELAB_STEP_PATTERN", "from_env")
    monkeypatch.setenv("TRACELAB_CACHE", "0")
    assert Options.from_environment(step_pattern=None).step_pattern == "from_env"
    given = Options.from_environment(step_pattern="given", cache=True)
    assert (given.step_pattern, given.cache) == ("given", True)
    with pytest.raises(TypeError, match="no field 'cache_folder'"):
        Options.from_environment(cache_folder="/tmp")


@pytest.mark.parametrize("field, value", [("max_trace_bytes", -1), ("max_name_chars", 2.5),
                                          ("cache_max_bytes", None), ("max_memory_bytes", "1e9")])
def test_a_bound_given_in_python_is_checked(field, value):
    with pytest.raises(UsageError, match=f"Options.{field}: {value!r} is not a whole number of 0 or more"):
        Options(**{field: value})


def test_options_travel_pickled_whole():
    options = Options(step_pattern="x", max_name_chars=7, cache=False, cache_dir=Path("/c"), max_memory_bytes=0)
    assert pickle.loads(pickle.dumps(options)) == options


# ---- an Options given in Python wins over the environment ------------------------------------

def _longest_name(path: Path) -> int:
    return max(len(e.get("name", "")) for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"])


@pytest.mark.slow
@pytest.mark.pool
@pytest.mark.parametrize("inputs, workers, ranks", [
    ([RANK0], 1, 1),
    pytest.param([RUN], 2, 2, marks=pytest.mark.slow),  # a pool of two workers (~1.5 s)
])
def test_name_limit_given_wins_in_the_workers(monkeypatch, inputs, workers, ranks):
    """A variable that would refuse every name is not what the workers use when the caller gives
    Options; the caller's limit, one below the longest name of the trace (read here from its JSON),
    is what refuses it."""
    longest = max(_longest_name(f) for f in RUN.glob("*.json.gz"))
    monkeypatch.setenv("TRACELAB_MAX_NAME_CHARS", "10")
    with pytest.raises(TraceFormatError, match="set TRACELAB_MAX_NAME_CHARS"):
        tracelab.load_many(inputs, workers=workers, options=Options.from_environment(cache=False))
    loaded = tracelab.load_many(inputs, workers=workers, options=Options(cache=False, max_name_chars=longest))
    assert len(loaded) == ranks
    monkeypatch.delenv("TRACELAB_MAX_NAME_CHARS")
    with pytest.raises(TraceFormatError, match=f"a name of {longest:,} characters, over the limit of {longest - 1:,}"):
        tracelab.load_many(inputs, workers=workers, options=Options(cache=False, max_name_chars=longest - 1))


def test_trace_size_limit_given_wins(monkeypatch):
    inflated_bytes = len(gzip.decompress(RANK0.read_bytes()))
    monkeypatch.setenv("TRACELAB_MAX_TRACE_BYTES", "100")
    assert len(tracelab.load(RANK0, options=Options(cache=False, max_trace_bytes=inflated_bytes)).events)
    with pytest.raises(TraceFormatError, match=f"inflates to more than {inflated_bytes - 1:,} bytes"):
        tracelab.load(RANK0, options=Options(cache=False, max_trace_bytes=inflated_bytes - 1))
    with pytest.raises(TraceFormatError, match="more than 100 bytes"):
        tracelab.load(RANK0)  # no Options: the environment's


def test_memory_budget_given_wins(monkeypatch):
    monkeypatch.setenv("TRACELAB_MAX_MEMORY_BYTES", "1")
    with pytest.raises(MemoryLimitError, match="TRACELAB_MAX_MEMORY_BYTES"):
        Session.open([str(RANK0)])
    assert len(Session.open([str(RANK0)], Options(cache=False, max_memory_bytes=0)).profiles) == 1
    monkeypatch.delenv("TRACELAB_MAX_MEMORY_BYTES")
    with pytest.raises(MemoryLimitError):
        Session.open([str(RANK0)], Options(cache=False, max_memory_bytes=1))


@pytest.fixture
def settled_run(tmp_path, monkeypatch) -> Path:
    """A run folder of one rank, its file cached whatever its size, settled past the racy window."""
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    monkeypatch.setattr(cache, "RACY_S", 0.05)
    (folder := tmp_path / "run").mkdir()
    shutil.copy(RANK0, folder)
    time.sleep(0.15)
    return folder


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_dir()) if folder.exists() else []


@pytest.mark.slow
def test_cache_settings_given_win(settled_run, tmp_path, monkeypatch):
    env_dir, mine = tmp_path / "env-cache", tmp_path / "my-cache"
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(env_dir))
    monkeypatch.setenv("TRACELAB_CACHE", "1")
    tracelab.load_many(settled_run, options=Options(cache=False))
    assert _entries(env_dir) == [] and _entries(mine) == []
    tracelab.load_many(settled_run, options=Options(cache_dir=mine))
    assert len(_entries(mine)) == 1 and _entries(env_dir) == []  # the rank file's Parquet entry
    tracelab.load_many(settled_run)  # no Options: the environment's folder
    assert len(_entries(env_dir)) == 1
    monkeypatch.setenv("TRACELAB_CACHE", "0")
    Session.open([str(settled_run)], Options(cache_dir=tmp_path / "third"), keep_events=True)
    assert len(_entries(tmp_path / "third")) == 1
