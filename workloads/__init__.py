"""Workloads: programs that run under a profiler, one process per rank (python -m tracelab.workloads.NAME --help)."""
