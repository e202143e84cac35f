"""Runs side by side: their run.json results and the profiler's cost."""
