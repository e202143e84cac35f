"""The tracelab command line: the only place that prints, exits or reads argv."""
from __future__ import annotations

import os
import sys
from typing import Annotated, Optional

import typer

from .errors import UsageError

app = typer.Typer(
    help="tracelab: where did the GPU time go, on each rank? Reads proton (.hatchet), "
         "torch.profiler (Kineto JSON) and nsys (SQLite) traces into one schema.",
    epilog="Examples:  tracelab run decode --ranks 2  |  tracelab breakdown rank0.hatchet --by scope  |  "
           "tracelab compare rank0.hatchet rank1.hatchet  |  tracelab report runs/decode-torch-*/ -o report.html",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

EXIT_BAD_INPUT = 2


@app.callback()
def _group() -> None:
    """tracelab: where did the GPU time go, on each rank?"""


def fail(message: str, status: int = EXIT_BAD_INPUT) -> None:
    """One line on stderr (control characters escaped), then exit non-zero."""
    typer.echo(f"tracelab: error: {_shown(message)}", err=True)
    raise typer.Exit(status)


def main() -> None:
    """Entry point, the one place that turns what goes wrong into one line on stderr
    (tracelab/terminal.py): library errors, OS failures (permissions, a full disk, a file
    past `ulimit -f`) and memory running out exit with status 2; warnings of a command
    that succeeds follow its output, one line each."""
    import warnings

    from .terminal import error_line, printable, warning_lines

    _NOTES.clear()  # this command's own (a test may run several in one process)
    with warnings.catch_warnings(record=True) as caught:
        try:
            app()
        except SystemExit as done:
            if not done.code:
                for line in [*map(printable, dict.fromkeys(_NOTES)), *warning_lines(caught)]:
                    typer.echo(line, err=True)
            raise
        except BrokenPipeError:  # stdout closed early (`| head`): nothing more to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except Exception as e:
            if (line := error_line(e)) is None:
                raise  # a bug in tracelab: its traceback is the report
            typer.echo(line, err=True)
            sys.exit(EXIT_BAD_INPUT)


Paths = Annotated[list[str], typer.Argument(help="Trace files (.hatchet, Kineto .json/.json.gz, nsys .sqlite) "
                                                  "or folders holding them (a run folder, say).")]
RankOpt = Annotated[Optional[int], typer.Option("--rank", help="Only this rank, picked from every input (a "
                                                                "multi-rank nsys file, a folder); a lone file that does "
                                                                "not say its rank is taken as it.")]
StepOpt = Annotated[Optional[str], typer.Option("--step", help="Regular expression naming the step ranges "
                                                               "(default: ProfilerStep#N, step N, iteration N, token N; "
                                                               "say decode_one_token for our older decode captures).")]


SchedulerOpt = Annotated[Optional[str], typer.Option("--scheduler", help="Address of a running Dask scheduler "
                                                                      "(tcp://host:8786) whose workers parse and reduce "
                                                                      "the ranks; default: $TRACELAB_SCHEDULER, else local "
                                                                      "processes. Paths may be fsspec URLs (s3://...). "
                                                                      "Needs pip install 'tracelab\\[dist]'.")]


def _set_scheduler(address: str | None) -> None:
    """--scheduler: load_many reads it from the environment (tracelab.remote.scheduler)."""
    if address:
        from .remote import SCHEDULER_ENV

        os.environ[SCHEDULER_ENV] = address


def _set_step(step: str | None) -> None:
    """--step: the parsers (in load_many's workers too) read it from the environment."""
    if step is not None:
        import os

        from .parsers._steps import STEP_PATTERN_ENV, compile_pattern

        compile_pattern(step)  # a bad pattern is one line here, not in a worker
        os.environ[STEP_PATTERN_ENV] = step


def _load(paths: list[str], rank: int | None = None, **work):
    """Load with a progress bar on stderr when there are several files; --rank picks one rank.
    `work`: load_many's reduce and keep_events."""
    from .load import expand, load_many
    from .pick import pick_rank

    files = expand(paths)
    if len(files) == 1:
        profiles = load_many(files, **work)  # a file of several processes gives one Profile per rank
    else:
        with _progress() as bar:
            task = bar.add_task(f"loading {len(files)} traces", total=len(files))
            profiles = load_many(files, on_loaded=lambda _: bar.advance(task), **work)
    _say_notes(profiles)
    return profiles if rank is None else pick_rank(profiles, rank, ", ".join(paths))


_NOTES: list[str] = []  # what the parsers noted about the inputs, said after the output (main)


def _say_notes(profiles) -> None:
    """What a parser noted about a trace (meta["notes"]: a CUDA graph captured outside it, say):
    one line each on stderr once the command has succeeded, each distinct line once."""
    _NOTES.extend(f"tracelab: note: {p.meta.get('path')}: {note}" for p in profiles for note in p.meta.get("notes") or ())


def _err_console():
    from rich.console import Console

    return Console(stderr=True)


def _progress(disable: bool = False):
    """A transient progress bar on stderr, only on a terminal (elsewhere it left a blank line)."""
    from rich.progress import Progress

    console = _err_console()
    return Progress(transient=True, console=console, disable=disable or not console.is_terminal)


def _status(text: str):
    """A transient spinner with `text` on stderr while a long step runs, only on a terminal."""
    from contextlib import nullcontext

    console = _err_console()
    return console.status(text) if console.is_terminal else nullcontext()


def _shown(path) -> str:
    """A path as printed: control characters escaped (terminal.printable)."""
    from .terminal import printable

    return printable(str(path))


def _emit(rendered) -> None:
    """Output on stdout; names from traces reach a terminal with control characters escaped."""
    from .terminal import Escaped, printable

    if isinstance(rendered, str):
        text = printable(rendered, keep="\n\t") if sys.stdout.isatty() else rendered  # CSV/JSON to a file: as is
        typer.echo(text, nl=not rendered.endswith("\n"))
    else:
        from rich.console import Console

        Console(width=None if sys.stdout.isatty() else 160).print(Escaped(rendered))


@app.command()
def breakdown(
    paths: Paths,
    by: Annotated[str, typer.Option(help="Group by kernel (canonical name), op_class, scope, step or "
                                                    "module_type (a compiled run's modules, layer indices as *).")] = "kernel",
    top: Annotated[int, typer.Option(help="Show the N largest groups per rank, the rest as one row (0: all).")] = 15,
    fmt: Annotated[str, typer.Option("--format", help="table, csv or json.")] = "table",
    rank: RankOpt = None,
    step: StepOpt = None,
    scheduler: SchedulerOpt = None,
) -> None:
    """Per rank: GPU time, share, count and mean per kernel / op class / scope,
    headed by the rank's kernel and memcpy time and, where timestamps exist, busy span and idle share."""
    from .load import events
    from .reports.breakdown import BY_CHOICES, breakdown as analyse, per_rank, stacked, summary, top_rows
    from .reports.compare import FINDINGS, rank_digests
    from .reports.text import BREAKDOWN_RENDERERS

    _check_choice("--by", by, BY_CHOICES)
    _check_choice("--format", fmt, tuple(BREAKDOWN_RENDERERS))
    top = _top(top)
    _set_step(step)
    _set_scheduler(scheduler)
    if rank is not None:  # one rank picked out of the inputs: its events
        profiles = _load(paths, rank)
        df = events(profiles)
        _emit(BREAKDOWN_RENDERERS[fmt](summary(df), analyse(df, by=by, top=top), by))
        return _findings(fmt, paths, profiles)
    # each rank's tables made where it was parsed; its events never reach this process
    findings = rank_digests(FINDINGS) if fmt == "table" else {}  # only the table ends on the findings
    profiles = _load(paths, reduce={**per_rank(by), **findings}, keep_events=False)
    table = top_rows(stacked(profiles, "breakdown"), by, top)  # the top N over all ranks' totals
    _emit(BREAKDOWN_RENDERERS[fmt](stacked(profiles, "summary"), table, by))
    _findings(fmt, paths, profiles)


def _findings(fmt: str, paths: list[str], profiles: list | None = None, groups: list | None = None,
              comparison=None) -> None:
    """The findings lines (reports/findings.py), the report's sentences, after a table's output
    (CSV and JSON stay as they are)."""
    if fmt != "table":
        return
    from .inputs import findings_of, regroup
    from .reports.findings import lines

    found = findings_of(paths, groups if groups is not None else regroup(paths, profiles), comparison)
    _emit("\n" + "\n".join(lines(found)))


def _top(top: int) -> int | None:
    """--top, one meaning for every command: the N largest rows; 0 all of them (None)."""
    if top < 0:
        raise UsageError("--top", f"must be 0 (all) or more, not {top}")
    return top or None


def _check_choice(option: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(option, f"{value!r} is not one of {', '.join(choices)}")


def _load_groups(paths: list[str], keep_events: bool = True, digests: tuple[str, ...] | None = None) -> list[list]:
    """Each path (file or folder) loaded on its own, so ranks may repeat across runs;
    one progress bar on stderr over all their files. Without `keep_events` only each rank's
    summaries (`digests`, reports.compare.RANK_SUMMARIES names; all where None), made in the
    worker that parsed it, reach this process."""
    from .inputs import load_groups

    total = _trace_count(paths)
    with _progress(disable=total < 2) as bar:
        task = bar.add_task(f"loading {total} traces", total=total)
        groups = load_groups(paths, on_loaded=lambda _: bar.advance(task), keep_events=keep_events, digests=digests)
    _say_notes([p for group in groups for p in group])
    return groups


DeviceOpt = Annotated[Optional[str], typer.Option(
    "--device", help="The device when the trace does not say or to override it: H100 (SXM), H100-PCIe, H100-NVL, "
                     "H200, A100, A100-40GB, A100-PCIe, B200.")]


@app.command()
def roofline(
    paths: Paths,
    by: Annotated[str, typer.Option(help="Group by kernel, scope or op_class.")] = "kernel",
    top: Annotated[int, typer.Option(help="Show the N rows losing most time (0: all).")] = 20,
    fmt: Annotated[str, typer.Option("--format", help="table, csv or json.")] = "table",
    rank: RankOpt = None,
    device: DeviceOpt = None,
    peak_tflops: Annotated[Optional[float], typer.Option(help="Peak TFLOP/s (every dtype), with --peak-gb-s.")] = None,
    peak_gb_s: Annotated[Optional[float], typer.Option(help="Peak memory bandwidth in GB/s, with --peak-tflops.")] = None,
) -> None:
    """Was the GPU time well spent? Per kernel / scope / op class: time, FLOPs and bytes from
    the trace itself (torch.profiler with record_shapes: the shapes of the aten op that launched
    each kernel; proton: its flops8/16/32/64 and bytes metrics; copies and fills: their sizes),
    achieved TFLOP/s and GB/s, FLOP/byte, compute- or memory-bound against the device's ridge point,
    the share of the roofline reached and the time lost beyond it (lost_ns), sorted by lost time.
    Kernels whose work the trace does not give (most Inductor/Triton kernels without proton
    metadata; nsys without NVTX shapes) are unknown, never zero; the share of GPU time with known
    work is printed. The device comes from the trace (Kineto deviceProperties, nsys, proton's
    device info, a run folder's run.json), else --device; peaks are datasheet dense figures."""
    from .devices import given_device, meta_device
    from .reports.roofline import BY_CHOICES, roofline as analyse, with_scope_work
    from .reports.roofline_text import RENDERERS

    _check_choice("--by", by, BY_CHOICES)
    _check_choice("--format", fmt, tuple(RENDERERS))
    top = _top(top)
    given = given_device(device, peak_tflops, peak_gb_s)
    results = []
    for p in _load(paths, rank):
        found, source = given if given[0] is not None else meta_device(p.meta)
        # proton's scope metrics belong to scopes: spread over kernels they would give every kernel the same rate
        events = with_scope_work(p.events, p.meta.get("scope_metrics")) if by == "scope" else p.events
        results.append(analyse(events, found, by, source))
    _emit(RENDERERS[fmt](results, by, top))


@app.command()
def compare(
    paths: Annotated[list[str], typer.Argument(help="Two or more trace files, run folders or folders of traces; "
                                                    "the first is the reference.")],
    by: Annotated[Optional[str], typer.Option(help="Align rows on scope,kernel (default for one profiler), "
                                                   "kernel (default across profilers), op_class or scope.")] = None,
    top: Annotated[int, typer.Option(help="Show the N largest rows (0: all).")] = 25,
    fmt: Annotated[str, typer.Option("--format", help="table, csv or json.")] = "table",
    tree: Annotated[bool, typer.Option("--tree", help="For two proton files: the tree of differences "
                                                       "(like proton-viewer --diff-profile).")] = False,
    rank: RankOpt = None,
    step: StepOpt = None,
    scheduler: SchedulerOpt = None,
    n_steps: Annotated[Optional[int], typer.Option("--steps", help="Steps covered by inputs without step "
                                                                   "instances (proton), to compare per step; "
                                                                   "default: what their run folder's run.json "
                                                                   "records.")] = None,
) -> None:
    """Ranks, runs or profilers side by side: time and count per input, delta and ratio
    against the first, spread and slowest input per row, and the straggler verdict
    (who waits on whom at the collectives; `tracelab steps` shows it per step)."""
    from .inputs import label_inputs
    from .reports.compare import BY, COMPARISON, FINDINGS, comparison, default_by
    from .reports.text import COMPARE_RENDERERS

    if by is not None:
        _check_choice("--by", by, tuple(BY))
    _check_choice("--format", fmt, tuple(COMPARE_RENDERERS))
    top = _top(top)
    if tree:
        return _tree_diff(paths)
    _set_step(step)
    _set_scheduler(scheduler)
    digests = FINDINGS if fmt == "table" else COMPARISON  # only the table ends on the findings
    groups = _with_steps(paths, _picked(paths, _load_groups(paths, keep_events=False, digests=digests), rank), n_steps)
    if sum(len(g) for g in groups) < 2:
        raise UsageError("compare", "needs two or more traces or ranks (files, folders, or one file of several ranks)")
    inputs = label_inputs(paths, groups)
    by = by or default_by(inputs)
    c = comparison(inputs, by)
    _emit(COMPARE_RENDERERS[fmt](c, BY[by], top))
    _findings(fmt, paths, groups=groups, comparison=c)


def _with_steps(paths: list[str], groups: list[list], n_steps: int | None) -> list[list]:
    """Profiles without step instances (proton) get meta["steps"]: --steps, else the steps their
    run folder's run.json records (reports/steps.recorded_steps), so compare can go per step."""
    from .inputs import run_info
    from .reports.steps import recorded_steps

    if n_steps is not None and n_steps < 1:
        raise UsageError("--steps", f"must be at least 1, not {n_steps}")
    for path, group in zip(paths, groups):
        steps = n_steps or recorded_steps(run_info([path]))
        for p in group:
            if steps and not _has_steps(p):
                p.meta["steps"] = steps
    return groups


def _has_steps(p) -> bool:
    """Whether a profile has step instances: its worker's summary says, else its events."""
    from .reports.compare import RANK_SUMMARIES

    noise = p.summary["noise"] if "noise" in p.summary else RANK_SUMMARIES["noise"](p.events)
    return bool(noise["steps"])


def _picked(paths: list[str], groups: list[list], rank: int | None) -> list[list]:
    """--rank N: that rank out of each input's profiles."""
    from .pick import pick_rank

    return groups if rank is None else [pick_rank(g, rank, p) for p, g in zip(paths, groups)]


@app.command()
def steps(
    paths: Paths,
    fmt: Annotated[str, typer.Option("--format", help="table, csv or json.")] = "table",
    rank: RankOpt = None,
    step: StepOpt = None,
    scheduler: SchedulerOpt = None,
    n_steps: Annotated[Optional[int], typer.Option("--steps", help="Steps the traces cover, to divide totals "
                                                                   "by where they have no instances (proton); "
                                                                   "default: what the run folder's run.json records.")]
    = None,
) -> None:
    """Per step and rank of one run: step time (first to last GPU activity of the step), GPU busy,
    compute, communication, exposed communication and wait at collectives; per step the gating
    rank (the last to arrive for most of the step's collective skew), every rank's wait and why
    the gating rank was late (more GPU work before the collective, or an idle GPU); then the
    run's verdict: a straggler only when it gates a significant majority of steps."""
    import pandas as pd

    from .inputs import run_info
    from .reports.steps import per_step_totals, recorded_steps
    from .reports.steps_text import STEPS_RENDERERS
    from .reports.idle import RankIdle, idle_columns
    from .reports.waits import RANK_SUMMARIES, analyse_digests

    _check_choice("--format", fmt, tuple(STEPS_RENDERERS))
    if n_steps is not None and n_steps < 1:
        raise UsageError("--steps", f"must be at least 1, not {n_steps}")
    _set_step(step)
    _set_scheduler(scheduler)
    from .reports.compare import FINDINGS, rank_digests

    findings = rank_digests(FINDINGS) if fmt == "table" else {}  # only the table ends on the findings
    profiles = _load(paths, rank, reduce={**findings, **RANK_SUMMARIES, "idle": RankIdle(0)},
                     keep_events=False)  # digested in its worker
    w = analyse_digests({p.rank: p.summary["waits"] for p in profiles},
                        {p.rank: p.meta.get("trace_start_epoch_ns") for p in profiles})
    n_steps = n_steps or recorded_steps(run_info(paths))
    untimed = not any(p.summary["timed"] for p in profiles)
    sums = pd.concat([p.summary["kernel_totals"].assign(rank=p.rank) for p in profiles], ignore_index=True)
    totals = per_step_totals(profiles[0].events, n_steps, sums) if untimed and n_steps else None
    if len(w.steps):  # issue 21: the idle columns beside each step row
        w.steps = idle_columns(w.steps, {p.rank: p.summary["idle"] for p in profiles})
    _emit(STEPS_RENDERERS[fmt](w, totals))
    _findings(fmt, paths, profiles)


IDLE_HELP = ("Why was the GPU idle? Per step and rank: the GPU's idle time (gaps in the union of all streams' GPU "
             "work between the step's first GPU start and last GPU end, as in tracelab steps), split by cause. Each "
             "gap ends where the next GPU op starts; L is the start of that op's launch call. A trace without steps "
             "is one window, first GPU start to last GPU end.\n\n"
             "host: before L, the host had not yet begun to launch the op (and was in no sync call).\n\n"
             "sync: before L, the host was blocked in a synchronising call (cudaDeviceSynchronize, "
             "cudaStreamSynchronize, cudaEventSynchronize, a blocking cudaMemcpy, cudaFree).\n\n"
             "launch: from L, the launch call was still running when the GPU went idle (launch latency).\n\n"
             "dependency: from L, the op was queued before the GPU went idle and nothing on its own stream ran up "
             "to then: it waited on another stream, an event or a peer (waits at collectives are inside the "
             "collective kernels: see tracelab steps).\n\n"
             "other: from L, queued behind its own stream's op that ended the busy time (the GPU's own gap between "
             "queued ops); or the op has no launch call in the trace.\n\n"
             "The causes add up to the idle time exactly. bound per step is the largest of gpu (busy minus exposed "
             "communication), communication (exposed communication + dependency) and host (host + launch + sync). "
             "Then per rank: kernel launch statistics (kernels per step, launch-to-start delay median and p90, CPU "
             "time of the launch calls, kernels shorter than their own launch call), the CPU ops, ranges "
             "(record_function, NVTX) and OS calls covering the host-caused idle (top N), and a hint when steps "
             "are host-bound. torch.profiler and nsys traces; proton records no launches.")


@app.command(help=IDLE_HELP)
def idle(
    paths: Paths,
    rank: RankOpt = None,
    step: StepOpt = None,
    top: Annotated[int, typer.Option(help="The N host ops covering the most host-caused idle, per rank (0: all).")] = 10,
    fmt: Annotated[str, typer.Option("--format", help="table, csv or json.")] = "table",
    scheduler: SchedulerOpt = None,
) -> None:
    from .reports.idle import RankIdle, combine, labelled
    from .reports.idle_text import IDLE_RENDERERS

    _check_choice("--format", fmt, tuple(IDLE_RENDERERS))
    top = _top(top)
    _set_step(step)
    _set_scheduler(scheduler)
    parts = []  # each input on its own: two runs may both hold rank 0
    for path in paths:
        profiles = _load([path], rank, reduce={"idle": RankIdle(top)}, keep_events=False)  # reduced in the workers
        parts.append((path, combine({p.rank: p.summary["idle"] for p in profiles})))
    _emit(IDLE_RENDERERS[fmt](labelled(parts), top))


def _tree_diff(paths: list[str]) -> None:
    from pathlib import Path

    from .load import detect
    from .parsers.hatchet import tree
    from .reports.text import tree_diff_text
    from .reports.treediff import tree_diff

    if len(paths) != 2 or any(Path(p).is_dir() or detect(p) != "hatchet" for p in paths):
        raise UsageError("--tree", "needs exactly two proton .hatchet files")
    first, second = (Path(p).name for p in paths)
    _emit(tree_diff_text(tree_diff(tree(paths[0]), tree(paths[1]), names=(paths[0], paths[1])), first, second))


@app.command()
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
) -> None:
    """One self-contained HTML file that works offline: the runs side by side (results, profiler
    cost against a run under backend none), GPU time by op class per rank, top kernels (heatmap,
    sortable table), timeline, overlap and idle, scope trees, steps and who waits on whom, and
    the comparison of runs."""
    from pathlib import Path

    from .inputs import write_report

    if Path(out).exists() and not force:
        raise UsageError(out, "exists; pass --force to overwrite it")
    _set_step(step)
    _set_scheduler(scheduler)
    whole = perfetto and not _many_traces(paths)  # else the merged trace's ranks are read again, if it fits
    groups = _picked(paths, _load_groups(paths, keep_events=whole), rank)
    with _status(f"analysing {sum(map(len, groups))} ranks, writing {_shown(out)}"):
        written = write_report(paths, out, force=force, title=title, groups=groups, perfetto=perfetto)
    typer.echo(f"wrote {_shown(written)} ({written.stat().st_size / 1e6:.1f} MB)", err=True)


export_app = typer.Typer(help="Write the inputs for another tool.", no_args_is_help=True)
app.add_typer(export_app, name="export")


@export_app.command("perfetto")
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

    from .inputs import label_inputs, with_events, write
    from .reports import perfetto
    from .reports.compare import PERFETTO

    if Path(out).exists() and not force:
        raise UsageError(out, "exists; pass --force to overwrite it")
    if max_events < 0:
        raise UsageError("--max-events", f"must be 0 (no limit) or more, not {max_events}")
    pick = {"ranks": ranks and perfetto.parse_ints("--ranks", ranks),
            "steps": steps and perfetto.parse_ints("--steps", steps),
            "window_ns": window and perfetto.parse_window_ms(window)}
    lean = bool(pick["ranks"]) or _many_traces(paths)  # summaries first: the others' put the run on one clock
    inputs = label_inputs(paths, _load_groups(paths, keep_events=not lean, digests=PERFETTO))
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
            inputs = with_events(inputs, pick["ranks"] or None, keep, on_loaded=lambda _: bar.advance(task))
    began, events = time.perf_counter(), []
    written = write(out, lambda put: events.append(perfetto.write_json(put, inputs, **{k: v or None for k, v in
                                                                                      pick.items()})),
                    force=force, gz=out.endswith(".gz"))
    typer.echo(f"wrote {_shown(written)} ({events[0]:,} events, {written.stat().st_size / 1e6:.2f} MB, "
               f"{time.perf_counter() - began:.2f} s)", err=True)


def _trace_count(paths: list[str]) -> int:
    """The trace files the paths hold (a run folder without traces holds none)."""
    from pathlib import Path

    from .inputs import traceless_run
    from .load import expand

    return sum(0 if traceless_run(Path(p)) else len(expand(p)) for p in paths)


def _many_traces(paths: list[str]) -> bool:
    """More trace files than reports show one by one (figures.MANY_RANKS)."""
    from .reports.figures import MANY_RANKS

    return _trace_count(paths) > MANY_RANKS


@export_app.command("parquet")
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

    from .dataset import export
    from .load import expand

    _set_step(step)
    _set_scheduler(scheduler)
    began = time.perf_counter()
    files = expand(paths)
    with _progress(disable=len(files) < 2) as bar:
        task = bar.add_task(f"writing {len(files)} traces", total=len(files))
        written = export(paths, out, force=force, on_loaded=lambda _: bar.advance(task))
    size = sum(p.stat().st_size for p in written)
    typer.echo(f"wrote {_shown(Path(out))}: {len(written)} parts, {size / 1e6:.1f} MB, "
               f"{time.perf_counter() - began:.1f} s", err=True)


def _backend_names() -> str:
    from .backends import BACKENDS

    return "|".join(BACKENDS)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
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
) -> None:
    """Run a workload on N ranks under a profiler (torchrun), then show each rank's breakdown.
    Workload options follow `--`: tracelab run decode --ranks 2 -- --new-tokens 16;
    `tracelab run decode -- --help` lists them."""
    from pathlib import Path

    from .runner import RunInterrupted, RunSpec, run as launch
    from .workload_options import WorkloadHelp

    top = _top(top)
    spec = RunSpec(workload, ranks, backend, Path(out), list(ctx.args), nnodes, rdzv_endpoint, sys.argv)
    try:
        result = launch(spec, on_line=lambda line: typer.echo(line, err=True))
    except WorkloadHelp as h:
        typer.echo(f"{workload}'s own options, given after `--` (tracelab run {workload} [OPTIONS] -- ...); "
                   "tracelab run sets --backend and --out:\n")
        typer.echo(h.text.rstrip())
        raise typer.Exit(0) from None
    except RunInterrupted as stop:  # exit status as for a process the signal ended: 130 for Ctrl-C
        fail(str(stop), 128 + stop.signum)
    for rank_results in result.record["results"].values():
        typer.echo(_results_line(rank_results))
    if result.traces:
        _run_report(result.run_dir, top)
    typer.echo(f"run folder: {result.run_dir}")


def _results_line(f: dict) -> str:
    """A rank's results (tracelab/results.py): gpt-fast's line for decode, else key=value pairs."""
    if "tokens_per_s" in f:
        return (f"rank {f['rank']}: {f['s_per_sample']:.3f} s per sample, {f['tokens_per_s']:.2f} tokens/s, "
                f"bandwidth achieved {f['bandwidth_gb_s']:.2f} GB/s")
    plain = {k: v for k, v in f.items() if isinstance(v, (int, float, str)) and k != "rank"}
    return f"rank {f.get('rank', '?')}: " + ", ".join(f"{k}={v}" for k, v in plain.items())


def _run_report(run_dir, top: int) -> None:
    """Each rank's breakdown on the terminal, and report.html in the run folder."""
    from .load import events
    from .reports.breakdown import breakdown as analyse, summary
    from .reports.text import BREAKDOWN_RENDERERS

    profiles = _load([str(run_dir)])
    df = events(profiles)
    _emit(BREAKDOWN_RENDERERS["table"](summary(df), analyse(df, by="kernel", top=top), "kernel"))
    from .inputs import write_report

    written = write_report([run_dir], run_dir / "report.html", title=f"tracelab run {run_dir.name}",
                           groups=[profiles])
    typer.echo(f"wrote {_shown(written)}", err=True)
    _findings("table", [str(run_dir)], groups=[profiles])
