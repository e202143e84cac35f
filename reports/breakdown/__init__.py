"""Per-rank breakdown of GPU time by kernel, op class, scope, step or module."""
