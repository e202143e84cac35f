"""Runs side by side, the topic: its findings between runs (findings_runs.py) and of a run the host
paces (findings_busy.py). The run table they read (run.json results, the profiler's cost) is the
shared reports/runtable.py, which the page and the gate read too."""
