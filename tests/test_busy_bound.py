"""Where the trace has no timeline (proton), the run folder's own timing bounds the GPU's busy
share: the README's first command on one H100 (tests/data/decode-1gpu-readme-proton), its
kernels' time summed straight from the hatchet tree over the profiled steps' measured time."""
from __future__ import annotations

import json

from helpers import DATA, run_cli_output

RUN = DATA / "decode-1gpu-readme-proton"


def _leaf_ns(node: dict) -> int:
    children = node.get("children") or []
    return sum(map(_leaf_ns, children)) if children else int(node.get("metrics", {}).get("time (ns)", 0))


def test_proton_run_is_named_host_bound_from_its_own_timing(capsys):
    tree = json.loads((RUN / "rank0.hatchet").read_text())
    kernel_ns = sum(_leaf_ns(n) for n in tree if isinstance(n, dict) and "frame" in n)
    steps = json.loads((RUN / "run.json").read_text())["profiled_steps"]
    step_ns = json.loads((RUN / "rank0.results.json").read_text())["profiled_step_ns"]
    share = kernel_ns / (steps * step_ns)
    assert 0 < share < 0.5
    status, out, _ = run_cli_output(capsys, "breakdown", str(RUN))
    assert status == 0
    line = next(l for l in out.splitlines() if "busy at most" in l)
    assert f"busy at most {100 * share:.0f}% of each step" in line and "compile the step" in line


def test_no_bound_without_the_run_s_timing(capsys, tmp_path):
    """The same trace out of its run folder: nothing says how long its steps took, so no bound."""
    (tmp_path / "rank0.hatchet").write_bytes((RUN / "rank0.hatchet").read_bytes())
    status, out, _ = run_cli_output(capsys, "breakdown", str(tmp_path / "rank0.hatchet"))
    assert status == 0 and "busy at most" not in out
