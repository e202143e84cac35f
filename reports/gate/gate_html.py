"""The gate's section in the HTML report: of two or more runs, each later run (up to
MAX_CANDIDATES) judged against the first as `tracelab gate FIRST LATER` judges it, with the
gate's default thresholds, rendered by the gate's own HTML fragment (gate_text.html_fragment).
One run: no section. A pair the gate cannot judge gets one line saying why; the report goes on."""
from __future__ import annotations

import html
from pathlib import Path
from typing import Callable

from tracelab.core.errors import TracelabError

from .gate_text import html_fragment
from .samples import GATE_DIGESTS, RunSamples, run_samples
from .thresholds import thresholds
from .verdict import gate

MAX_CANDIDATES = 3  # later runs judged against the first; past these the section says how many were left out


def runs_of(inputs: list) -> list[tuple[str, list]]:
    """(run name, its inputs) in the order given: the report labels each input with its run (`group`)."""
    out: dict[str, list] = {}
    for i in inputs:
        out.setdefault(i.group, []).append(i)
    return list(out.items())


def info_of(ranks: list, runs: list[tuple[str, dict]]) -> dict | None:
    """The run.json of the run folder the run's traces lie in (runs: (folder name, run.json));
    None for traces given alone. The report labels a run shorter than its folder's name."""
    parts = set(Path(ranks[0].path).parts[:-1])
    return next((info for name, info in runs if name in parts), None)


def samples_of(name: str, ranks: list, info: dict | None) -> RunSamples:
    """One run's samples from its inputs' digests, as the gate command makes them from its ranks'."""
    return run_samples(name, [(i.rank, {d: i.digest(d) for d in ("gate", *GATE_DIGESTS)}) for i in ranks], info)


def sections(inputs: list, figure: Callable[[dict, str], str], table: Callable, comparison=None,
             runs: list[tuple[str, dict]] = ()) -> list[str]:
    """`Gate: RUN against FIRST` per later run; nothing of one run."""
    grouped = runs_of(inputs)
    if len(grouped) < 2:
        return []
    (base_name, base_ranks), later = grouped[0], grouped[1:]
    out = ['<h2 id="gate">Gate</h2>',
           f'<p class="note">Each later run against the first ({html.escape(base_name)}), as '
           "<code>tracelab gate</code> judges them with its default thresholds.</p>"]
    try:
        baseline = samples_of(base_name, base_ranks, info_of(base_ranks, runs))
    except (TracelabError, KeyError, ValueError) as e:
        return out + [_cannot(f"Gate against {base_name}", base_name, e)]
    for name, ranks in later[:MAX_CANDIDATES]:
        title = f"Gate: {name} against {base_name}"
        try:
            judged = gate([baseline], [samples_of(name, ranks, info_of(ranks, runs))], thresholds(None, [], None))
        except (TracelabError, KeyError, ValueError) as e:
            out.append(_cannot(title, name, e))
            continue
        out.append(html_fragment(judged, title, "h3"))
    if len(later) > MAX_CANDIDATES:
        out.append(f'<p class="note">{len(later) - MAX_CANDIDATES} later runs not judged (the first '
                   f"{MAX_CANDIDATES} are): <code>tracelab gate</code> judges any pair.</p>")
    return out


def _cannot(title: str, name: str, error: Exception) -> str:
    """The one line a pair the gate cannot judge gets instead of its verdict."""
    why = " ".join(str(error).split()) or type(error).__name__
    return f'<p class="note">{html.escape(title)}: not judged ({html.escape(name)}: {html.escape(why)}).</p>'
