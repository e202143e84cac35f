"""The suite's own layout: test modules share code through tests/helpers.py (fixtures through
conftest.py), never by importing one another, and no test reaches into typer's internals, so
that a change to one test module or a typer upgrade breaks only what it should."""
from __future__ import annotations

import ast
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from helpers import import_statements

TESTS = Path(__file__).resolve().parent


@lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for every check here (the suite is ~130 files)."""
    return ast.parse(path.read_text())


def _imported(path: Path) -> set[str]:
    out = set()
    for node in import_statements(_tree(path)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def _is_test_module(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


def test_no_module_imports_a_test_module_or_conftest():
    found = {p.name: sorted(m for m in _imported(p) if _is_test_module(m)) for p in sorted(TESTS.glob("*.py"))}
    assert {name: mods for name, mods in found.items() if mods} == {}


def test_the_check_sees_such_an_import(tmp_path):
    bad = tmp_path / "test_bad.py"
    bad.write_text("def f():\n    from tests.test_steps import x\n")
    assert {m for m in _imported(bad) if _is_test_module(m)} == {"tests.test_steps"}


NESTED = """
import a
def f():
    import b
    class C:
        from c import x
try:
    import d
except ImportError:
    import e
else:
    import f
finally:
    import g
with open("x") as h:
    for i in range(2):
        while True:
            if i:
                import h
            else:
                import i
match y:
    case 1:
        import j
lambda: __import__("not_a_statement")
"""


def test_the_statement_walk_finds_every_import_ast_walk_finds():
    """helpers.import_statements, which the layout checks use, against ast.walk: imports at every depth."""
    tree = ast.parse(NESTED)
    want = [ast.dump(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    got = [ast.dump(n) for n in import_statements(tree)]
    assert sorted(got) == sorted(want) and len(got) == 10


def test_nothing_patches_typer():
    """typer's public testing API (typer.testing.CliRunner) or tracelab.cli.main, nothing under it."""
    private = ("typer.main", "typer.testing._", "_get_command", "typer._")
    found = [p.name for p in TESTS.glob("*.py") if p != Path(__file__) and any(n in p.read_text() for n in private)]
    assert found == []


OURS = ("tracelab", "parsers", "reports", "workloads")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def _private_imports(path: Path) -> list[str]:
    """Each private name of ours a module binds: `from tracelab.x import _y`, or a helper module
    bound whole under its private name (`from tracelab.parsers import _steps`, `import
    tracelab.parsers._steps as s`). A helper module's public names (`from tracelab.parsers._steps
    import assign`) are public to the tests, as they are to the rest of the package."""
    found = []
    for node in import_statements(_tree(path)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in OURS:
            found += [f"{node.module}.{a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in OURS and any(map(_private, a.name.split(".")))]
    return found


def test_no_test_imports_a_private_name():
    """Tests go through public names: a name worth testing alone is public in its module, else it
    is tested through the public function that uses it."""
    found = {p.name: _private_imports(p) for p in sorted(TESTS.glob("*.py"))}
    assert {name: names for name, names in found.items() if names} == {}


def test_the_check_sees_private_imports(tmp_path):
    bad = tmp_path / "test_bad.py"
    bad.write_text("from tracelab.reports.findings.findings import _device, straggler_findings\n"
                   "from tracelab.parsers import _steps, chrome\nfrom tracelab.parsers._steps import assign\n"
                   "import tracelab.parsers._kineto_json as K\nfrom tracelab import __version__\n"
                   "def f():\n    from pandas import _libs\n")
    assert _private_imports(bad) == ["tracelab.reports.findings.findings._device", "tracelab.parsers._steps",
                                     "tracelab.parsers._kineto_json"]


# Every xdist worker imports every test module to collect it: a heavy package imported at module
# level is paid by each worker, whether or not it runs the tests that need it.
HEAVY = ("torch", "scipy", "triton")
LIGHT_WORKLOADS = ("tracelab.workloads.configs",)  # the workloads' modules that import no torch


def _heavy(name: str) -> bool:
    if name in LIGHT_WORKLOADS:
        return False
    return name.split(".")[0] in HEAVY or name.startswith("tracelab.workloads.")


def _collection_imports(path: Path) -> list[str]:
    """The heavy modules a module imports at its top level (`import`, `from ... import`, a
    module-level `pytest.importorskip("...")`), i.e. while pytest collects it."""
    found = []
    for node in _tree(path).body:
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _heavy(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [f"{node.module}.{a.name}" for a in node.names  # a module of the workloads by name
                      if _heavy(node.module) or (node.module == "tracelab.workloads" and _heavy(f"{node.module}.{a.name}"))]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue  # a function body runs in its test, not at collection
        for call in ast.walk(node):
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "importorskip"
                    and call.args and isinstance(call.args[0], ast.Constant) and _heavy(call.args[0].value)):
                found.append(call.args[0].value)
    return found


def test_collecting_the_tests_imports_no_heavy_package():
    """Such a module uses helpers.LazyModule (imported at its first use) and helpers.needs (skips
    where the package is missing, without importing it)."""
    modules = [p for p in sorted(TESTS.glob("*.py")) if not p.name.startswith("make_")]  # make_*: scripts
    found = {p.name: _collection_imports(p) for p in modules}
    assert {name: mods for name, mods in found.items() if mods} == {}


def test_the_check_sees_heavy_imports_at_module_level(tmp_path):
    bad = tmp_path / "test_bad.py"
    bad.write_text("import torch.nn as nn\nfrom scipy import stats\nfrom tracelab.workloads import decode\n"
                   "from tracelab.workloads.model import Transformer\nfrom tracelab.workloads.configs import CONFIGS\n"
                   "import pytest\ntriton = pytest.importorskip('triton')\nfrom tracelab.run import runner\n"
                   "def f():\n    import torch\n")
    assert _collection_imports(bad) == ["torch.nn", "scipy.stats", "tracelab.workloads.decode",
                                        "tracelab.workloads.model.Transformer", "triton"]


LIGHT_OPTIONS = "tracelab.workloads.options"  # the workloads' options: parsed without torch


def _imports_torch_anywhere(path: Path) -> list[str]:
    """torch, its modules and the workloads' (which import it) that a module imports anywhere: in
    its tests too, or as helpers.LazyModule("...")."""
    names = set()
    for node in import_statements(_tree(path)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif node.module and not node.level:
            names |= {node.module, *(f"{node.module}.{a.name}" for a in node.names if node.module == "tracelab.workloads")}
    names |= {call.args[0].value for call in ast.walk(_tree(path)) if isinstance(call, ast.Call)
              and getattr(call.func, "id", None) == "LazyModule" and call.args and isinstance(call.args[0], ast.Constant)}
    return sorted(n for n in names if n.split(".")[0] == "torch" or (
        n.startswith("tracelab.workloads.") and not n.startswith((LIGHT_OPTIONS, *LIGHT_WORKLOADS))))


def _torch_modules() -> set[str]:
    """conftest.TORCH_MODULES, read from its syntax tree (no test module imports conftest)."""
    (value,) = [node.value for node in _tree(TESTS / "conftest.py").body if isinstance(node, ast.Assign)
                and [getattr(t, "id", None) for t in node.targets] == ["TORCH_MODULES"]]
    return set(ast.literal_eval(value.args[0]))


def test_the_modules_that_import_torch_are_one_workers():
    """conftest runs TORCH_MODULES in one xdist worker (torch's import paid once): every module
    that imports torch or a workload in its text is there, and each name there is a test module."""
    modules = sorted(TESTS.glob("test_*.py"))
    assert _torch_modules() <= {p.name for p in modules}
    assert {p.name: found for p in modules if (found := _imports_torch_anywhere(p)) and p.name not in _torch_modules()} == {}


def test_the_torch_check_sees_each_form(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text("import pytest\nfrom helpers import LazyModule\nlm = LazyModule('tracelab.workloads.lm')\n"
                     "def test_x():\n    import torch.nn\n    from tracelab.workloads import late, configs\n"
                     "    from tracelab.workloads.options import decode\n")
    assert _imports_torch_anywhere(probe) == ["torch.nn", "tracelab.workloads.late", "tracelab.workloads.lm"]


def test_a_lazy_module_is_imported_at_its_first_public_name(tmp_path, monkeypatch):
    from helpers import LazyModule

    (tmp_path / "lazy_probe_mod.py").write_text("answer = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    lazy = LazyModule("lazy_probe_mod")
    try:
        assert getattr(lazy, "_mock_name", None) is None  # what collection asks of every object
        assert "lazy_probe_mod" not in sys.modules
        assert lazy.answer == 42 and "lazy_probe_mod" in sys.modules
        with pytest.raises(AttributeError):
            lazy.question
    finally:
        sys.modules.pop("lazy_probe_mod", None)
