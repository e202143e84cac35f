"""The subpackages (parsers/, reports/, workloads/ at the checkout's top) import as tracelab.* through
pyproject's package-dir mapping only: an editable install's finder from the checkout root, a built
copy from anywhere else; tracelab/__init__.py touches no import path."""
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
IMPORTS = "import tracelab.parsers.chrome, tracelab.reports.breakdown.breakdown, tracelab.workloads; import tracelab.reports"
# an editable install (pip install -e .) adds a finder that maps the folders in; `pip install .` does not
WITHOUT_EDITABLE_FINDER = "import sys; sys.meta_path[:] = [f for f in sys.meta_path if " \
                          "not getattr(f, '__module__', '').startswith('__editable__')]"


def _python(code: str, cwd: Path, path: list[str] | None = None) -> subprocess.CompletedProcess:
    prefix = f"import sys; sys.path[1:1] = {path!r}; " if path else ""
    return subprocess.run([sys.executable, "-c", prefix + code], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_subpackages_import_from_the_checkout_root_through_the_editable_install():
    done = _python(IMPORTS + "; print(tracelab.reports.__file__, tracelab.__file__)", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    reports_file, core_file = done.stdout.split()
    assert Path(reports_file) == ROOT / "reports" / "__init__.py" and Path(core_file) == ROOT / "tracelab" / "__init__.py"


def test_the_package_juggles_no_import_path():
    """No `__path__` appended and no module class swapped: tools that draw the import graph see it."""
    source = (ROOT / "tracelab" / "__init__.py").read_text()
    assert "__path__" not in source and "__class__" not in source
    code = "import types, tracelab, tracelab.loading; print(type(tracelab) is types.ModuleType, tracelab.__path__)"
    done = _python(code, cwd=ROOT)
    assert done.stdout.split(" ", 1) == ["True", f"{[str(ROOT / 'tracelab')]}\n"], done.stderr


def test_subpackages_are_pyprojects_package_dirs():
    tomllib = pytest.importorskip("tomllib")
    mapped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert {name.removeprefix("tracelab.") for name in mapped if name != "tracelab"} == set(tracelab.SUBPACKAGES)


@pytest.mark.slow
def test_built_package_imports_from_the_root_and_from_elsewhere(tmp_path):
    """A real build (pip install --target, no dependencies), imported from a neutral folder without
    the editable finder: the installed copy, whole; from the checkout root without putting the
    root first (python -P), the installed copy too."""
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
    assert (target / "tracelab" / "reports" / "breakdown" / "breakdown.py").is_file()
    code = WITHOUT_EDITABLE_FINDER + "; " + IMPORTS + "; print(tracelab.reports.__file__)"
    elsewhere = _python(code, cwd=tmp_path, path=[str(target)])
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert Path(elsewhere.stdout.strip()) == target / "tracelab" / "reports" / "__init__.py"
    at_root = subprocess.run([sys.executable, "-P", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); " + code],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert at_root.returncode == 0, at_root.stderr
    assert Path(at_root.stdout.strip()) == target / "tracelab" / "reports" / "__init__.py"


def _module_names() -> dict[str, Path]:
    """tracelab's modules by dotted name, from the folders pyproject maps in."""
    folders = {"tracelab": ROOT / "tracelab", **{f"tracelab.{n}": ROOT / n for n in tracelab.SUBPACKAGES}}
    out = {}
    for pkg, folder in folders.items():
        for f in sorted(folder.rglob("*.py")):  # subpackages too (reports/<topic>/)
            parts = [pkg, *f.relative_to(folder).with_suffix("").parts]
            out[".".join(parts[:-1] if f.stem == "__init__" else parts)] = f
    return out


def _imported_modules(name: str, path: Path, known: set[str], packages: set[str]) -> set[str]:
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
        found |= {t for t in targets if t in known and t != name and t not in packages}
    return found


@pytest.mark.slow  # over 1.2 s of CPU here: the default run stays under 90 s
def test_no_import_cycles():
    modules = _module_names()
    packages = {name for name, path in modules.items() if path.stem == "__init__"}
    graph = {name: _imported_modules(name, path, set(modules), packages) for name, path in modules.items()}

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


def test_every_package_folder_is_listed_in_pyproject():
    """A non-editable install (pip install ., the GPU machine's) holds only the packages pyproject
    lists: a topic folder or tracelab/commands missing there breaks every command installed so."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    cfg = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    mapped = {folder: name for name, folder in cfg["package-dir"].items()}
    found = set()
    for init in root.glob("*/**/__init__.py"):
        rel = init.parent.relative_to(root).parts
        if rel[0] in mapped:
            found.add(".".join((mapped[rel[0]], *rel[1:])))
    assert found - listed == set()
