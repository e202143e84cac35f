"""The promise every refused input or fault keeps (issue 29), checked the same way for each
case of tests/test_corpus.py: exit status 2 (or the signal's 128+N), exactly one line on
stderr naming what is at fault, no traceback, every file that was there before unchanged,
and no file added: no partial output, no temporary file of ours."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import malformed as m


def tree(folder: Path) -> dict[str, str]:
    """Every file and link under `folder`: relative path -> sha256 of its bytes (a link: its target)."""
    out = {}
    for root, dirs, names in os.walk(folder):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = Path(root, name)
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                out[rel] = "link:" + os.readlink(path)
            else:
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def assert_refused(capsys, folder: Path, args: list[str], fragment: str, status: int = 2,
                   ignore: tuple[str, ...] = ()) -> str:
    """`tracelab ARGS` in this process: `status`, one stderr line holding `fragment`, no
    traceback, the files under `folder` as they were (paths starting with `ignore` aside)."""
    before = {k: v for k, v in tree(folder).items() if not k.startswith(ignore)}
    code, out, err = m.run_cli_output(capsys, *args)
    lines = err.splitlines()
    assert code == status, (code, err[-3000:])
    assert len(lines) == 1, err[-3000:]
    assert "Traceback" not in err
    assert lines[0].startswith("tracelab: error: "), lines[0]
    assert fragment.lower() in lines[0].lower(), lines[0]
    after = {k: v for k, v in tree(folder).items() if not k.startswith(ignore)}
    assert after == before, sorted(set(after.items()) ^ set(before.items()))
    return lines[0]


def one_process(monkeypatch) -> None:
    """load_many parses in this process (no worker pool to start): the corpus stays fast."""
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    monkeypatch.setenv("TRACELAB_CACHE", "0")


def spread(cases, every: int) -> list:
    """The cases as pytest params, all but every `every`-th marked slow: the default run tries
    a spread of each table (its first case among them), `pytest -m slow` the rest."""
    import pytest

    return [pytest.param(c, marks=() if i % every == 0 else pytest.mark.slow) for i, c in enumerate(cases)]
