"""Every name a module of tracelab or benchmarks/ imports from tracelab exists: a name moved from one
module to another breaks the code paths no other test runs (a GPU-only harness, a rank's worker)."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from helpers import import_statements

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tracelab"
SOURCES = sorted({*PACKAGE.rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")})


def _package_of(path: Path) -> str | None:
    """The dotted package a tracelab source file sits in (its links followed, as Python imports it)."""
    try:
        rel = path.relative_to(PACKAGE)
    except ValueError:
        return None
    return ".".join(["tracelab", *rel.parent.parts])


def _imports(path: Path, text: str | None = None) -> list[tuple[str, str, int]]:
    """(module, name, line) of each `from tracelab... import name` of `path` (or of `text`, as if it
    were that file's), relative ones resolved."""
    out = []
    for node in import_statements(ast.parse(path.read_text() if text is None else text, str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            package = _package_of(path)
            if package is None:
                continue
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            module = f"{base}.{node.module}" if node.module else base
        else:
            module = node.module or ""
        if module == "tracelab" or module.startswith("tracelab."):
            out += [(module, a.name, node.lineno) for a in node.names if a.name != "*"]
    return out


def _exists(module: str, name: str) -> bool:
    found = importlib.import_module(module)
    if hasattr(found, name):
        return True
    try:
        importlib.import_module(f"{module}.{name}")
        return True
    except ModuleNotFoundError:
        return False


@pytest.mark.slow  # imports every module, torch's workloads included (~8 s of CPU)
def test_every_name_imported_from_tracelab_exists() -> None:
    missing = [f"{p.relative_to(ROOT)}:{line}: {name} from {module}"
               for p in SOURCES for module, name, line in _imports(p) if not _exists(module, name)]
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("source", ["from tracelab.workloads.lm import SIZES", "from .lm import NOT_THERE",
                                    "from ..core import not_a_module"])
def test_a_moved_name_is_found_missing(source: str) -> None:
    imports = _imports(PACKAGE / "workloads" / "probe.py", source)
    assert len(imports) == 1 and not _exists(*imports[0][:2])
