"""The suite's own layout: test modules share code through tests/helpers.py (fixtures through
conftest.py), never by importing one another, and no test reaches into typer's internals, so
that a change to one test module or a typer upgrade breaks only what it should."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _imported(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
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


def test_nothing_patches_typer():
    """typer's public testing API (typer.testing.CliRunner) or tracelab.cli.main, nothing under it."""
    private = ("typer.main", "typer.testing._", "_get_command", "typer._")
    found = [p.name for p in TESTS.glob("*.py") if p != Path(__file__) and any(n in p.read_text() for n in private)]
    assert found == []
