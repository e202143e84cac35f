"""tracelab: where did the GPU time go, on each rank, under proton, torch.profiler or nsys.

    import tracelab
    prof = tracelab.load("rank0.hatchet")        # Profile: .events (DataFrame), .meta
    profs = tracelab.load_many("runs/decode-torch-20261121-221530/")
    df = tracelab.events(profs)                  # one frame, the schema of tracelab.core.schema
"""
from __future__ import annotations

# Installed under tracelab.*, kept in the checkout as top-level folders: pyproject's package-dir
# maps them in for a build, and tracelab/<name> in the checkout is a relative symlink to ../<name>,
# so that ./tracelab (first on sys.path from the checkout's root) is the whole package whichever
# way it was installed. Nothing at run time touches an import path.
SUBPACKAGES = ("parsers", "reports", "workloads")

# What `import tracelab` offers, imported on first use (PEP 562): the command line and each
# worker process start without pandas until they need it (benchmarks/bench_stages.py measures the imports).
_LAZY = {"TracelabError": "core.errors", "detect": "ingest.loading", "events": "ingest.loading", "load": "ingest.loading",
         "load_many": "ingest.loading",
         "COLUMNS": "core.schema", "Profile": "core.schema", "validate": "core.schema",
         "Meta": "core.meta", "Session": "ingest.session"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'tracelab' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = ["COLUMNS", "Meta", "Profile", "Session", "TracelabError", "detect", "events", "load", "load_many", "validate"]
__version__ = "0.1.0"
