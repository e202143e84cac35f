"""Layers of reports/: topics do not import one another, and the shared layers import no topic.

Every module under reports/ is parsed (ast, nothing imported) and each of its imports resolved to
the folder of reports/ it reaches. A topic folder is every folder that is not a shared layer
(each topic of reports/topics.TOPICS is one); the shared layers are the timeline layer, the
comparison (align/), the findings gatherer, the page and its figures, the statistics, and the
modules at the top of reports/. Only the registry (topics.py) names the topics' modules: it is how the session, the
findings and the page reach them.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tracelab.reports.topics import TOPICS

from helpers import import_statements

REPORTS = Path(__file__).resolve().parents[1] / "reports"
SHARED_FOLDERS = {"timeline", "align", "findings", "html", "stats"}
REGISTRY = "topics.py"


def topic_folders(root: Path = REPORTS) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()} - SHARED_FOLDERS


def _layer(rel: Path) -> str:
    """The folder a module of reports/ belongs to; a top-level module is its own (its file name)."""
    return rel.parts[0] if len(rel.parts) > 1 else rel.name


def _reached(node: ast.ImportFrom | ast.Import, rel: Path) -> list[str]:
    """The first component under reports/ of each module (or imported name) the import reaches."""
    if isinstance(node, ast.Import):
        return [a.name.split(".")[2] for a in node.names if a.name.startswith("tracelab.reports.")]
    if node.level == 0:
        parts = (node.module or "").split(".")
        return [parts[2]] if parts[:2] == ["tracelab", "reports"] and len(parts) > 2 else (
            [a.name for a in node.names] if parts == ["tracelab", "reports"] else [])
    package = list(rel.parts[:-1])
    if node.level - 1 > len(package):
        return []  # above reports/ (tracelab's own modules)
    base = package[:len(package) - (node.level - 1)]
    module = base + (node.module.split(".") if node.module else [])
    if module:
        return [module[0]]
    return [a.name for a in node.names]  # `from .. import x` at the top of reports/


def imports_between_layers(root: Path = REPORTS) -> set[tuple[str, str]]:
    """(importing module, reached folder) for every import of a module of reports/ (`root`) that
    reaches a topic folder other than its own."""
    topics, out = topic_folders(root), set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if str(rel) == REGISTRY:
            continue
        for node in import_statements(ast.parse(path.read_text(), str(path))):
            out |= {(str(rel), t) for t in _reached(node, rel) if t in topics and t != _layer(rel)}
    return out


def test_every_registered_topic_is_a_topic_folder() -> None:
    assert {t.name for t in TOPICS} <= topic_folders()
    assert {"perfetto", "runs", "breakdown"} <= topic_folders()
    assert not SHARED_FOLDERS & topic_folders()


def test_no_new_import_between_topics_or_from_a_shared_layer_into_a_topic() -> None:
    """A topic reads another's results through the registry (topics.result_of, step_columns,
    with_savings) and shared code sits in a shared layer: no import reaches across."""
    found = imports_between_layers()
    assert not found, f"imports across layers: {sorted(found)}"


@pytest.mark.parametrize("source, want", [
    ("from ..idle.idle import of_input", {("fixes/x.py", "idle")}),
    ("from ..timeline.intervals import covered", set()),          # a shared layer
    ("from .ddp import x", set()),                                 # its own folder
    ("from tracelab.reports.whatif.bound import path_bounds", {("fixes/x.py", "whatif")}),
    ("import tracelab.reports.roofline.roofline", {("fixes/x.py", "roofline")}),
    ("from ...errors import UsageError", set()),                   # tracelab's own, above reports/
])
def test_the_check_sees_each_form_of_import(tmp_path: Path, source: str, want: set) -> None:
    """The resolver on a module of a fake reports/ tree: relative, absolute and plain imports."""
    for folder in ("fixes", "idle", "whatif", "roofline", "timeline"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "fixes" / "x.py").write_text(source + "\n")
    assert imports_between_layers(tmp_path) == want


# ---- tracelab/ingest and tracelab/core render nothing ------------------------------------------------
TRACELAB = REPORTS.parent / "tracelab"
RENDER_LIBRARIES = ("rich", "plotly")


def is_renderer(module: str) -> bool:
    """A module of tracelab.reports that puts results in words or pictures: the page (html/), the
    terminal tables (text.py, *_text.py, render.py), CSV, JSON and the Perfetto trace."""
    parts = module.split(".")[2:]
    if not parts or parts[0] in ("html", "perfetto"):
        return bool(parts)
    last = parts[-1]
    return last in ("text", "render", "csvout", "jsonout") or last.endswith(("_text", "_html"))


def _imported(node: ast.ImportFrom | ast.Import) -> list[str]:
    """The modules an absolute import names (a `from package import name` names package.name too)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level or not node.module:
        return []  # relative: within tracelab/ingest or tracelab/core
    return [node.module] + [f"{node.module}.{a.name}" for a in node.names]


def renderer_imports(folder: Path) -> set[tuple[str, str]]:
    """(module, imported) for each import under `folder` of a report renderer or a rendering library."""
    out = set()
    for path in sorted(folder.rglob("*.py")):
        for node in import_statements(ast.parse(path.read_text(), str(path))):
            out |= {(path.name, m) for m in _imported(node)
                    if (m.startswith("tracelab.reports.") and is_renderer(m)) or m.split(".")[0] in RENDER_LIBRARIES}
    return out


@pytest.mark.parametrize("layer", ["ingest", "core"])
def test_loading_and_core_import_no_renderer(layer: str) -> None:
    assert renderer_imports(TRACELAB / layer) == set()


@pytest.mark.parametrize("module, want", [
    ("tracelab.reports.html.html", True), ("tracelab.reports.html", True), ("tracelab.reports.text", True),
    ("tracelab.reports.idle.idle_text", True), ("tracelab.reports.whatif.render", True),
    ("tracelab.reports.perfetto.perfetto", True), ("tracelab.reports.jsonout", True),
    ("tracelab.reports.findings.findings", False), ("tracelab.reports.ranks", False),
    ("tracelab.reports.idle.idle", False), ("tracelab.reports", False),
])
def test_renderers_are_told_apart(module: str, want: bool) -> None:
    assert is_renderer(module) is want


def test_the_renderer_check_sees_an_import(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from tracelab.reports.html import html\nimport rich.table\n"
                                   "from tracelab.reports.ranks import label\n")
    assert renderer_imports(tmp_path) == {("a.py", "tracelab.reports.html"), ("a.py", "tracelab.reports.html.html"),
                                          ("a.py", "rich.table")}
