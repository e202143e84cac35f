"""tracelab run: a workload on N ranks under a profiler, then each rank's breakdown and the report."""
from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from tracelab.cli.commands.shared import fail, _shown, _emit, _top, end_on_findings, open_session


def _backend_names() -> str:
    from tracelab.run.backends import BACKENDS

    return "|".join(BACKENDS)



def run(
    ctx: typer.Context,
    workload: Annotated[str, typer.Argument(help="decode, train, allreduce or overlap.")],
    ranks: Annotated[int, typer.Option(help="Processes per node (one per GPU).")] = 1,
    backend: Annotated[Optional[str], typer.Option(help=f"Profiler: {_backend_names()} "
                                                        "(default: proton on a GPU, torch on the CPU).")] = None,
    out: Annotated[str, typer.Option(help="Folder that gets one new run folder.")] = "runs",
    nnodes: Annotated[Optional[str], typer.Option(help="torchrun --nnodes, for several nodes.")] = None,
    rdzv_endpoint: Annotated[Optional[str], typer.Option(help="torchrun --rdzv-endpoint HOST:PORT.")] = None,
    top: Annotated[int, typer.Option(help="Kernels shown per rank in the breakdown (0: all).")] = 10,
    memory: Annotated[bool, typer.Option("--memory/--no-memory", help="Record memory events (torch: "
                                         "profile_memory=True; nsys: --cuda-memory-usage=true); run.json says which.")]
    = True,
    repeat: Annotated[int, typer.Option(help="Runs of this config, one after another, in one folder (repeat-1, "
                                             "repeat-2, ...): repeats, which `tracelab gate` reads as samples of "
                                             "how far runs of the job differ.")] = 1,
) -> None:
    """Run a workload on N ranks under a profiler (torchrun), then show each rank's breakdown.
    Workload options follow `--`: tracelab run decode --ranks 2 -- --new-tokens 16;
    `tracelab run decode -- --help` lists them."""
    from pathlib import Path

    from tracelab.run.runner import RunInterrupted, RunSpec, run_repeats
    from tracelab.run.workload_options import WorkloadHelp

    top = _top(top)
    spec = RunSpec(workload, ranks, backend, Path(out), list(ctx.args), nnodes, rdzv_endpoint, sys.argv, memory,
                   repeat=repeat)
    try:
        folder, results = run_repeats(spec, on_line=lambda line: typer.echo(line, err=True))
    except WorkloadHelp as h:
        typer.echo(f"{workload}'s own options, given after `--` (tracelab run {workload} [OPTIONS] -- ...); "
                   "tracelab run sets --backend and --out:\n")
        typer.echo(h.text.rstrip())
        raise typer.Exit(0) from None
    except RunInterrupted as stop:  # exit status as for a process the signal ended: 130 for Ctrl-C
        fail(str(stop), 128 + stop.signum)
    for result in results:
        for rank_results in result.record["results"].values():
            typer.echo(_results_line(rank_results) + (f" ({result.run_dir.name})" if len(results) > 1 else ""))
    traces = [t for result in results for t in result.traces]
    if traces:
        typer.echo(f"analysing {len(traces)} trace(s)", err=True)
        _run_report(folder, top)
    typer.echo(f"run folder: {folder}")



def _results_line(f: dict) -> str:
    """A rank's results (tracelab/results.py): gpt-fast's line for decode, else key=value pairs."""
    if "tokens_per_s" in f:
        return (f"rank {f['rank']}: {f['s_per_sample']:.3f} s per sample, {f['tokens_per_s']:.2f} tokens/s, "
                f"bandwidth achieved {f['bandwidth_gb_s']:.2f} GB/s")
    plain = {k: v for k, v in f.items() if isinstance(v, (int, float, str)) and k != "rank"}
    return f"rank {f.get('rank', '?')}: " + ", ".join(f"{k}={v}" for k, v in plain.items())



def _run_report(run_dir, top: int) -> None:
    """Each rank's breakdown on the terminal, and report.html in the run folder."""
    from tracelab.ingest.loading import events
    from tracelab.reports.breakdown.breakdown import breakdown as analyse, summary
    from tracelab.reports.breakdown.breakdown_text import BREAKDOWN_RENDERERS

    from tracelab.cli.html_report import write_report

    session = open_session([str(run_dir)], keep_events=True, digests=())
    df = events(session.runs[0].profiles)  # repeats: the first run's (report.html has every run)
    _emit(BREAKDOWN_RENDERERS["table"](summary(df), analyse(df, by="kernel", top=top), "kernel"))
    written = write_report(session, run_dir / "report.html", title=f"tracelab run {run_dir.name}")
    typer.echo(f"wrote {_shown(written)}", err=True)
    end_on_findings("table", session)

