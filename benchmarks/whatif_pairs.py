#!/usr/bin/env python3
"""A what-if prediction against the measured step of a run without the cause (issue 27).

    python benchmarks/whatif_pairs.py SCENARIO WITH_RUN WITHOUT_RUN [WITH_RUN WITHOUT_RUN ...]
    python benchmarks/whatif_pairs.py --interleaved SCOPE SCENARIO RUN [RUN ...]

--interleaved: one run whose cause happens every other step (workloads' --late-every 2): the
steps holding a range named SCOPE (extra_work, host_stall) on any rank are the job with it,
the others the same job without it, measured under the same conditions. Those others are a
biased stand-in where the cause is host time: each follows a step with the cause, in which the
other ranks got a head start. So each step with it is also set against its own reference: the
slowest rank's own step range less the SCOPE ranges inside it (the job without it, in that
step, where the step is host-bound and the cause is host time: a stall, not GPU work).

For each pair of run folders (the job with the late rank or the stall, the same job without
it): the scenario's predicted step (tracelab whatif, mean over the steps that claim a saving)
against the run without it, measured two ways: its traced steps (whatif's step windows, the
first step, warm-up, left out of both) and the workload's own step_ms (median). Then the
medians over the pairs.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import tracelab
from tracelab.reports.roofline.roofline import trace_device
from tracelab.reports.whatif import rank_graph, whatif


def replayed(folder: str, scenario: str) -> tuple[float, float, float]:
    """(measured, predicted) mean step ns over steps but the first, and the workload's median step_ms."""
    profiles = tracelab.load_many(folder)
    graphs = {p.rank: rank_graph(p.events, p.host, p.rank, trace_device(p.meta)) for p in profiles}
    w = whatif(graphs, {p.rank: p.meta.get("trace_start_epoch_ns") for p in profiles}, [scenario])
    keep = w.steps["claimed"].to_numpy() & (w.steps["step"] != w.steps["step"].min()).to_numpy()
    predicted = w.per_step.iloc[:, 0].to_numpy()[keep]
    return float(w.steps["step_ns"].to_numpy()[keep].mean()), float(predicted.mean()), workload_ms(folder)


def workload_ms(folder: str) -> float:
    rows = [r for f in Path(folder).glob("rank0.results.json") for r in json.loads(f.read_text()).get("rows", [])]
    return statistics.median(x for r in rows for x in r["step_ms"]) if rows else float("nan")


def steps_with(profiles, scope: str) -> set[int]:
    """Steps of any rank whose step range holds a host range named `scope`."""
    out = set()
    for p in profiles:
        h = p.host
        if h is None:
            continue
        steps = h[h["kind"] == "step"]
        for t in h.loc[(h["kind"] == "range") & (h["name"] == scope), "start_ns"]:
            inside = steps[(steps["start_ns"] <= t) & (steps["start_ns"] + steps["dur_ns"] > t)]
            out |= {int(n) for n in inside["name"].str.extract(r"(\d+)", expand=False).dropna()}
    return out


def own_ranges_ns(profiles, scope: str) -> dict[int, int]:
    """Per step: the slowest rank's own `step N` range less its `scope` ranges inside it."""
    out: dict[int, int] = {}
    for p in profiles:
        h = p.host
        if h is None:
            continue
        cut = h[(h["kind"] == "range") & (h["name"] == scope)]
        cut0, cut1 = cut["start_ns"].to_numpy(), (cut["start_ns"] + cut["dur_ns"]).to_numpy()
        for r in h[h["kind"] == "step"].itertuples():
            n = r.name.rsplit(" ", 1)[-1]
            if not n.isdigit():
                continue
            a, b = r.start_ns, r.start_ns + r.dur_ns
            inside = sum(max(0, min(b, y) - max(a, x)) for x, y in zip(cut0, cut1))
            out[int(n)] = max(out.get(int(n), 0), int(r.dur_ns - inside))
    return out


def interleaved(scope: str, scenario: str, folder: str) -> float:
    profiles = tracelab.load_many(folder)
    graphs = {p.rank: rank_graph(p.events, p.host, p.rank, trace_device(p.meta)) for p in profiles}
    w = whatif(graphs, {p.rank: p.meta.get("trace_start_epoch_ns") for p in profiles}, [scenario])
    late = steps_with(profiles, scope)
    s = w.steps.assign(predicted=w.per_step.iloc[:, 0].to_numpy())
    s = s[s["claimed"] & (s["step"] != s["step"].min())]
    with_it, without = s[s["step"].isin(late)], s[~s["step"].isin(late)]
    m_with, predicted, m_without = with_it["step_ns"].mean(), with_it["predicted"].mean(), without["step_ns"].mean()
    err = predicted / m_without - 1
    print(f"{Path(folder).name}: {len(with_it)} steps with {scope}: measured {m_with / 1e6:.1f} ms, {scenario} predicts "
          f"{predicted / 1e6:.1f} ms; {len(without)} steps without: measured {m_without / 1e6:.1f} ms; prediction "
          f"{100 * err:+.1f}%; predicted saving {(m_with - predicted) / 1e6:.1f} ms against measured "
          f"{(m_with - m_without) / 1e6:.1f} ms")
    med_with, med_pred, med_without = with_it["step_ns"].median(), with_it["predicted"].median(), without["step_ns"].median()
    print(f"  medians (robust to a step slowed by something else on every rank): measured {med_with / 1e6:.1f} ms with, "
          f"{med_without / 1e6:.1f} ms without; predicted {med_pred / 1e6:.1f} ms; predicted saving "
          f"{(med_with - med_pred) / 1e6:.1f} ms against measured {(med_with - med_without) / 1e6:.1f} ms")
    print("  per step with it (measured -> predicted ms): " + ", ".join(
        f"{int(r.step)}: {r.step_ns / 1e6:.1f} -> {r.predicted / 1e6:.1f}" for r in with_it.itertuples()))
    own = own_ranges_ns(profiles, scope)
    errs = [r.predicted / own[int(r.step)] - 1 for r in with_it.itertuples() if own.get(int(r.step))]
    print("  per step with it, predicted against the slowest rank's own step range less its " + scope + " ranges: "
          + ", ".join(f"{int(r.step)}: {r.predicted / 1e6:.2f} / {own[int(r.step)] / 1e6:.2f} ms"
                      for r in with_it.itertuples() if own.get(int(r.step)))
          + (f"; error {100 * min(errs):+.1f}% to {100 * max(errs):+.1f}%, median {100 * statistics.median(errs):+.1f}%"
             if errs else ""))
    return err


def main(argv: list[str]) -> int:
    if argv[0] == "--interleaved":
        errors = [interleaved(argv[1], argv[2], f) for f in argv[3:]]
        print(f"median error over {len(errors)} runs: {100 * statistics.median(errors):+.1f}%")
        return 0
    scenario, folders = argv[0], argv[1:]
    errors = []
    for with_run, without in zip(folders[::2], folders[1::2]):
        m_with, predicted, _ = replayed(with_run, scenario)
        m_without, _, ms_without = replayed(without, "no-host-gaps")
        err = predicted / m_without - 1
        errors.append(err)
        print(f"{Path(with_run).name}: measured {m_with / 1e6:.1f} ms, {scenario} predicts {predicted / 1e6:.1f} ms; "
              f"{Path(without).name} without it: traced {m_without / 1e6:.1f} ms (workload median "
              f"{ms_without:.1f} ms); prediction {100 * err:+.1f}%; predicted saving {(m_with - predicted) / 1e6:.1f} ms"
              f" against measured {(m_with - m_without) / 1e6:.1f} ms")
    print(f"median error over {len(errors)} pairs: {100 * statistics.median(errors):+.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
