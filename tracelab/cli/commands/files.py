"""Commands that write files: the HTML report, the merged Perfetto trace, a Parquet dataset."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from tracelab.core.errors import UsageError
from tracelab.reports import fmt
from tracelab.cli.commands.shared import (Paths, RankOpt, StepOpt, SchedulerOpt, DeviceOpt, _options, _progress, _status, _shown,
                     many_traces, open_session)


def report(
    paths: Paths,
    out: Annotated[str, typer.Option("-o", "--output", help="The HTML file to write.")] = "report.html",
    force: Annotated[bool, typer.Option("--force", help="Overwrite the output file if it exists.")] = False,
    title: Annotated[Optional[str], typer.Option(help="Report title (default: the inputs' names).")] = None,
    perfetto: Annotated[bool, typer.Option("--perfetto", help="Also write the merged Perfetto trace of the timed "
                                                              "ranks beside the report (OUT.perfetto.json.gz) "
                                                              "and link each rank to it (this holds every "
                                                              "rank's events, read again after the report's "
                                                              "small per-rank tables above 16 traces, and is "
                                                              "refused past what Perfetto's UI opens).")] = False,
    rank: RankOpt = None,
    step: StepOpt = None,
    scheduler: SchedulerOpt = None,
    device: DeviceOpt = None,
) -> None:
    """One self-contained HTML file that works offline: the runs side by side (results, profiler
    cost against a run under backend none), GPU time by op class per rank, top kernels (heatmap,
    sortable table), timeline, overlap and idle, scope trees, steps and who waits on whom, and
    the comparison of runs."""
    from pathlib import Path

    from tracelab.ingest.inputs import check_output
    from tracelab.cli.html_report import write_report

    check_output(out, paths)
    if Path(out).exists() and not force:
        raise UsageError(out, "exists; pass --force to overwrite it")
    whole = perfetto and not many_traces(paths)  # else the merged trace's ranks are read again, if it fits
    from tracelab.core.devices import given_device

    given = given_device(device, None, None)[0]  # the roofline's device, as `tracelab roofline --device`
    session = open_session(paths, _options(step, scheduler), keep_events=whole, rank=rank, device=given)
    with _status(f"analysing {len(session.profiles)} ranks, writing {_shown(out)}"):
        written = write_report(session, out, force=force, title=title, perfetto=perfetto)
    typer.echo(f"wrote {_shown(written)} ({fmt.size(written.stat().st_size)})", err=True)



def export_perfetto(
    paths: Annotated[list[str], typer.Argument(help="Trace files, run folders or folders of traces; "
                                                    "each run gets its own processes.")],
    out: Annotated[str, typer.Option("-o", "--output", help="merged.json, or merged.json.gz to compress (a name "
                                                            "ending .perfetto.json[.gz] is never read back as a trace "
                                                            "when its folder is given to tracelab).")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite the output file if it exists.")] = False,
    ranks: Annotated[Optional[str], typer.Option(help="Only these ranks, e.g. 0,2,4-7.")] = None,
    steps: Annotated[Optional[str], typer.Option(help="Only these steps, e.g. 3-5.")] = None,
    window: Annotated[Optional[str], typer.Option(help="Only events overlapping START_MS:END_MS "
                                                       "(on the merged clock, from the run's first event).")] = None,
    max_events: Annotated[int, typer.Option("--max-events", help="Refuse, naming ranks to pick, when the trace "
                                                                 "would hold more events than this (Perfetto's UI "
                                                                 "opens about 2 million); 0: no limit.")] = 2_000_000,
) -> None:
    """One Chrome/Perfetto JSON trace of every rank (and run): a process per rank, a track per
    stream, scopes and steps as slices, collectives linked across ranks by flow arrows, ranks
    on one clock (otherData.tracelab says how). Opens in Perfetto's UI and chrome://tracing.
    Of more than 16 traces, or with --ranks, only the exported ranks' events are held (and with
    --steps, only those steps' rows)."""
    import time
    from functools import partial
    from pathlib import Path

    from tracelab.ingest.inputs import check_output, with_events, write
    from tracelab.reports.perfetto import perfetto
    from tracelab.reports.ranks import PERFETTO

    check_output(out, paths)
    if Path(out).exists() and not force:
        raise UsageError(out, "exists; pass --force to overwrite it")
    if max_events < 0:
        raise UsageError("--max-events", f"must be 0 (no limit) or more, not {max_events}")
    pick = {"ranks": ranks and perfetto.parse_ints("--ranks", ranks),
            "steps": steps and perfetto.parse_ints("--steps", steps),
            "window_ns": window and perfetto.parse_window_ms(window)}
    lean = bool(pick["ranks"]) or many_traces(paths)  # summaries first: the others' put the run on one clock
    options = _options()
    session = open_session(paths, options, keep_events=not lean, digests=PERFETTO)
    session.usable("export perfetto")
    inputs = session.inputs
    if pick["steps"]:  # before any rank is read again
        perfetto.check_steps([i for i in inputs if i.timed], pick["steps"])
    if too_big := perfetto.oversize(inputs, pick["ranks"] or None, pick["steps"] or None, max_events):
        rows, n_ranks, shown = too_big
        raise UsageError("export perfetto", f"about {rows:,} events from {n_ranks:,} ranks, more than --max-events "
                                            f"{max_events:,} (Perfetto's UI works in a browser tab of ~2 GB). Pick "
                                            f"fewer: --ranks {shown} (the first ranks and the outliers), --steps or "
                                            "--window; or pass --max-events 0 and open the file with "
                                            "`trace_processor --httpd`")
    if lean:
        keep = partial(perfetto.rows_of_steps, steps=frozenset(pick["steps"])) if pick["steps"] else None
        with _progress(disable=False) as bar:
            task = bar.add_task("reading the exported ranks' events", total=None)
            inputs = with_events(inputs, pick["ranks"] or None, keep, on_loaded=lambda _: bar.advance(task),
                                 options=options)
    began, events = time.perf_counter(), []
    written = write(out, lambda put: events.append(perfetto.write_json(put, inputs, **{k: v or None for k, v in
                                                                                      pick.items()})),
                    force=force, gz=out.endswith(".gz"))
    typer.echo(f"wrote {_shown(written)} ({events[0]:,} events, {fmt.size(written.stat().st_size)}, "
               f"{time.perf_counter() - began:.2f} s)", err=True)



def export_parquet(
    paths: Annotated[list[str], typer.Argument(help="Trace files, run folders or folders of traces (one job: "
                                                    "each rank once).")],
    out: Annotated[str, typer.Option("-o", "--output", help="The dataset folder to write: OUT/rank=N/part-0.parquet.")],
    force: Annotated[bool, typer.Option("--force", help="Replace the folder if it exists.")] = False,
    step: StepOpt = None,
    scheduler: SchedulerOpt = None,
) -> None:
    """One Parquet part per rank, OUT/rank=N/part-0.parquet, in tracelab's schema (its dtypes, each
    trace's meta in the part's metadata), each written by the worker that parsed the rank. Any
    tracelab command reads OUT as it reads traces; pandas.read_parquet(OUT, columns=[...]),
    DuckDB (read_parquet('OUT/*/*.parquet', hive_partitioning = true)) and
    dask.dataframe.read_parquet(OUT) read only the columns they need."""
    import time
    from pathlib import Path

    from tracelab.ingest.dataset import export

    options = _options(step, scheduler)
    began = time.perf_counter()

    def ranks(reduce: dict) -> list:  # each rank's part written by the worker that parsed it
        runs = open_session(paths, options, digests=reduce).usable("export parquet")
        if len(runs) > 1:
            raise UsageError("export parquet", f"takes the ranks of one job, each once, not {len(runs)} runs "
                                               f"({', '.join(r.name for r in runs)})")
        return runs[0].profiles

    written = export(paths, out, force=force, load=ranks)
    size = sum(p.stat().st_size for p in written)
    typer.echo(f"wrote {_shown(Path(out))}: {len(written)} parts, {fmt.size(size)}, "
               f"{time.perf_counter() - began:.1f} s", err=True)
