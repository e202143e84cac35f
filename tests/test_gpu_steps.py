"""One training job on one H100 under proton, torch and nsys (tests/data/train-1gpu-steps-*,
made by benchmarks/gpu_steps.sh, in git at da8b67c): per-step kernel counts and ns equal an independent reading
of each raw file, and the three profilers agree per step and per call where their raw
per-call times agree."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from helpers import kineto_steps, per_step

import tracelab

DATA = Path(__file__).resolve().parent / "data"
TRAIN = {b: DATA / f"train-1gpu-steps-{b}" for b in ("proton", "torch", "nsys")}
STEPS = 4  # --steps 4 in the command that made them (their README)


def _nsys_steps_by_text(path: Path) -> dict[int, tuple[int, int]]:
    """step -> (kernels, summed ns) by SQL: each kernel's launch (RUNTIME, same correlation
    id) inside the NVTX range 'step N' of the same process."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute("""
            SELECT CAST(SUBSTR(n.text, 6) AS INTEGER), count(*), sum(k.end - k.start)
            FROM CUPTI_ACTIVITY_KIND_KERNEL k
            JOIN CUPTI_ACTIVITY_KIND_RUNTIME c ON c.correlationId = k.correlationId
                 AND (c.globalTid & ~16777215) = k.globalPid
            JOIN NVTX_EVENTS n ON n.text LIKE 'step %' AND n.eventType IN (59, 60)
                 AND (n.globalTid & ~16777215) = k.globalPid
                 AND c.start >= n.start AND c.start < n.end
            GROUP BY 1""").fetchall()
    finally:
        con.close()
    return {s: (n, t) for s, n, t in rows}


def _kernels(source: str):
    (profile,) = tracelab.load_many(TRAIN[source])
    events = profile.events
    return events[events["kind"] == "kernel"]


def test_torch_steps_equal_a_plain_walk() -> None:
    path = TRAIN["torch"] / "rank0.pt.trace.json.gz"
    want = kineto_steps(path, r"step (\d+)")  # kernels, copies and sets
    assert sorted(want) == list(range(STEPS))
    assert per_step(tracelab.load(path).events) == want


def test_nsys_steps_equal_sql() -> None:
    want = _nsys_steps_by_text(TRAIN["nsys"] / "rank0.sqlite")
    assert sorted(want) == list(range(STEPS))
    assert per_step(_kernels("nsys")) == want


def _proton_total() -> tuple[int, int]:
    """(launches, ns) of every kernel in the raw hatchet tree, walked by hand: the nodes
    whose metrics name a device (this proton types kernel frames 'function' too)."""
    tree = json.loads((TRAIN["proton"] / "rank0.hatchet").read_text())[0]
    count = time_ns = 0
    stack = [tree]
    while stack:
        node = stack.pop()
        stack.extend(node.get("children", []))
        if "device_id" in node.get("metrics", {}):
            count += int(node["metrics"]["count"])
            time_ns += int(node["metrics"]["time (ns)"])
    return count, time_ns


def test_profilers_agree_per_step_and_per_call() -> None:
    torch_steps, nsys_steps = per_step(_kernels("torch")), per_step(_kernels("nsys"))
    proton_count, proton_ns = _proton_total()
    for step in range(STEPS):
        (n_torch, ns_torch), (n_nsys, ns_nsys) = torch_steps[step], nsys_steps[step]
        assert n_torch == n_nsys  # the same launches in every step
        assert ns_nsys == pytest.approx(ns_torch, rel=0.01)
    # proton has no instances: its totals over the run's 4 steps, per step and per call
    n_torch_total = sum(n for n, _ in torch_steps.values())
    ns_torch_total = sum(t for _, t in torch_steps.values())
    assert proton_count == n_torch_total
    assert proton_ns / STEPS == pytest.approx(ns_torch_total / STEPS, rel=0.01)
    assert proton_ns / proton_count == pytest.approx(ns_torch_total / n_torch_total, rel=0.01)


def test_proton_kernels_have_no_step() -> None:
    """A proton tree cannot say which step a kernel ran in: autograd's thread launched the
    backward kernels of all four steps, and the tree files 789 of them under 'step 0'."""
    assert _kernels("proton")["step"].isna().all()
