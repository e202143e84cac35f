"""One home for the statistics, so that every verdict judges with the same numbers: the tests
(tests.py: p values and intervals, no scipy), the noise models (noise.py: how much a time may
differ by chance), and the levels they are judged at, each defined once here with a name that
says what it means.

Analyses import what they judge with from here; what a verdict says in English is the
renderers' (reports/<topic>/*_text.py and the verdict lines), never these modules'.
"""
from __future__ import annotations

NOISE_SIGMAS = 2.0  # a difference is beyond the noise past this many standard deviations
MAD_TO_SD = 1.4826  # a normal sample's standard deviation = this x its median absolute deviation
STRAGGLER_ALPHA = 0.05  # the straggler's signed-rank and binomial tests, and the alternation test
BLOCK_ALPHA = 0.01  # the short captures' block t-test: stricter, as it leans on magnitudes
RUN_NOISE = 0.10  # relative sd of a run's level between runs of one job that its steps do not show (gate/noise.py)
INTERVAL_LEVEL = 0.95  # confidence of the shift interval between two runs' per-step samples
MIN_LEAD_SHARE = 0.01  # a lead under this share of the time names no slowest, whatever its noise
MIN_LEAD_NS = 1_000  # ... nor one under this many ns
MIN_SKEW_NS = 1_000  # arrivals closer than this have no last rank, however well the clocks agree
