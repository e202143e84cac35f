"""A straggler from totals (align.stragglers) in words: the terminal's compare and the page say it
alike. Renderers only, the numbers formatted by reports/fmt.py."""
from __future__ import annotations

import pandas as pd

from .align import lead_and_wait, lead_explains_wait
from ..fmt import ms_cell
from ..text import pct
from ..timeline.waits import material_lead


def straggler_line(row: pd.Series, measured: str) -> str:
    """One straggler row in words; `measured` is Comparison.measured ("GPU time", "CPU operator time").
    A run with timed collectives has its who-waits verdict (`line`, reports/timeline/waits.py)."""
    where = f" in {row['group']}" if row["group"] else ""
    if row.get("line"):
        return f"{row['line'].split(':', 1)[0]}{where}:{row['line'].split(':', 1)[1]}"
    if row.get("pattern") == "none":
        lead = (row["compute_ns"] - row["next_compute_ns"]) / row["compute_ns"] if row["compute_ns"] else 0.0
        why = (f"a lead of {pct(lead)}, too small for totals without steps to tell from noise"
               if not material_lead(row) else f"but not the least communication time ({ms_cell(row['comm_ns'])} ms)")
        return (f"no clear straggler{where} (from totals, no timeline): {row['label']} has the most "
                f"non-communication {measured} ({ms_cell(row['compute_ns'])} ms against {ms_cell(row['next_compute_ns'])} ms "
                f"next), {why}")
    line = (f"straggler{where}: {row['label']}: the most non-communication {measured} "
            f"({ms_cell(row['compute_ns'])} ms against {ms_cell(row['next_compute_ns'])} ms next)")
    if row["comm_rank_min"] and row["comm_max_ns"] > row["comm_ns"]:
        line += (f" and the least in communication kernels ({ms_cell(row['comm_ns'])} ms against up to "
                 f"{ms_cell(row['comm_max_ns'])} ms): the other ranks wait for it in collectives")
        if lead_explains_wait(row):
            return line
        lead, wait = lead_and_wait(row)
        return line + (f"; its compute lead ({ms_cell(lead)} ms) is {100 * lead / wait:.1f}% of their extra wait: "
                       "the rest is outside its GPU kernels")
    return line + f"; its communication time ({ms_cell(row['comm_ns'])} ms) is not the lowest"
