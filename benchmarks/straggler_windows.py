"""The straggler rule on short captures: real captures cut to N-step windows (what a
torch.profiler schedule or an nsys capture range of N steps would have recorded), with
the verdict line of each, and the rule's false-positive rate on windows with no straggler.

    python benchmarks/straggler_windows.py show tests/data/ddp-2gpu-late-nsys --steps 3 5
    python benchmarks/straggler_windows.py fp [--perms 10] [--seed 0]

`show`: the verdict of the first N steps and of every N-step window. `fp`: windows of 3, 4
and 5 consecutive steps of the captures with no straggler by design (equal work, and work
alternating between the ranks) as captured, and of the equal-work ones with the rank labels
permuted at random per step (--perms times; that keeps every step's own timing and destroys
any rank's lasting lead); a named straggler in any of them is a false positive. Equal-work
captures under torch are permuted only: their host delay makes rank 1 a real straggler as
captured (their READMEs). Alternating work permuted per step is a random rank slow in each
step: in the 2^(1-N) of windows where one rank drew every step the data are a straggler's,
so it is counted apart, as a stress case.
Prints a Markdown table for benchmarks/RESULTS.md. Not a test: minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's tracelab, not an installed one
import tracelab  # noqa: E402
from tracelab.reports.timeline.waits import analyse  # noqa: E402

DATA = ROOT / "tests" / "data"
# capture -> (group, whether its windows as captured count: no rank has a lasting lead as captured)
NO_STRAGGLER = {
    "ddp-2gpu-equal-nsys": ("equal work", True), "ddp-2gpu-equal-torch": ("equal work", False),
    "tp-2gpu-equal-torch": ("equal work", False), "gloo-2cpu-equal": ("equal work", True),
    "ddp-2gpu-alternating-torch": ("alternating", True), "ddp-2gpu-alternating-nsys": ("alternating", True),
    "tp-2gpu-alternating-torch": ("alternating", True), "gloo-2cpu-alternating": ("alternating", True)}


def on_one_clock(folder: Path) -> pd.DataFrame:
    """The capture's events, every rank's times moved onto the one clock the analysis found
    (epoch, or estimated from the collective ends), so rank labels can be moved between ranks."""
    profiles = tracelab.load_many(folder)
    events = tracelab.events(profiles)
    w = analyse(events, {p.rank: p.meta.trace_start_epoch_ns for p in profiles})
    offsets = w.clock["offsets_ns"] or {}
    shift = events["rank"].map(lambda r: offsets.get(int(r), 0)).astype("int64")
    return events.assign(start_ns=events["start_ns"] + shift)


def verdict(events: pd.DataFrame):
    """Who waits on whom of events already on one clock."""
    return analyse(events, {int(r): 0 for r in events["rank"].unique()})


def steps_of(events: pd.DataFrame) -> list[int]:
    return sorted(int(s) for s in events["step"].dropna().unique())


def window(events: pd.DataFrame, steps: list[int]) -> pd.DataFrame:
    """The rows of these steps only: what a capture of just them would hold of the steps."""
    return events[events["step"].isin(steps)].reset_index(drop=True)


def permuted(events: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """Rank labels permuted at random, one permutation per step."""
    ranks = np.array(sorted(int(r) for r in events["rank"].unique()))
    mapping = {}
    for step in steps_of(events):
        mapping[step] = dict(zip(ranks, rng.permutation(ranks)))
    new = [mapping[int(s)][int(r)] for s, r in zip(events["step"], events["rank"])]
    return events.assign(rank=np.asarray(new, dtype=events["rank"].dtype))


def show(folder: Path, sizes: list[int]) -> None:
    events = on_one_clock(folder)
    steps = steps_of(events)
    print(f"{folder.name}: {len(steps)} steps; whole capture: {verdict(events).line.split('; why')[0]}")
    for n in sizes:
        for start in range(0, len(steps) - n + 1):
            w = verdict(window(events, steps[start:start + n]))
            head = "first " if start == 0 else "       "
            print(f"  {head}{n} steps {steps[start]}-{steps[start + n - 1]}: {w.line}")


def _trials(name: str, rng: np.random.Generator, perms: int):
    """(capture, group, steps, kind, events) of every 3- to 5-step window of one capture."""
    group, as_captured = NO_STRAGGLER[name]
    events = on_one_clock(DATA / name)
    steps = steps_of(events)
    for n in (3, 4, 5):
        for start in range(0, len(steps) - n + 1):
            cut = window(events, steps[start:start + n])
            if as_captured:
                yield name, group, n, "as captured", cut
            for _ in range(perms):
                # permuted alternating work is a random straggler per step: a stress case, counted apart
                yield name, group, n, "permuted" if group == "equal work" else "permuted (stress)", permuted(cut, rng)


def false_positives(perms: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows, started = [], time.time()
    for name in NO_STRAGGLER:
        for capture, group, n, kind, ev in _trials(name, rng, perms):
            v = verdict(ev).verdict
            rows.append({"capture": capture, "group": group, "steps": n, "kind": kind,
                         "named": v["pattern"] == "straggler", "test": v["test"] if v["pattern"] == "straggler" else ""})
    df = pd.DataFrame(rows)
    main = df[df["kind"] != "permuted (stress)"]
    print(f"{len(df)} windows in {time.time() - started:.0f} s (seed {seed}, {perms} permutations per window)\n")
    print(f"no lasting lead (equal work as captured and permuted per step; alternating as captured): "
          f"{int(main['named'].sum())} named in {len(main)} windows ({100 * main['named'].mean():.1f}%)")
    stress = df[df["kind"] == "permuted (stress)"]
    print(f"stress, alternating work permuted per step (a random rank slow each step): {int(stress['named'].sum())} "
          f"named in {len(stress)} ({100 * stress['named'].mean():.1f}%)\n")
    table = df.groupby(["group", "kind", "steps"]).agg(windows=("named", "size"), named=("named", "sum"))
    print("| windows of | kind | steps | windows | named | rate | one rank slow in every step by chance |")
    print("|---|---|---|---|---|---|---|")
    for (group, kind, n), r in table.iterrows():
        chance = f"{100 * 2.0 ** (1 - n):.1f}%" if kind.startswith("permuted") else "-"
        print(f"| {group} | {kind} | {n} | {r['windows']} | {r['named']} | {100 * r['named'] / r['windows']:.1f}% | {chance} |")
    for (capture, kind), g in df[df["named"]].groupby(["capture", "kind"]):
        print(f"named: {capture} ({kind}): {len(g)} windows, tests: {dict(g['test'].value_counts())}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("show")
    s.add_argument("folder", type=Path)
    s.add_argument("--steps", type=int, nargs="+", default=[3, 5])
    f = sub.add_parser("fp")
    f.add_argument("--perms", type=int, default=10)
    f.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    show(args.folder, args.steps) if args.cmd == "show" else false_positives(args.perms, args.seed)


if __name__ == "__main__":
    main()
