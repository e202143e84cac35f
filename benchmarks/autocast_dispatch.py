"""autocast's own host cost per CPU operator, alone (tracelab/run/autocast_dispatch.py says how;
`tracelab factors` measures it into the factors file).

    python benchmarks/autocast_dispatch.py [--out FILE] [--steps 60] [--threads 1]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from tracelab.run.autocast_dispatch import measure


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    doc = measure(torch.device("cuda" if torch.cuda.is_available() else "cpu"), a.steps)
    text = json.dumps(doc, indent=1, allow_nan=False)
    if a.out:
        a.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
