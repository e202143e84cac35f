"""The sources of findings that name a fix (this package's docstring), for reports/findings.py."""
from __future__ import annotations

from .ddp import ddp_findings
from .gemm import alignment_findings, tf32_findings
from .host import graphs_findings

SOURCES = (tf32_findings, alignment_findings, graphs_findings, ddp_findings)
