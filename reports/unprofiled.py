"""The run's step without the profiler, as its run folder measured it, and the one rule that says
whether a saving the trace shows is the user's or the profiler's. Pure: run.json dicts in.

The user runs without the profiler: where the run timed its steps with the profiler off (run.json
results' unprofiled_step_ns, or the same job under backend none beside it), every command states
host-bound steps and savings against that step (whatif's findings, idle's bounds).
"""
from __future__ import annotations

from dataclasses import dataclass

# a saving whose share of the step without the profiler is under this share of its share under it
# is mostly the profiler's own host cost: the device paces the user's step
PROFILER_MADE_FRAC = 0.5


def profiler_made_it(profiled_share: float, unprofiled_saving_ns: float | None,
                     unprofiled_step_ns: float | None) -> bool | None:
    """Whether most of a saving is the profiler's own: its share of the step without the profiler
    (unprofiled_saving_ns of unprofiled_step_ns) under PROFILER_MADE_FRAC of its share of the
    profiled step (`profiled_share`); None where the step without the profiler is not known."""
    if unprofiled_saving_ns is None or not unprofiled_step_ns:
        return None
    return unprofiled_saving_ns / unprofiled_step_ns < PROFILER_MADE_FRAC * profiled_share


def measured_unprofiled_ns(info: dict | None) -> float | None:
    """The run's step without the profiler as its run folder measured it (run.json results'
    unprofiled_step_ns: the slowest rank's median), None where it holds none or several (a sweep
    of sizes, whose steps the trace does not tell apart)."""
    from tracelab.ingest.results import of_run

    if not info:
        return None
    per_rank = []
    for record in of_run(info).values():
        timed = [t["unprofiled_step_ns"] for t in (record, *record.get("rows", []))
                 if isinstance(t, dict) and t.get("unprofiled_step_ns")]
        if len(timed) != 1:
            return None
        per_rank.append(float(timed[0]))
    return max(per_rank) if per_rank else None


def measured_regions(info: dict | None) -> dict[int, tuple[float, dict]] | None:
    """Per rank, its step and its regions (phases) without the profiler as its run folder measured
    them (run.json results' unprofiled_step_ns and unprofiled_region_ns: regions.py), None where no
    rank timed its regions or a rank holds several rows (a sweep)."""
    from tracelab.ingest.results import of_run

    out = {}
    for rank, record in (of_run(info) if info else {}).items():
        rows = record.get("rows") or []
        if len(rows) != 1:
            return None
        step, regions = rows[0].get("unprofiled_step_ns"), rows[0].get("unprofiled_region_ns")
        if step and regions:
            out[int(rank)] = (float(step), dict(regions))
    return out or None


@dataclass(frozen=True)
class MeasuredStep:
    """The run's step without the profiler, as measured: in the run's own process with the profiler
    off (`under_none` None), or the median step of the same job run under backend none beside it
    (`under_none`: that run's name); `regions`: per rank its own step and phases, where the run
    timed them (measured_regions)."""

    ns: float
    under_none: str | None = None
    regions: dict[int, tuple[float, dict]] | None = None


def measured_step(info: dict | None, runs) -> MeasuredStep | None:
    """The step without the profiler of the run whose run.json is `info`: its own measurement
    (measured_unprofiled_ns) first, the same steps; else the median step of the same job under
    backend none among `runs` ((folder name, info) pairs: runtable.baseline finds it), where that
    run timed its steps; None otherwise. One figure, so every command says the same user's step."""
    own = measured_unprofiled_ns(info)
    if own:
        return MeasuredStep(own, regions=measured_regions(info))
    return _none_step(info, runs) if info else None


def _none_step(info: dict, runs) -> MeasuredStep | None:
    from .runtable import cost_of

    cost = cost_of(info, list(runs))
    if cost is None or cost["measure"] != "step time" or cost["unit"] != "ms" or not cost["theirs"]:
        return None
    return MeasuredStep(1e6 * cost["theirs"], cost["baseline"])


def unprofiled_of(runs, paths: list[str]) -> MeasuredStep | None:
    """measured_step of the run folder the rank files `paths` were read from, from the run.json
    infos the caller read (`runs`: (folder name, info) pairs, as Evidence.runs), None for bare
    traces or ranks of several folders. Reads no file: reports are pure."""
    from pathlib import Path

    from .runtable import info_beside

    named = [p for p in paths if p]
    if len({Path(p).parent.name for p in named}) != 1:
        return None
    return measured_step(info_beside(named[0], runs), runs)
