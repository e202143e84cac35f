#!/usr/bin/env python3
"""Reports of given inputs, their size, how long Chromium takes to draw them, and screenshots
1400 px wide: the first screen (1400 x 1000) and the whole page.

usage: report_shots.py OUT_DIR NAME=PATH[,PATH...] [NAME=...]

Each NAME gets OUT_DIR/NAME.html (written by `python -m tracelab report`, timed),
OUT_DIR/NAME-first.png and OUT_DIR/NAME.png; one line per NAME: the report's wall time,
its size, when every plot was drawn (the page's data-render-ms, after navigation start) and
the findings it opens on.
"""
from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report_html import CHROMIUM_FLAGS

WIDTH, FIRST_SCREEN = 1400, 1000


def chromium_run(chromium: str, page: Path, *args: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--hide-scrollbars",
                               "--virtual-time-budget=30000", *args, page.resolve().as_uri()],
                              capture_output=True, text=True, timeout=300).stdout


def shoot(name: str, paths: list[str], out: Path, chromium: str) -> str:
    page = out / f"{name}.html"
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tracelab", "report", *paths, "-o", str(page), "--force"], check=True,
                   capture_output=True)
    wall_s = time.perf_counter() - began
    dom = chromium_run(chromium, page, "--dump-dom")
    height = int(re.search(r'data-height="(\d+)"', dom).group(1))
    render_ms = re.search(r'data-render-ms="(\d+)"', dom).group(1)
    for shot, h in ((f"{name}-first.png", FIRST_SCREEN), (f"{name}.png", height)):
        chromium_run(chromium, page, f"--window-size={WIDTH},{h}", f"--screenshot={out / shot}")
    found = [html.unescape(t) for t in re.findall(r'<li><a href="#[\w-]+">(.*?)</a></li>', dom)]
    return (f"{name}: report {wall_s:.1f} s, {page.stat().st_size / 1e6:.2f} MB, plots drawn at {render_ms} ms, "
            f"page {height} px high\n" + "\n".join(f"  {n}. {t}" for n, t in enumerate(found, 1)))


def main() -> None:
    out, specs = Path(sys.argv[1]), sys.argv[2:]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None or not specs:
        sys.exit(__doc__)
    out.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        name, paths = spec.split("=", 1)
        print(shoot(name, paths.split(","), out, chromium), flush=True)


if __name__ == "__main__":
    main()
