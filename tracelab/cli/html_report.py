"""Writing the HTML report: the session's runs rendered (reports/html) and written atomically, with
the merged Perfetto trace beside it where asked. The CLI's side, not the loader's: `tracelab report`
and `tracelab run` call `write_report`; tracelab.ingest loads and never renders.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from tracelab.core.errors import UsageError
from tracelab.core.options import Options
from tracelab.ingest.inputs import with_events
from tracelab.ingest.outputs import check_output, write_together
from tracelab.ingest.runfolder import run_info

if TYPE_CHECKING:
    from tracelab.ingest.session import Session
    from tracelab.reports.ranks import Input


def write_report(session: Session | list[str | Path], out: str | Path, force: bool = False, title: str | None = None,
                 perfetto: bool = False, options: Options | None = None) -> Path:
    """Render the HTML report of the session's runs (or of the paths, opened here with `options`)
    with their run folders' run.json, and write it atomically. `tracelab report` and `tracelab run`
    call this. With `perfetto`, the merged Perfetto trace of the timed ranks is written beside it
    (<out>.perfetto.json.gz) and the report links each rank to it."""
    from tracelab.reports.html import html
    from tracelab.ingest.session import SNAPSHOT, TRACES, Session

    if not isinstance(session, Session):
        session = Session.open(session, options, keep_events=perfetto)
    paths = session.paths
    out, merged = Path(out), perfetto_name(Path(out))
    for target in (out, merged) if perfetto else (out,):
        check_output(target, paths)
        if target.exists() and not force:
            raise UsageError(target, "exists; pass --force to overwrite it")
    if session.of_kind(TRACES, SNAPSHOT):  # a run under backend none alone: its run.json only
        session.usable("report")
    title = title or "tracelab: " + ", ".join(Path(p).name for p in paths)
    trace = _perfetto_content(_with_perfetto_events(session.inputs, session.options)) if perfetto else None
    page = html.render(session.inputs, paths, run_info(paths), title, runs=session.run_infos,
                       perfetto=merged.name if trace else None)
    return write_together([(out, page, False)] + ([(merged, trace, True)] if trace else []), force=force)[0]


def perfetto_name(out: Path) -> Path:
    """The merged trace written beside a report: OUT (less its suffix).perfetto.json.gz."""
    return out.with_name(out.name.rsplit(".", 1)[0] + ".perfetto.json.gz")


def _with_perfetto_events(inputs: list[Input], options: Options) -> list[Input]:
    """The timed ranks' events for the merged trace, read again where they were loaded
    without; refused (UsageError) when the trace would be too large for Perfetto's UI."""
    from tracelab.reports.perfetto import perfetto

    if all(len(i.events) for i in inputs if i.timed):
        return inputs
    if too_big := perfetto.oversize(inputs, None, None, perfetto.MAX_EVENTS):
        rows, n_ranks, shown = too_big
        raise UsageError("--perfetto", f"the merged trace would hold about {rows:,} events from {n_ranks:,} ranks, "
                                       "more than Perfetto's UI opens: write the report without --perfetto, and "
                                       f"the ranks you need with `tracelab export perfetto --ranks {shown}`")
    with_events([i for i in inputs if i.timed], None, options=options)
    return inputs


def _perfetto_content(inputs: list[Input]) -> Callable | None:
    """The merged trace's producer (streamed when written), or None when no input is timed."""
    from tracelab.reports.perfetto import perfetto

    if not any(i.timed for i in inputs):
        return None
    if not all(len(i.events) for i in inputs if i.timed):
        raise UsageError("--perfetto", "the merged trace needs the ranks' events: load them with keep_events")
    return lambda put: perfetto.write_json(put, inputs)
