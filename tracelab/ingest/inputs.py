"""The file side of the reports: which inputs are folders, a run folder's run.json, and
writing what a renderer returned. Reports themselves only take frames and return
strings (reports/align/align.py labels inputs from what is given here); rendering and
writing the HTML report is the CLI's (tracelab/cli/html_report.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tracelab.core.options import Options
from tracelab.ingest.outputs import check_output, write  # noqa: F401 - the CLI's export perfetto
from tracelab.core.schema import OnEvents, Profile
from tracelab.ingest.runfolder import run_info  # noqa: F401 - a run folder's run.json

if TYPE_CHECKING:
    from tracelab.reports.ranks import Input


def label_inputs(paths: list[str | Path], groups: list[list[Profile]]) -> list[Input]:
    """The profiles loaded from each path, labelled (reports.session.label); a folder's
    label is its name, a file's its stem."""
    from tracelab.reports.ranks import label

    return label(paths, [Path(p).is_dir() for p in paths], groups)


def with_events(inputs: list[Input], ranks: set[int] | None, keep=None, on_loaded=None,
                options: Options | None = None) -> list[Input]:
    """Inputs loaded without their events get them back for `ranks` (every rank when None):
    their files read again, in parallel, per run. `export perfetto --ranks` of a few ranks of a
    thousand holds only those ranks' events (the rest gave their summaries, which put the run
    on one clock). `keep(events)`, where given, runs in the worker that parses each rank
    and only its rows come back (e.g. perfetto.rows_of_steps). `options`: as they were loaded."""
    from tracelab.ingest.loading import load_many

    needed = [i for i in inputs if not len(i.events) and i.path and (ranks is None or i.rank in ranks)]
    for group in dict.fromkeys(i.group for i in needed):
        members = [i for i in needed if i.group == group]
        again = {p.rank: p for p in load_many(list(dict.fromkeys(i.path for i in members)), on_loaded=on_loaded,
                                              reduce={"kept": OnEvents(keep)} if keep else None, keep_events=keep is None,
                                              options=options)}
        for i in members:
            i.events = again[i.rank].summary["kept"] if keep else again[i.rank].events
    return inputs
