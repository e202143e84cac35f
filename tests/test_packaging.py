"""The subpackages (parsers/, reports/, workloads/ at the checkout's top) import as tracelab.*: a build
maps them in through pyproject's package-dir, and the checkout's tracelab/ holds relative symlinks to
them, so that from the checkout's root (./tracelab first on sys.path) the package is whole after
`pip install .` as after `pip install -e .`; tracelab/__init__.py touches no import path."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

import tracelab

from helpers import import_statements

ROOT = Path(__file__).resolve().parents[1]
# every subpackage, and one module of each, imported by name
IMPORTS = "import tracelab.parsers.chrome, tracelab.reports.breakdown.breakdown, tracelab.workloads; import tracelab.reports"
# an editable install (pip install -e .) adds a finder that maps the folders in; `pip install .` does not
WITHOUT_EDITABLE_FINDER = "import sys; sys.meta_path[:] = [f for f in sys.meta_path if " \
                          "not getattr(f, '__module__', '').startswith('__editable__')]"


def _python(code: str, cwd: Path, path: list[str] | None = None) -> subprocess.CompletedProcess:
    prefix = f"import sys; sys.path[1:1] = {path!r}; " if path else ""
    return subprocess.run([sys.executable, "-c", prefix + code], cwd=cwd, capture_output=True, text=True, timeout=120)


@lru_cache(maxsize=None)
def _editable_root() -> subprocess.CompletedProcess:
    """One interpreter at the checkout's root through the editable install (a Python start with
    pandas costs ~1.5 s): line 1 where tracelab.reports and tracelab come from, line 2 the
    module's type and __path__ once every subpackage is imported."""
    return _python(IMPORTS + "; import types, tracelab.ingest.loading; print(tracelab.reports.__file__, tracelab.__file__); "
                   "print(type(tracelab) is types.ModuleType, tracelab.__path__)", cwd=ROOT)


@pytest.mark.slow
def test_subpackages_import_from_the_checkout_root_through_the_editable_install():
    done = _editable_root()
    assert done.returncode == 0, done.stderr
    reports_file, core_file = done.stdout.splitlines()[0].split()
    assert Path(reports_file).resolve() == ROOT / "reports" / "__init__.py"
    assert Path(core_file) == ROOT / "tracelab" / "__init__.py"


def test_the_checkouts_tracelab_folder_links_each_subpackage():
    """Relative links, so that a clone anywhere (and a copy made with its links) stays whole."""
    for name in tracelab.SUBPACKAGES:
        link = ROOT / "tracelab" / name
        assert link.is_symlink() and os.readlink(link) == f"../{name}", link
        assert link.resolve() == ROOT / name


@pytest.mark.slow
def test_subpackages_import_from_the_checkout_root_without_the_editable_finder():
    """What a plain `pip install .` leaves a user at the checkout's root: ./tracelab alone."""
    done = _python(WITHOUT_EDITABLE_FINDER + "; " + IMPORTS + "; import tracelab.reports.ranks; "
                   "print(tracelab.reports.ranks.__file__)", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == ROOT / "tracelab" / "reports" / "ranks.py"


def test_the_package_juggles_no_import_path():
    """No `__path__` appended and no module class swapped: tools that draw the import graph see it."""
    source = (ROOT / "tracelab" / "__init__.py").read_text()
    assert "__path__" not in source and "__class__" not in source
    done = _editable_root()
    assert done.stdout.splitlines()[1].split(" ", 1) == ["True", f"{[str(ROOT / 'tracelab')]}"], done.stderr


def test_subpackages_are_pyprojects_package_dirs():
    tomllib = pytest.importorskip("tomllib")
    mapped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert {name.removeprefix("tracelab.") for name in mapped if name != "tracelab"} == set(tracelab.SUBPACKAGES)


def _throwaway_venv(tmp_path: Path) -> Path:
    """A venv without pip of its own that sees this interpreter's site-packages after its own, as
    plain path entries: their .pth files (an editable install's finder among them) do not run."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    parents = [p for p in sys.path if p.endswith("site-packages")]
    Path(purelib, "zz_parent.pth").write_text("\n".join(parents) + "\n")
    return python


def _copy_of_checkout(to: Path) -> Path:
    """The files a build reads, links kept as links (the build leaves build/ behind in its source)."""
    to.mkdir()
    for name in ("pyproject.toml", "README.md", "tracelab", *tracelab.SUBPACKAGES):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, to / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, to / name)
    return to


def _sources() -> set[str]:
    """Every module's path as a wheel places it: tracelab/<file>, tracelab/<subpackage>/<file>."""
    out = {f"tracelab/{f.relative_to(ROOT / 'tracelab')}" for f in (ROOT / "tracelab").glob("**/*.py")}
    for name in tracelab.SUBPACKAGES:
        out |= {f"tracelab/{name}/{f.relative_to(ROOT / name)}" for f in (ROOT / name).glob("**/*.py")}
    return out


@pytest.mark.slow  # a real build and install: ~4 s
def test_plain_pip_install_works_from_the_checkout_root_and_from_elsewhere(tmp_path):
    """`pip install .` (not -e; no dependencies: the venv sees this one's) into a throwaway venv. The
    installed copy holds every module once (package-dir, not the links, feeds the build); from a
    neutral folder it is what imports; from the checkout's root ./tracelab imports, and whole."""
    python = _throwaway_venv(tmp_path)
    if subprocess.run([python, "-c", "import setuptools.command.bdist_wheel"], capture_output=True).returncode:
        pytest.skip("no setuptools >= 70.1 here to build a wheel without isolation (the test extra has it)")
    source = _copy_of_checkout(tmp_path / "source")
    built = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                            "--no-build-isolation", str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(subprocess.run([python, "-c", where], capture_output=True, text=True).stdout.strip())
    installed = {str(f.relative_to(site)) for f in (site / "tracelab").rglob("*.py")}
    assert installed == _sources()
    code = IMPORTS + "; import tracelab.reports.ranks; print(tracelab.reports.ranks.__file__)"
    for cwd, home in ((tmp_path, site / "tracelab"), (ROOT, ROOT / "tracelab")):
        done = subprocess.run([python, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert Path(done.stdout.strip()) == home / "reports" / "ranks.py"
        cli = subprocess.run([python, "-m", "tracelab", "--help"], cwd=cwd, capture_output=True, text=True, timeout=120)
        assert cli.returncode == 0 and "Usage" in cli.stdout, cli.stderr


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
    for node in import_statements(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            parent = ".".join(base.split(".")[: len(base.split(".")) - node.level + 1]) if node.level else ""
            module = ".".join(filter(None, [parent, node.module]))
            targets = [module, *(f"{module}.{alias.name}" for alias in node.names)]
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
