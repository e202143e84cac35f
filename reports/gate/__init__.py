"""The gate: did the candidate runs get slower or hungrier than the baseline runs, beyond the
noise and a threshold, and why (samples.py: each run's per-step samples and what explains
them; verdict.py: the verdict per metric; gate_text.py: its renderers)."""
