"""limits.reuse_freed_memory: with it a freed 40 MB block is reused by the next one (a page
fault per 4 KiB page only the first time); without it glibc maps fresh pages for each. Each
case in a fresh interpreter (the setting is process-wide)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tracelab.core import limits


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt, minor faults: Linux")


_FAULTS = """
import resource, sys
from tracelab.core import limits
from tracelab.core.options import Options
print(limits.reuse_freed_memory(Options.from_environment()))
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
block = bytearray(40 * 1024**2)  # zeroed: every page touched
del block
before = faults()
block = bytearray(40 * 1024**2)
print(faults() - before)
"""
_PAGES = 40 * 1024**2 // 4096


def _second_block(env: dict[str, str]) -> tuple[str, int]:
    done = subprocess.run([sys.executable, "-c", _FAULTS], capture_output=True, text=True, check=True,
                          env={**os.environ, **env})
    applied, faults = done.stdout.split()
    return applied, int(faults)


def test_second_block_reuses_the_first(monkeypatch):
    for key in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(key, raising=False)
    applied, faults = _second_block({})
    if applied != "True":
        pytest.skip("no glibc mallopt here")
    assert faults < _PAGES // 10  # reused: a few pages at most


def test_the_users_setting_stands(monkeypatch):
    """MALLOC_MMAP_THRESHOLD_ set (here: the default, 128 KiB): not overridden, so a freed
    40 MB block is given back and the next one faults in every page again."""
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    applied, faults = _second_block({"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)})
    assert applied == "False"
    assert faults >= _PAGES * 9 // 10


def test_bounds():
    assert limits.HEAP_MMAP_BYTES <= limits.HEAP_KEEP_BYTES <= 256 * 1024**2  # a worker keeps little idle
