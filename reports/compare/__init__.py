"""Ranks, runs and profilers side by side: align, subtract, the per-rank digests they read."""
