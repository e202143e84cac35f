"""Structure figures: imports among reports/ modules, cli.py's lines, the files a --step
value crosses, and (second half) where the statistics live, the constants defined more than once, and the duration formatters. Run from the
checkout's root, or name another checkout to measure it (its reports/ and tracelab/):
    python benchmarks/structure.py [CHECKOUT]
"""
from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
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


STATISTICS = {"signed_rank_p", "binomial_tail", "t_sf", "block_p", "mann_whitney_p", "shift_interval",
              "median_difference", "noise_ns", "step_noise_ns", "span_noise_ns", "step_threshold_ns",
              "clock_spread_ns", "floor_ns", "sigma", "sigma_of", "step_std", "slowest"}
FORMAT = re.compile(r"/ 1e([36]):([^}]*)}")  # an f-string's ns -> us (1e3) or ms (1e6) and its format spec


def _code() -> list[Path]:
    return [p for d in ("reports", "tracelab") for p in (ROOT / d).rglob("*.py")]


def _defs(p: Path) -> tuple[set[str], set[str]]:
    """(top-level function names, top-level UPPER_CASE constant names) of one module; a function
    annotated to return a number (perfetto's _us: ns -> float us) is a conversion, not a formatter."""
    body = ast.parse(p.read_text()).body
    funcs = {n.name for n in body if isinstance(n, ast.FunctionDef) and ast.unparse(n.returns or ast.Constant("")) not in
             ("float", "int")}
    consts = {t.id for n in body if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Name) and t.id.isupper()}
    return funcs, consts


def statistics_modules() -> list[str]:
    """Modules that define a statistical test or a noise model (STATISTICS)."""
    return sorted(str(p.relative_to(ROOT)) for p in _code() if _defs(p)[0] & STATISTICS)


def repeated_constants() -> dict[str, int]:
    """UPPER_CASE module constants defined in more than one module, and in how many."""
    seen = Counter(c for p in _code() for c in _defs(p)[1])
    return {c: n for c, n in sorted(seen.items()) if n > 1}


def duration_formatters() -> tuple[list[str], set[str]]:
    """(modules defining their own ms/us formatter (_ms, _us, ms, us, _time) outside the shared
    one, the distinct f-string specs that turn ns into ms or us anywhere)."""
    own = sorted(str(p.relative_to(ROOT)) for p in _code() if p.name != "fmt.py" and
                 {"_ms", "_us", "ms", "_time"} & _defs(p)[0])
    specs = {f"{'ms' if m[0] == '6' else 'us'} {m[1]}" for p in _code() if p.name != "fmt.py"
             for m in FORMAT.findall(p.read_text())}
    return own, specs


if __name__ == "__main__":
    modules, pairs = report_imports()
    cli = len((ROOT / "tracelab" / "cli.py").read_text().splitlines())
    named = step_files(r"STEP_PATTERN_ENV|TRACELAB_STEP_PATTERN|step_pattern|_set_step|Options\b")
    env = step_files(r"STEP_PATTERN_ENV|TRACELAB_STEP_PATTERN")
    print(f"reports modules: {modules}; imports among them (distinct pairs): {pairs}")
    print(f"tracelab/cli.py lines: {cli}")
    print(f"files naming the --step route: {len(named)}: {' '.join(named)}")
    print(f"files reading or writing its environment variable: {len(env)}: {' '.join(env)}")
    stats = statistics_modules()
    print(f"modules defining statistical tests or noise models: {len(stats)}: {' '.join(stats)}")
    print(f"constants defined in more than one module: {repeated_constants()}")
    own, specs = duration_formatters()
    print(f"modules with their own ms/us formatter: {len(own)}: {' '.join(own)}")
    print(f"distinct ns -> ms/us format specs in f-strings outside reports/fmt.py: {len(specs)}: {sorted(specs)}")
