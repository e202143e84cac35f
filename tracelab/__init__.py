"""tracelab: where did the GPU time go, on each rank, under proton, torch.profiler or nsys.

    import tracelab
    prof = tracelab.load("rank0.hatchet")        # Profile: .events (DataFrame), .meta
    profs = tracelab.load_many("runs/decode-torch-20261121-221530/")
    df = tracelab.events(profs)                  # one frame, the schema of tracelab.schema
"""
from __future__ import annotations

import sys
import types
from pathlib import Path

# Installed under tracelab.*, kept in the checkout as top-level folders (pyproject's package-dir).
SUBPACKAGES = ("parsers", "reports", "workloads")


def _find_subpackages_in_checkout() -> None:
    """Python started in a source checkout imports ./tracelab, which does not hold the
    subpackages, ahead of any installed copy: look for them beside it as well."""
    here = Path(__file__).resolve().parent
    root = here.parent
    if not (here / SUBPACKAGES[0]).is_dir() and all((root / name / "__init__.py").is_file() for name in SUBPACKAGES):
        __path__.append(str(root))


_find_subpackages_in_checkout()

# What `import tracelab` offers, imported on first use (PEP 562): the command line and each
# worker process start without pandas until they need it (benchmarks/RESULTS.md, imports).
_LAZY = {"TracelabError": "errors", "detect": "load", "events": "load", "load": "load", "load_many": "load",
         "COLUMNS": "schema", "Profile": "schema", "validate": "schema"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'tracelab' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


class _Package(types.ModuleType):
    """Importing the submodule tracelab.load sets the package's `load` to that module; the
    function of that name (`tracelab.load(path)`) is what the package offers: keep it."""

    def __setattr__(self, name: str, value) -> None:
        if name == "load" and isinstance(value, types.ModuleType):
            value = value.load
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = ["COLUMNS", "Profile", "TracelabError", "detect", "events", "load", "load_many", "validate"]
__version__ = "0.1.0"
