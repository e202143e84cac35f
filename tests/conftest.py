from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
PUBLIC_TRACES = DATA / "public"  # the few public traces a plain clone's tests need
SHARED_TRACES = ROOT.parent / "shared" / "traces"  # the full collection, beside the checkout in CI
REQUIRE_SHARED = "TRACELAB_REQUIRE_SHARED"  # set (CI's full run): a missing trace fails instead of skipping


def shared_trace(relpath: str) -> Path:
    """A public trace by its path under shared/traces (e.g. "hta/cpu_only/rank-34...json.gz"):
    the copy in tests/data/public, else ../shared/traces. When neither holds it (a plain clone
    has no ../shared) the calling test skips, naming the file. Call it inside a test."""
    for root in (PUBLIC_TRACES, SHARED_TRACES):
        if (root / relpath).exists():
            return root / relpath
    reason = f"{relpath} is neither in tests/data/public nor in {SHARED_TRACES}"
    if os.environ.get(REQUIRE_SHARED):
        pytest.fail(f"{reason} ({REQUIRE_SHARED} is set)")
    pytest.skip(reason)
