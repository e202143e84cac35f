"""Notes as the report shows them: the first few as lines, the rest folded under one line that
says how many, so that a run of hundreds of per-step notes never pushes its section's charts
and tables out of sight. Rendering only: escaped HTML in, HTML out."""
from __future__ import annotations

NOTES_SHOWN = 3  # notes shown; the rest fold away below them


def folded(items: list[str], shown: int = NOTES_SHOWN) -> str:
    """`items` (escaped HTML, one note each) as notes: the first `shown`, then the rest in a
    <details> that opens on click."""
    lines = "".join(f'<p class="note">{n}</p>' for n in items[:shown])
    if len(items) <= shown:
        return lines
    rest = "".join(f'<p class="note">{n}</p>' for n in items[shown:])
    return lines + f'<details class="notes"><summary>{len(items) - shown:,} more notes</summary>{rest}</details>'
