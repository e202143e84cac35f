#!/usr/bin/env python3
"""CPU seconds of `whatif` on a graph with a cycle (tests/test_whatif_cycles.py's two-thread
trace), and what it answers: before cycles.py, the replay ran MAX_ROUNDS and raised.

    python benchmarks/whatif_cycle.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_whatif import _events, _host  # noqa: E402

from tracelab.errors import TracelabError  # noqa: E402
from tracelab.reports.whatif import rank_graph, whatif  # noqa: E402


def main() -> int:
    events = _events([("K", 7, 100_000, 100_000, 0, 5), ("K0", 8, 30_000, 10_000, 20_000, 5)])
    host = _host([("sync", "cudaDeviceSynchronize", 10_000, 290_000), ("step", "step 0", 0, 400_000)])
    t0 = time.process_time()
    try:
        w = whatif({0: rank_graph(events, host, 0)}, {0: None}, ["no-host-gaps"])
        print("answered:", next((n for n in w.notes if "cycle" in n), "no cycle noted"))
    except TracelabError as e:
        print(f"{type(e).__name__}: {e}")
    print(f"{time.process_time() - t0:.3f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
