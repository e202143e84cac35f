"""Align, then subtract: the comparison of labelled inputs (align.py: the aligned table, totals,
stragglers from totals, timelines and skew) and the per-rank digests it reads (digests.py). A
shared layer: the compare topic shows it, and the findings, the page and the session read it."""
