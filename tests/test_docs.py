"""The README and docs/ as a plain clone shows them: links to files that are there, the two
commands first, no path that only exists on one machine or beside the checkout."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE_FOLDERS = ["tracelab", "parsers", "reports", "workloads"]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_are_files_in_the_repo(doc):
    targets = [t for t in LINK.findall(doc.read_text()) if not re.match(r"[a-z]+://", t)]
    missing = [t for t in targets if not (doc.parent / t).resolve().is_relative_to(ROOT)
               or not (doc.parent / t).exists()]
    assert not missing


def test_readme_needs_nothing_beside_the_checkout():
    assert "../shared" not in (ROOT / "README.md").read_text()


def test_design_docs_are_linked_from_the_readme():
    targets = set(LINK.findall((ROOT / "README.md").read_text()))
    assert {"docs/design.md", "docs/extending.md"} <= targets


def test_readme_starts_with_the_two_commands():
    first_block = (ROOT / "README.md").read_text().split("```")[1]
    commands = [line for line in first_block.splitlines()[1:] if line.strip()]
    assert len(commands) == 2
    assert commands[0].endswith("&& tracelab run decode --ranks 2")
    assert commands[1].endswith("&& python -m pytest -q")
    assert all(c.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install ") for c in commands)


@pytest.mark.parametrize("where", ["README.md", *CODE_FOLDERS])
def test_no_machine_specific_paths(where):
    files = [ROOT / where] if where.endswith(".md") else sorted((ROOT / where).rglob("*.py"))
    found = [f"{f.relative_to(ROOT)}: {m}" for f in files
             for m in re.findall(r"/opt/nvidia\S*|/work/\S+|/root/\S+", f.read_text())]
    assert not found
