"""Structure figures of issue 31 (benchmarks/structure.md): imports among reports/ modules,
cli.py's lines, and the files a --step value crosses. Run from the checkout's root:
    python benchmarks/structure.py
"""
from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"
PREFIX = "tracelab.reports."


def _module(path: Path) -> str:
    parts = path.relative_to(REPORTS).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node: ast.AST, here: str, package: str, known: set[str]) -> set[str]:
    """The reports modules an import statement names (relative, or tracelab.reports.*)."""
    if isinstance(node, ast.Import):
        return {a.name.removeprefix(PREFIX) for a in node.names} & known
    if not isinstance(node, ast.ImportFrom):
        return set()
    base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level else node.module
    if not (base or "").startswith("tracelab.reports"):
        return set()
    base = base.removeprefix("tracelab.reports").lstrip(".")
    found = {f"{base}.{a.name}".lstrip(".") for a in node.names}
    return ({f for f in found if f in known} or ({base} & known)) - {here}


def report_imports() -> tuple[int, int]:
    """(modules in reports/, distinct importer -> imported pairs among them)."""
    files = [p for p in REPORTS.rglob("*.py")]
    known = {_module(p) for p in files} - {""}
    pairs = set()
    for p in files:
        here = _module(p)
        package = ".".join(filter(None, ["tracelab.reports", here if p.name == "__init__.py" else here.rpartition(".")[0]]))
        for node in ast.walk(ast.parse(p.read_text())):
            pairs |= {(here, t) for t in _targets(node, here, package, known)}
    return len([m for m in known if not (REPORTS / m.replace(".", "/") / "__init__.py").exists()]), len(pairs)


def step_files(pattern: str) -> list[str]:
    """Files (outside tests and benchmarks) whose text matches `pattern` (git grep -E)."""
    out = subprocess.run(["git", "grep", "-l", "-E", pattern, "--", "*.py"], cwd=ROOT, capture_output=True,
                         text=True).stdout.split()
    return [f for f in out if not re.match(r"(tests|benchmarks)/", f)]


if __name__ == "__main__":
    modules, pairs = report_imports()
    cli = len((ROOT / "tracelab" / "cli.py").read_text().splitlines())
    named = step_files(r"STEP_PATTERN_ENV|TRACELAB_STEP_PATTERN|step_pattern|_set_step|Options\b")
    env = step_files(r"STEP_PATTERN_ENV|TRACELAB_STEP_PATTERN")
    print(f"reports modules: {modules}; imports among them (distinct pairs): {pairs}")
    print(f"tracelab/cli.py lines: {cli}")
    print(f"files naming the --step route: {len(named)}: {' '.join(named)}")
    print(f"files reading or writing its environment variable: {len(env)}: {' '.join(env)}")
