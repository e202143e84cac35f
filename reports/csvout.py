"""CSV as every `--format csv` writes it: pandas' CSV with each text cell (and header) that
a spreadsheet would run as a formula neutralised, per OWASP's "CSV injection": a cell that
begins with = + - @, a tab or a carriage return gets a leading single quote. Kernel, scope
and file names come from traces and folders anyone may have named `=HYPERLINK(...)`.
Numbers stay numbers (-5 is not text)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI imports NOTE for its --help: no pandas at start-up
    import pandas as pd

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
NOTE = ("CSV cells (and headers) that begin with = + - @, a tab or a carriage return get a leading ' "
        "(OWASP CSV injection), so a spreadsheet never runs a name from a trace as a formula")


def neutral(cell: object) -> object:
    """A text cell made inert; anything else as it is."""
    return "'" + cell if isinstance(cell, str) and cell.startswith(FORMULA_START) else cell


def csv_text(frame: pd.DataFrame) -> str:
    """`frame` as CSV (no index), its text cells and headers neutralised."""
    import pandas as pd

    out = frame.rename(columns=lambda c: neutral(str(c)))
    for column in out.columns:
        values = out[column]
        if not (pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values)):
            out[column] = values.astype(object).map(neutral)
    return out.to_csv(index=False)
