"""A step that waits on its data loader is told to load in worker processes, not to use CUDA
graphs: pytorch/kineto's ResNet-50 sample with num_workers=0 (tests/data/public/kineto), the
loader's time recomputed from the JSON's own `enumerate(DataLoader)` operators."""
from __future__ import annotations

import gzip
import json
import re
import statistics

import pytest

from helpers import DATA, run_cli_output, shared_trace

PATH = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


def _findings(capsys, path) -> list[str]:
    status, out, _ = run_cli_output(capsys, "breakdown", str(path))
    assert status == 0
    return [line for line in out.splitlines() if re.match(r"\s*\d+\. ", line)]


@pytest.mark.slow  # the ResNet-50 sample's what-if, ~1.5 s
def test_loader_named_with_its_fix_and_its_time(capsys):
    path = shared_trace(PATH)
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    loader = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                    if "DataLoader" in e.get("name", "") and e.get("cat") == "Operator")
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name", "").startswith("ProfilerStep#"))
    # per step, medians over the steps: the loader's time in each step's window (from the previous
    # step's end; the first from its own start), and each step's own time
    windows = [(steps[0][0] if k == 0 else steps[k - 1][1], end) for k, (_, end) in enumerate(steps)]
    loader_us = [sum(max(0.0, min(e, w1) - max(b, w0)) for b, e in loader) for w0, w1 in windows]
    step_us = [end - begin for begin, end in steps]
    found = _findings(capsys, path)
    loader_found = [f for f in found if "data loader" in f]
    assert len(loader_found) == 1 and "num_workers=N" in loader_found[0]
    assert (f"{statistics.median(loader_us) / 1000:.1f} ms per step of {statistics.median(step_us) / 1000:.1f} ms "
            f"({100 * statistics.median(loader_us) / statistics.median(step_us):.0f}%)") in loader_found[0]
    graphs = [f for f in found if "capture the step in a CUDA graph" in f]
    assert graphs and all("what if" not in f and "at most" in f for f in graphs)  # its bound, not the loader's saving


def test_no_loader_finding_without_a_loader(capsys):
    assert not [f for f in _findings(capsys, DATA / "train-1gpu-steps-torch") if "data loader" in f]
