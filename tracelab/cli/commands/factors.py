"""tracelab factors: the factors file of `whatif --scenario autocast:bf16=@FILE`, measured here."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from tracelab.core.errors import UsageError
from tracelab.cli.commands.shared import Paths, StepOpt, _check_choice, _emit, _options, _progress, \
    _shown, open_session

FORMATS = ("table", "json")


def factors(
    paths: Paths,
    out: Annotated[str, typer.Option("-o", "--out", help="The factors file to write.")] = "factors.json",
    force: Annotated[bool, typer.Option("--force", help="Overwrite the factors file if it exists.")] = False,
    max_shapes: Annotated[int, typer.Option("--max-shapes", help="Distinct product shapes timed, the most "
                                                                 "multiply-adds a step first (0: all); a product "
                                                                 "of a shape not timed takes the file's default.")] = 64,
    dispatch: Annotated[bool, typer.Option("--dispatch/--no-dispatch", help="Measure autocast's own host cost per "
                                                                           "CPU operator (a tiny model's steps, "
                                                                           "~10 s on a CPU).")] = True,
    device: Annotated[Optional[str], typer.Option("--device", help="cpu or cuda (default: the trace's: cpu for a "
                                                                   "CPU-only trace, else cuda).")] = None,
    threads: Annotated[int, typer.Option("--threads", help="CPU threads torch times with on a CPU: on a loaded "
                                                           "host more than one spin and time nothing steady; on "
                                                           "a quiet one give the ranks' own.")] = 1,
    step: StepOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="table or json: what was written, in short.")] = "table",
) -> None:
    """Measure the bf16 factors file of `whatif --scenario autocast:bf16=@FILE` on this machine.
    Each matrix product of a torch.profiler trace (record_shapes=True) timed at its own shapes,
    fp32 against bf16, on this machine's device, and autocast's dispatch per CPU operator. Run it on
    the machine (CPU or GPU) that will run the change; one run folder or one job's rank traces."""
    from pathlib import Path

    from tracelab.ingest.inputs import check_output
    from tracelab.ingest.outputs import write
    from tracelab.reports.jsonout import dumps

    _check_choice("--format", fmt, FORMATS)
    if max_shapes < 0:
        raise UsageError("--max-shapes", f"must be 0 (all) or more, not {max_shapes}")
    if threads < 1:
        raise UsageError("--threads", f"must be 1 or more, not {threads}")
    check_output(out, paths)
    if Path(out).exists() and not force:
        raise UsageError(out, "exists; pass --force to overwrite it")
    session = open_session(paths, _options(step), keep_events=True, digests=())
    run, doc = _measured(session, device, threads, max_shapes or None, dispatch)
    written = write(out, dumps(doc), force=force)
    _emit(dumps(_summary(doc, written)) if fmt == "json" else _line(doc, written, run))


def _measured(session, device: str | None, threads: int, max_shapes: int | None, dispatch: bool
              ) -> tuple[str, dict]:
    """The session's one run (its name) and its factors, timed with a progress bar per shape on a terminal."""
    from tracelab.reports.whatif.factor_products import cpu_only
    from tracelab.run.factors import Trace, check_shapes, device_for, measure

    runs = session.usable("factors")
    if len(runs) > 1:
        raise UsageError("factors", f"one run at a time (a run folder or one job's rank traces), not {len(runs)}: "
                                    f"{', '.join(r.name for r in runs)}")
    for p in runs[0].profiles:
        check_shapes(p.meta)
    traces = [Trace(str(p.meta.path), p.events) for p in runs[0].profiles]
    where = device_for(device, all(cpu_only(t.events) for t in traces))
    if where.type == "cpu":
        import torch

        torch.set_num_threads(threads)
    with _progress() as bar:
        task = bar.add_task("reading the products' shapes", total=None)
        doc = measure(traces, where, max_shapes, dispatch,
                      lambda what, done, total: bar.update(task, description=what, completed=done, total=total))
    return runs[0].name, doc


def _summary(doc: dict, written) -> dict:
    """What was written, in short (--format json)."""
    return {"file": str(written), "device": doc["device"], "machine": doc["machine"], "default": doc["default"],
            "products_in_trace": doc["products_in_trace"], "products_timed": doc["products_timed"],
            "shapes_timed": len(doc["shapes"]), "dispatch_ns_per_op": doc["dispatch_ns_per_op"]}


def _line(doc: dict, written, run: str) -> str:
    dispatch = "not measured" if doc["dispatch_ns_per_op"] is None else f"{doc['dispatch_ns_per_op']:,.0f} ns per op"
    return (f"wrote {_shown(written)}: {doc['products_timed']:,} of {doc['products_in_trace']:,} products at "
            f"{len(doc['shapes']):,} shapes, default {doc['default']:.3g}, autocast's dispatch {dispatch}, on "
            f"{doc['machine']}\nnext: tracelab whatif {_shown(run)} --scenario autocast:bf16=@{_shown(written)}")
