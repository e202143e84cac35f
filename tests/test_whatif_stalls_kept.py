"""no-host-gaps (and cuda-graph, compile:reduce-overhead) keep the host's stalls: a graph replay
still runs the Python between replays. Checked by hand on a small graph, and per step on a real
2-rank DDP capture whose rank 1 sleeps 10 ms after a device sync every other step, against the
sleep's own ranges read straight from the trace JSON."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import tracelab
from tracelab.reports.roofs import trace_device
from tracelab.reports.whatif.analyse import whatif
from tracelab.reports.whatif.nodes import rank_graph

from helpers import host_rows, kernel_rows

DATA = Path(__file__).parent / "data"
MS = 1_000_000


def _predicted(events, host, *specs: str) -> dict[str, float]:
    w = whatif({0: rank_graph(events, host, 0)}, {0: None}, list(specs))
    assert w.steps["step_ns"].tolist() == w.steps["replayed_ns"].tolist()
    return {r.args if r.name == "together" else r.name: r.predicted_ns for r in w.scenarios.itertuples()}


def _stalled_step():
    """Kernel a (1 ms) launched at 0; the host idles, syncs at 3 ms on a drained GPU (10 ns), sleeps
    to 5 ms (a 2 ms stall), then launches kernel b (10 ns), each kernel 20 ns after its launch."""
    events = kernel_rows([("a", 7, 20, MS, 0, 5), ("b", 7, 5 * MS + 20, 10, 5 * MS, 5)])
    host = host_rows([("sync", "cudaDeviceSynchronize", 3 * MS, 10), ("step", "step 0", 0, 6 * MS)])
    return events, host


def test_no_host_gaps_keeps_a_stall_and_the_sync_before_it_waits_for_the_gpu() -> None:
    events, host = _stalled_step()
    stall_ns = 5 * MS - (3 * MS + 10)
    out = _predicted(events, host, "no-host-gaps", "no-host-stalls")
    # the sync takes none but returns as kernel a ends (MS + 20); the stall follows; b 20 ns after its launch
    assert out["no-host-gaps"] == MS + 20 + stall_ns + 20 + 10
    # the measured sync returned at 3 ms + 10: the stall gone, b is launched then
    assert out["no-host-stalls"] == 3 * MS + 10 + 20 + 10
    # both: the sync returns as a ends, b is launched then and starts 20 ns later; either order
    assert out["no-host-gaps+no-host-stalls"] == MS + 20 + 20 + 10
    assert _predicted(events, host, "no-host-stalls", "no-host-gaps")["no-host-stalls+no-host-gaps"] == MS + 20 + 20 + 10


def test_a_gap_without_a_sync_before_it_is_the_launches_and_goes() -> None:
    events, host = _stalled_step()
    host = host_rows([("step", "step 0", 0, 6 * MS)])  # no sync: the 5 ms before b are launch gap, no stall
    # b launched at once, queued behind a (launch-bound as measured: no gap on its stream)
    assert _predicted(events, host, "no-host-gaps") == {"no-host-gaps": MS + 20 + 10}


def _stall_ms_by_step(path: Path) -> dict[int, float]:
    """Per `step N` range, the `host_stall` ranges inside it (ms), from the trace JSON."""
    ev = [e for e in json.loads(gzip.open(path).read())["traceEvents"]
          if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    steps = [(int(e["name"][5:]), e["ts"], e["ts"] + e["dur"]) for e in ev
             if e["name"].startswith("step ") and e["name"][5:].isdigit()]
    out: dict[int, float] = {}
    for e in ev:
        if e["name"] == "host_stall":
            n = next(n for n, a, b in steps if a <= e["ts"] < b)
            out[n] = out.get(n, 0.0) + e["dur"] / 1e3  # us -> ms
    return out


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["no-host-gaps", "cuda-graph", "compile:reduce-overhead"])
def test_a_graph_keeps_each_stall_steps_stall(scenario: str) -> None:
    folder = DATA / "whatif-stall-2gpu-torch"
    profiles = tracelab.load_many(folder)
    graphs = {p.rank: rank_graph(p.events, p.host, p.rank, trace_device(p.meta)) for p in profiles}
    epochs = {p.rank: p.meta.trace_start_epoch_ns for p in profiles}
    w = whatif(graphs, epochs, [scenario, "no-host-stalls"])
    steps = w.steps.assign(predicted=w.per_step.iloc[:, 0].to_numpy(), both=w.per_step.iloc[:, 2].to_numpy())
    steps = steps[steps["claimed"]].set_index("step")
    stall_ms = _stall_ms_by_step(folder / "rank1.pt.trace.json.gz")
    stalled = [s for s in steps.index if s in stall_ms]
    plain = [s for s in steps.index if s not in stall_ms]
    assert len(stalled) >= 5 and len(plain) >= 5
    plain_ms = float(steps.loc[plain, "predicted"].max()) / 1e6
    assert plain_ms < 2  # a step without the stall: the GPU's work, about 1 ms
    for s in stalled:
        ms = steps.loc[s, "predicted"] / 1e6
        # at least the sleep; at most the sleep, the step's work and the untraced host time around the
        # sleep (the stall runs from the sync's return to the next launch: up to 0.9 ms more here)
        assert stall_ms[s] <= ms <= stall_ms[s] + plain_ms + 1, (s, ms, stall_ms[s])
        assert steps.loc[s, "both"] / 1e6 <= ms - 0.9 * stall_ms[s]  # together, the stall goes too
