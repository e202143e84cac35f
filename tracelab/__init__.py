"""tracelab: where did the GPU time go, on each rank, under proton, torch.profiler or nsys.

    import tracelab
    prof = tracelab.load("rank0.hatchet")        # Profile: .events (DataFrame), .meta
    profs = tracelab.load_many("runs/decode-torch-20261121-221530/")
    df = tracelab.events(profs)                  # one frame, the schema of tracelab.schema
"""
from __future__ import annotations

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

from .errors import TracelabError  # noqa: E402
from .load import detect, events, load, load_many  # noqa: E402
from .schema import COLUMNS, Profile, validate  # noqa: E402

__all__ = ["COLUMNS", "Profile", "TracelabError", "detect", "events", "load", "load_many", "validate"]
__version__ = "0.1.0"
