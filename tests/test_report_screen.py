"""The report a person reads in one screen first: a line of what ran, the traces' notes, the
findings, then a chart per question; tables that fit (a scrolling box, no empty column, '-' for
a missing value, sizes in binary units); one number format (no exponent); one input's top kernels
as bars, not a one-colour heatmap; a rank x step heatmap as tall as its ranks, whatever the steps;
scope trees folded."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracelab.cli.html_report import write_report
from tracelab.reports.html import html, notes, side_by_side
from tracelab.reports.runtable import number_text
from tracelab.reports.steps import steps_html

DATA = Path(__file__).resolve().parent / "data"
EXPONENT = re.compile(r"\d\.?\d*e[+-]\d")


def _events(per_label: dict[str, dict[str, int]]) -> pd.DataFrame:
    """labelled_events' frame: one row per (input, kernel), `dur_ns`, 3 calls each."""
    rows = [(lab, k, ns) for lab, kernels in per_label.items() for k, ns in kernels.items()]
    df = pd.DataFrame(rows, columns=["label", "kernel", "dur_ns"])
    df["label"] = pd.Categorical(df["label"], categories=list(per_label))
    return df.assign(kind="kernel", op_class="gemm", count=3)


def test_table_drops_empty_columns_and_says_dash_for_missing():
    df = pd.DataFrame({"run": ["", ""], "name": ["a", pd.NA], "peak_bytes": [3 * 2**30, 1536],
                       "t_ns": [np.nan, 2_500_000.0], "none_ns": [np.nan, np.nan]}).astype({"name": "string"})
    page = html.table(df, {"run": "run", "name": "name", "peak_bytes": "peak", "t_ns": "time (ms)", "none_ns": "x (ms)"})
    assert page.startswith('<div class="box">') and page.endswith("</table></div>")
    assert ">run<" not in page and "x (ms)" not in page  # nothing in any row: left out
    assert "&lt;NA&gt;" not in page and '<td class="t">-</td>' in page and '<td data-v="-1e300">-</td>' in page
    assert ">3.00 GiB<" in page and ">1.50 KiB<" in page  # fmt.binary_size, sortable by the bytes
    assert f'data-v="{float(3 * 2**30)!r}"' in page and ">2.500<" in page


def test_long_table_scrolls_in_its_box():
    df = pd.DataFrame({"n": range(html.LONG_TABLE_ROWS + 1)})
    assert html.table(df, {"n": "n"}).startswith('<div class="box long">')
    assert html.table(df.head(3), {"n": "n"}).startswith('<div class="box">')


def test_heatmap_cells_read_without_exponent():
    events = _events({"a": {"gemm": 7_860_000_000, "tiny": 640}, "b": {"gemm": 7_000_000_000, "tiny": 700}})
    fig = side_by_side.kernel_heatmap(events)["data"][0]
    cells = dict(zip(fig["y"], fig["text"]))
    assert cells["gemm"] == ["7,860.0 ms", "7,000.0 ms"] and cells["tiny"] == ["0.6 us", "0.7 us"]
    assert not any(EXPONENT.search(t) for row in fig["text"] for t in row)
    assert ":,.3f" in fig["hovertemplate"]  # the hover's ms with separators too


def test_one_input_gets_bars_of_its_kernels():
    ns = {"k1": 5_000_000, "k2": 12_345_678_900, "k3": 1_000}
    fig = side_by_side.kernel_bars(_events({"only": ns}))
    bars = fig["data"][0]
    assert bars["type"] == "bar" and bars["orientation"] == "h"
    assert bars["y"] == ["k3", "k1", "k2"]  # the largest on top (plotly draws the last row on top)
    assert bars["x"] == [round(ns[k] / 1e6, 4) for k in bars["y"]]
    assert bars["text"] == ["1.0 us", "5.00 ms", "12,345.7 ms"]
    assert [c[0] for c in bars["customdata"]] == [3, 3, 3]


@pytest.mark.parametrize("steps", [4, 1000])
def test_step_heatmap_height_grows_with_ranks_not_steps(steps):
    frame = pd.DataFrame({"step": np.repeat(np.arange(steps), 2), "rank": np.tile([0, 1], steps),
                          "span_ns": np.arange(2 * steps) * 1_000_000})
    fig = steps_html._heatmap(frame, "span_ns", "step time")
    z = fig["data"][0]["z"]
    assert fig["layout"]["height"] == 150 + 28 * 2 and len(z) == 2 and len(z[0]) == steps
    assert z[1][steps - 1] == pytest.approx(2 * steps - 1)  # rank 1's last step, in ms


def test_notes_fold_past_the_first_three():
    page = notes.folded([f"n{k}" for k in range(5)])
    assert page.count('<p class="note">') == 5 and "2 more notes" in page
    assert page.index("<details") > page.index("n2") and page.index("n3") > page.index("<details")
    assert "<details" not in notes.folded(["a", "b", "c"])


@pytest.fixture(scope="module")
def decode_page(tmp_path_factory) -> str:
    out = write_report([str(DATA / "decode-2gpu-torch")], tmp_path_factory.mktemp("r") / "r.html")
    return out.read_text()


def _trace_notes(path: Path) -> list[str]:
    """The notes the reader gives a rank (its meta), read here through tracelab.load."""
    import tracelab

    return [n.text for n in tracelab.load(str(path)).meta.notes]


@pytest.mark.slow
def test_first_screen_order(decode_page):
    body = decode_page[:decode_page.index('<script type="application/json" id="tracelab-figures">')]
    order = ['class="runline"', 'id="notes"', 'id="findings"', '<div class="plot"', 'id="runs"', 'id="run-json"']
    at = [body.index(s) for s in order]
    assert at == sorted(at)
    run = json.loads((DATA / "decode-2gpu-torch" / "run.json").read_text())
    line = body[at[0]:body.index("</p>", at[0])]
    assert f"{number_text(run['wall_s'])} s wall" in line and f"under {run['backend']}" in line
    for note in _trace_notes(DATA / "decode-2gpu-torch" / "rank0.pt.trace.json.gz"):
        assert html._e(note) in body[at[1]:at[2]]


def test_page_reads_in_one_format(decode_page):
    body = decode_page[:decode_page.index('<script type="application/json" id="tracelab-figures">')]
    assert "&lt;NA&gt;" not in body and "<details open" not in body  # trees folded
    figs = json.loads(decode_page.split('id="tracelab-figures">', 1)[1].split("</script>", 1)[0])
    texts = [t for f in figs.values() for trace in f["data"] for row in trace.get("text") or [] for t in
             (row if isinstance(row, list) else [row]) if isinstance(t, str)]
    assert texts and not any(EXPONENT.search(t) for t in texts)



def test_plotly_travels_packed_and_whole(decode_page):
    """The data block inflates (zlib, raw deflate) to plotly.js byte for byte, with the size the
    page's inflater is told; the page holds no plain copy. The browser tests draw its figures."""
    import base64
    import zlib

    from plotly.offline import get_plotlyjs

    block = re.search(r'<script type="application/octet-stream" id="tracelab-plotly" data-bytes="(\d+)">([^<]*)</script>',
                      decode_page)
    code = get_plotlyjs().encode()
    assert zlib.decompress(base64.b64decode(block.group(2)), -15) == code and int(block.group(1)) == len(code)
    assert get_plotlyjs()[:2000] not in decode_page and len(decode_page) < len(code) / 2
    assert "script-src 'sha256-" in decode_page and " blob:; style-src" in decode_page
