"""tracelab gate: candidate runs against baseline runs, a verdict per metric and an exit status
for CI (0 pass, 1 a regression beyond its threshold and the noise, 2 an error)."""
from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Optional

import typer

from tracelab.core.errors import UsageError
from tracelab.core.note import Note
from tracelab.cli.commands.shared import StepOpt, _check_choice, _emit, _options, open_session

EXIT_REGRESSED = 1
GATE_HELP = ("Did the candidate get slower or hungrier than the baseline, beyond the noise and a threshold, and why? "
             "Each side is one or more run folders or traces (several runs of one config are repeats; a folder of "
             "run folders is each of them). Metrics: step time (the unprofiled step where the run folder recorded "
             "it), GPU time by op class, exposed communication, GPU idle by cause, launches per step, peak allocated "
             "and reserved memory, and the workload's own figures. Exit 0: pass; 1: a regression; 2: an error.\n\n"
             "tracelab gate runs/main runs/pr  |  tracelab gate -b runs/main-1 -b runs/main-2 -c runs/pr "
             "--metric 'idle:*=off' --format junit > gate.xml  |  tracelab gate --accept main runs/main "
             "--baseline-store s3://ci/baselines; tracelab gate baseline:main runs/pr --baseline-store ...")


def gate(
    paths: Annotated[Optional[list[str]], typer.Argument(help="BASELINE CANDIDATE: one of each (else use "
                                                              "--baseline and --candidate).")] = None,
    baseline: Annotated[Optional[list[str]], typer.Option("--baseline", "-b", help="A baseline run folder or trace "
                                                                                   "(repeat for repeats).")] = None,
    candidate: Annotated[Optional[list[str]], typer.Option("--candidate", "-c", help="A candidate run folder or trace "
                                                                                     "(repeat for repeats).")] = None,
    max_regression: Annotated[Optional[str], typer.Option(help="Largest change any metric may make: 5% (default).")]
    = None,
    metric: Annotated[Optional[list[str]], typer.Option("--metric", help="NAME=THRESHOLD for one metric or a pattern "
                                                                         "(step_time=3%, 'gpu_time:*=10%', "
                                                                         "'idle:*=off'); repeatable.")] = None,
    config: Annotated[Optional[Path], typer.Option(help="A TOML file: \\[gate] max-regression = \"5%\", "
                                                        "run-noise = \"10%\", and \\[gate.metrics] NAME = "
                                                        "\"THRESHOLD\"; options given win.")]
    = None,
    run_noise: Annotated[Optional[str], typer.Option(help="How far two runs of the job differ (sd, a share of "
                                                          "the time) where no side has repeats: 10% (default).")]
    = None,
    baseline_store: Annotated[Optional[str], typer.Option(help="Folder or fsspec URL of named baselines "
                                                               "(baseline:NAME; default: TRACELAB_BASELINE_STORE).")]
    = None,
    accept: Annotated[Optional[str], typer.Option(help="Store the run folders given as baseline NAME in the store "
                                                       "(judges nothing): what CI does on the main branch.")] = None,
    keep: Annotated[int, typer.Option(help="--accept keeps this many versions of the name (the gate measures the "
                                           "noise between runs from them): 5 (default).")] = 5,
    fmt: Annotated[str, typer.Option("--format", help="table, json, junit (JUnit XML), markdown or html.")] = "table",
    step: StepOpt = None,
) -> None:
    """Did the candidate get slower or hungrier than the baseline, beyond the noise and a threshold?"""
    from tracelab.reports.gate.gate_text import RENDERERS
    from tracelab.reports.gate.thresholds import thresholds
    from tracelab.reports.gate.verdict import gate as judge
    from tracelab.ingest.session import trace_count

    _check_choice("--format", fmt, tuple(RENDERERS))
    options = _options(step)
    store = baseline_store or options.baseline_store
    if accept is not None:
        return _accept(accept, (paths or []) + (baseline or []) + (candidate or []), store, keep)
    sides = _sides(paths or [], baseline or [], candidate or [])
    limits = thresholds(max_regression, metric or [], config, run_noise)
    with ExitStack() as fetched:
        sides, earlier, left_out = _fetched(sides, store, fetched)
        for side in sides:
            trace_count(side)  # a path to nothing refused before either side is parsed
        base, cand = (side_samples(side, options) for side in sides)
        history = _history(earlier, options, left_out)
        result = judge(base, cand, limits, history)
    if left_out:
        result.notes.append(Note("gate_history_unreadable", {"versions": left_out}))
    _emit(RENDERERS[fmt](result))
    if not result.passed:
        raise typer.Exit(EXIT_REGRESSED)


def _fetched(sides: tuple[list[str], list[str]], store: str | None,
             stack: ExitStack) -> tuple[tuple[list[str], list[str]], list[Path], list[str]]:
    """(the sides with each baseline:NAME fetched to a local folder; the earlier versions the store
    kept of the baseline where the baseline side is one baseline:NAME, oldest first; the kept
    versions that could not be read)."""
    from tracelab.ingest.baselines import PREFIX, fetch_versions, is_baseline

    earlier, left_out, out = [], [], ([], [])
    for k, side in enumerate(sides):
        for p in side:
            if not is_baseline(p):
                out[k].append(p)
                continue
            with_history = k == 0 and len(side) == 1  # the history of one named baseline, the baseline side's
            versions, skipped = stack.enter_context(fetch_versions(p[len(PREFIX):], store, with_history))
            out[k].append(str(versions[-1]))
            if with_history:
                earlier, left_out = versions[:-1], skipped
    return out, earlier, left_out


def _history(folders: list[Path], options, left_out: list[str]) -> list[list]:
    """Each earlier kept version's runs as RunSamples; one that cannot be read is left out, its
    version named in `left_out` (a history is measured on what could be read)."""
    from tracelab.core.errors import TracelabError

    out = []
    for folder in folders:
        try:
            out.append(side_samples([str(folder)], options))
        except TracelabError:
            left_out.append(folder.parent.name)
    return out


def _accept(name: str, runs: list[str], store: str | None, keep: int) -> None:
    """--accept NAME RUN...: the runs stored as baseline NAME's new version, the last `keep` kept."""
    from tracelab.ingest.baselines import save

    if not runs:
        raise UsageError("--accept", f"names no run to store (tracelab gate --accept {name} RUN_FOLDER)")
    version = save(name, [Path(r) for r in runs], store, keep)
    typer.echo(f"stored {', '.join(runs)} as baseline:{name} (version {version}) in {store}")


def _sides(paths: list[str], baseline: list[str], candidate: list[str]) -> tuple[list[str], list[str]]:
    """(baseline paths, candidate paths): two positionals, or --baseline and --candidate, not both."""
    if paths and (baseline or candidate):
        raise UsageError("gate", "give BASELINE CANDIDATE, or --baseline and --candidate, not both")
    if paths:
        if len(paths) != 2:
            raise UsageError("gate", f"takes two paths, BASELINE CANDIDATE, not {len(paths)} (several runs a side: "
                                     "--baseline A --baseline B --candidate C)")
        return [paths[0]], [paths[1]]
    if not baseline or not candidate:
        raise UsageError("gate", "needs a baseline and a candidate (BASELINE CANDIDATE, or --baseline and --candidate)")
    return baseline, candidate


def side_samples(paths: list[str], options) -> list:
    """Each run of one side (its paths, repeats expanded) as RunSamples (reports/gate/samples.py)."""
    from tracelab.reports.gate.samples import GATE_DIGESTS, run_samples
    from tracelab.reports.ranks import rank_digests
    from tracelab.ingest.session import SNAPSHOT

    session = open_session(paths, options, digests=rank_digests(("gate", *GATE_DIGESTS)))
    runs = [r for r in session.runs if r.kind != SNAPSHOT]
    for r in session.runs:
        if r.kind == SNAPSHOT:
            session.note(Note("snapshot_not_gated", where=(r.name,)))
    if not runs:
        raise UsageError("gate", f"none of {', '.join(paths)} is a run folder or trace")
    return [run_samples(r.name, [(p.rank, p.summary) for p in r.profiles], r.info) for r in runs]
