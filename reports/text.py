"""Terminal-table pieces that several topics' renderers share: a share as a percentage, and the
spread of many inputs' measures (one row per run and measure). Units converted here only."""
from __future__ import annotations

import pandas as pd
from rich.table import Table
from rich.text import Text

from .html.figures import distribution


def pct(x: float) -> str:
    return "-" if pd.isna(x) else f"{100 * x:.1f}%"


def spread_table(title: str, per_input: pd.DataFrame, measures: dict[str, str], ms: list[str]) -> Table:
    """Many inputs: per run and measure, the spread over its inputs and the outliers (figures.distribution)."""
    scaled = per_input.assign(**{c: per_input[c] / 1e6 for c in ms})
    dist = distribution(scaled, measures)
    t = Table(title=f"{title}: over {len(per_input):,} inputs, per run and measure (beyond 3 MADs: outliers)",
              title_justify="left", show_edge=False)
    for name in ("run", "measure", "inputs", "min", "median", "max", "largest", "outliers"):
        t.add_column(name, justify="right" if name in ("inputs", "min", "median", "max") else "left", overflow="fold")
    for _, r in dist.iterrows():
        number = (lambda x: f"{x:,.3f}") if r["measure"].endswith("(ms)") else (lambda x: f"{x:,.3g}")
        t.add_row(Text(str(r["group"])), r["measure"], f"{int(r['inputs']):,}", number(r["min"]), number(r["median"]),
                  number(r["max"]), Text(str(r["largest"])), Text(str(r["outliers"])))
    return t
