"""Imports from the checkout root, where ./tracelab (the core only) comes ahead of any
installed copy: the subpackages that pyproject maps in from top-level folders must be found."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tracelab

ROOT = Path(__file__).resolve().parents[1]
# every subpackage, and one module of each, imported by name
IMPORTS = "import tracelab.parsers.chrome, tracelab.reports.breakdown, tracelab.workloads; import tracelab.reports"
# an editable install (pip install -e .) adds a finder that maps the folders in; `pip install .` does not
WITHOUT_EDITABLE_FINDER = "import sys; sys.meta_path[:] = [f for f in sys.meta_path if " \
                          "not getattr(f, '__module__', '').startswith('__editable__')]"


def _python(code: str, cwd: Path, path: list[str] | None = None) -> subprocess.CompletedProcess:
    prefix = f"import sys; sys.path[1:1] = {path!r}; " if path else ""
    return subprocess.run([sys.executable, "-c", prefix + code], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("install", ["pip install .", "pip install -e ."])
def test_subpackages_import_from_the_checkout_root(install):
    setup = WITHOUT_EDITABLE_FINDER + "; " if install == "pip install ." else ""
    done = _python(setup + IMPORTS + "; print(tracelab.reports.__file__, tracelab.__file__)", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    reports_file, core_file = done.stdout.split()
    assert Path(reports_file) == ROOT / "reports" / "__init__.py" and Path(core_file) == ROOT / "tracelab" / "__init__.py"


def test_subpackages_are_pyprojects_package_dirs():
    tomllib = pytest.importorskip("tomllib")
    mapped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert {name.removeprefix("tracelab.") for name in mapped if name != "tracelab"} == set(tracelab.SUBPACKAGES)


@pytest.mark.slow
def test_built_package_imports_from_the_root_and_from_elsewhere(tmp_path):
    """A real build (pip install --target, no dependencies): imported from a neutral folder it is
    the installed copy, from the checkout root the checkout's, whole either way."""
    target, source = tmp_path / "site", tmp_path / "source"  # built from a copy: the build leaves build/ behind
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "tracelab", *tracelab.SUBPACKAGES):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                            "--target", str(target), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    assert (target / "tracelab" / "reports" / "breakdown.py").is_file()
    code = WITHOUT_EDITABLE_FINDER + "; " + IMPORTS + "; print(tracelab.reports.__file__)"
    elsewhere = _python(code, cwd=tmp_path, path=[str(target)])
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert Path(elsewhere.stdout.strip()) == target / "tracelab" / "reports" / "__init__.py"
    at_root = _python(code, cwd=ROOT, path=[str(target)])
    assert at_root.returncode == 0, at_root.stderr
    assert Path(at_root.stdout.strip()) == ROOT / "reports" / "__init__.py"


PACKAGES = {"tracelab", *(f"tracelab.{n}" for n in tracelab.SUBPACKAGES)}


def _module_names() -> dict[str, Path]:
    """tracelab's modules by dotted name, from the folders pyproject maps in."""
    folders = {"tracelab": ROOT / "tracelab", **{f"tracelab.{n}": ROOT / n for n in tracelab.SUBPACKAGES}}
    return {(pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"): f
            for pkg, folder in folders.items() for f in sorted(folder.glob("*.py"))}


def _imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ours that `name` imports anywhere in it (inside functions too). A package's
    __init__ is not counted: every module runs its package's first, that is no choice of its own."""
    base = name if path.stem == "__init__" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parent = ".".join(base.split(".")[: len(base.split(".")) - node.level + 1]) if node.level else ""
            module = ".".join(filter(None, [parent, node.module]))
            targets = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {t for t in targets if t in known and t != name and t not in PACKAGES}
    return found


def test_no_import_cycles():
    modules = _module_names()
    graph = {name: _imported_modules(name, path, set(modules)) for name, path in modules.items()}

    def cycle_from(start: str, at: str, seen: tuple[str, ...]) -> tuple[str, ...] | None:
        for nxt in sorted(graph[at]):
            if nxt == start:
                return (*seen, nxt)
            if nxt not in seen:
                if found := cycle_from(start, nxt, (*seen, nxt)):
                    return found
        return None

    cycles = [c for name in graph if (c := cycle_from(name, name, (name,)))]
    assert not cycles, " -> ".join(cycles[0])
