"""Every finding is true on every capture we have (issue 28): each finding's numbers recomputed
from the rows it names, straight from the events frame with plain numpy (not the analyses'
code); none resting on unknown work; no two findings that disagree (a rank called gpu-bound
while another finding says its host launched late; a straggler earlier than the others on
average). The fast set runs by default; every capture and run folder in tests/data, and the
public traces of ../shared/traces where present, run with `-m slow`."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracelab.core import devices
from tracelab.ingest.session import Session

from helpers import DATA, SHARED_TRACES

GPU_KINDS = ("kernel", "memcpy", "memset")
# the fewest captures that meet every kind of claim (the rest, -m slow, each on its own)
FAST = ["allreduce-2gpu-torch", "gloo-2cpu-late", "train-small-1gpu-torch"]
HOST_WORDS = "the host launched late"
# bound is what a step's critical path is made of (issue 27): a step whose span is mostly idle that
# the host caused can never be gpu-bound (restated here: the test must not import the rule it checks)
HOST_SHARE = 0.5


def _folders() -> list[str]:
    """Every capture and run folder in tests/data that holds a trace."""
    out = []
    for d in sorted(DATA.iterdir()):
        if d.is_dir() and d.name != "public" and any(f.suffix in (".gz", ".json", ".sqlite", ".hatchet")
                                                     and f.name not in ("run.json",) and "results" not in f.name
                                                     and "provenance" not in f.name and "expected" not in f.name
                                                     for f in d.iterdir()):
            out.append(d.name)
    return out


def _shared() -> list[Path]:
    """Public traces beside the checkout, one input each (a folder of ranks, or a file)."""
    if not SHARED_TRACES.exists():
        return []
    picks = [SHARED_TRACES / "hta" / name for name in ("nccl_parser_config", "trace_filter", "trace_diff",
                                                         "cpu_only", "triton_example")]
    picks += sorted((SHARED_TRACES / "nsys-ai").glob("*.sqlite")) + sorted((SHARED_TRACES / "proton").glob("*.json"))
    return [p for p in picks if p.exists()]


# ---- independent readings of the events ---------------------------------------------------------

def _union_ns(start: np.ndarray, end: np.ndarray) -> int:
    if not len(start):
        return 0
    order = np.argsort(start, kind="stable")
    total, cur_s, cur_e = 0, int(start[order[0]]), int(end[order[0]])
    for s, e in zip(start[order][1:].tolist(), end[order][1:].tolist()):
        if s > cur_e:
            total, cur_s, cur_e = total + cur_e - cur_s, s, e
        else:
            cur_e = max(cur_e, e)
    return total + cur_e - cur_s


def _timed(events: pd.DataFrame, kinds=GPU_KINDS) -> pd.DataFrame:
    return events[events["kind"].isin(kinds) & events["start_ns"].notna()]


def _idle_per_step(events: pd.DataFrame) -> tuple[float, float]:
    """(median idle, median span) over the steps, as findings state a per-step figure: span from
    the step's first GPU start to its last end, idle = span less the union of its GPU rows; a
    trace without steps is one window."""
    rows = _timed(events)
    steps = rows["step"] if rows["step"].notna().any() else pd.Series(0, index=rows.index)
    rows = rows[steps.notna()]
    idle, span = [], []
    for _, g in rows.groupby(steps[steps.notna()].astype("int64")):
        start = g["start_ns"].to_numpy(dtype=np.int64)
        end = start + g["dur_ns"].to_numpy(dtype=np.int64)
        span.append(int(end.max() - start.min()))
        idle.append(span[-1] - _union_ns(start, end))
    return float(np.median(idle)), float(np.median(span))


def _exposed(events: pd.DataFrame) -> tuple[int, int]:
    """(comm union, comm union not covered by other kernels) of a rank's kernels."""
    rows = _timed(events, ("kernel",))
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    end = start + rows["dur_ns"].to_numpy(dtype=np.int64)
    comm = (rows["op_class"] == "communication").to_numpy()
    c, other, both = _union_ns(start[comm], end[comm]), _union_ns(start[~comm], end[~comm]), _union_ns(start, end)
    return c, c - (c + other - both)


def _lost_ns(events: pd.DataFrame, kernel: str, device: devices.Device) -> tuple[float, float, float]:
    """(lost ns, time with a roof, the kernel's time) of one kernel's rows against `device`:
    per row max(flops / peak of its dtype, traffic / bandwidth, the rank's fastest op of its kind),
    traffic a D2D copy's twice its size."""
    rows = events[(events["kernel"] == kernel) & (events["kind"] != "cpu_op")]
    fastest = events[events["kind"] != "cpu_op"].groupby(events["kind"].astype(str))["dur_ns"].min()
    lost = roofed = 0.0
    for _, r in rows.iterrows():
        peak = device.peak_tflop_s(str(r["dtype"]))
        compute = r["flops"] / (peak * 1e3) if peak and not pd.isna(r["flops"]) else np.nan
        name = str(r["name"])
        if r["kind"] == "memcpy" and not re.search(r"DtoD|Device -> Device|PtoP", name):
            memory = r["bytes"] / device.host_link_gb_s if device.host_link_gb_s else np.nan
        else:
            factor = 2 if r["kind"] == "memcpy" else 1
            memory = factor * r["bytes"] / device.hbm_gb_s
        least = np.fmax(compute, memory)
        least = least if np.isnan(least) else max(least, float(fastest[str(r["kind"])]))
        if not np.isnan(least):
            lost, roofed = lost + r["dur_ns"] - least, roofed + r["dur_ns"]
    return lost, roofed, float(rows["dur_ns"].sum())


# ---- the checks ---------------------------------------------------------------------------------

def _events(groups) -> dict[int, pd.DataFrame]:
    return {p.rank: p.events for g in groups for p in g}


def _check_idle(f, events) -> None:
    idle, span = _idle_per_step(events[f.evidence["rank"]])
    assert f.evidence["idle_ns_per_step"] == pytest.approx(idle, rel=1e-9, abs=1)
    assert f.evidence["span_ns_per_step"] == pytest.approx(span, rel=1e-9, abs=1)
    host = sum(f.evidence[c] for c in ("idle_host_ns", "idle_launch_ns", "idle_sync_ns"))
    if host >= HOST_SHARE * span:  # the GPU waited on the host most of the step: not "gpu-bound" mostly
        assert not _mostly(f.text, "gpu"), f.text


def _mostly(text: str, bound: str) -> bool:
    """Whether `bound`-bound covers most steps in an idle finding's '(x-bound in n of m, ...)'."""
    m = re.search(rf"{bound}-bound in (\d+) of (\d+)", text)
    return bool(m) and int(m.group(1)) * 2 > int(m.group(2)) or f"{bound}-bound over the whole trace" in text


def _check_exposed(f, events) -> None:
    comm, exposed = _exposed(events[f.evidence["rank"]])
    assert (f.evidence["comm_ns"], f.evidence["exposed_ns"]) == (comm, exposed)
    assert re.match(r"(\S+: )?rank \d+(: | waits )", f.text), f.text  # a sentence with a verb


def _check_roofline(f, events) -> None:
    device = next(d for d in devices.DEVICES if d.name == f.evidence["device"])
    lost, roofed, total = _lost_ns(events[f.evidence["rank"]], f.evidence["kernel"], device)
    assert f.evidence["lost_ns"] == pytest.approx(lost, rel=1e-6, abs=1)  # the finding keeps whole ns
    assert roofed >= 0.5 * total  # not resting on unknown work: rows with a roof cover most of its time


def _check_straggler(f, events) -> None:
    v = f.evidence["verdict"]
    assert v["lateness_ns"] > 0 and v["gated_by_rank"][v["rank"]] * 2 > v["gated_units"], f.text


def _check_cpu_comm(f, events) -> None:
    ev = events[f.evidence["rank"]]
    start = ev["start_ns"].to_numpy(dtype="int64")
    end = start + ev["dur_ns"].to_numpy(dtype="int64")
    comm = (ev["op_class"] == "communication").to_numpy()
    covered, last = 0, None  # the union of the communication intervals, walked in start order
    for s, e in sorted(zip(start[comm].tolist(), end[comm].tolist())):
        if last is None or s > last:
            covered, last = covered + e - s, e
        elif e > last:
            covered, last = covered + e - last, e
    assert f.evidence["in_flight_ns"] == covered and f.evidence["span_ns"] == end.max() - start.min()
    assert f.evidence["summed_ns"] == ev.loc[comm, "dur_ns"].sum()


def _kind(f) -> str | None:
    """Which check applies: by the evidence a finding carries (other sources, e.g. reports/fixes,
    have their own tests)."""
    keys = set(f.evidence)
    if f.section == "idle" and "idle_ns_per_step" in keys:
        return "idle"
    if "of its communication is exposed" in f.text and {"exposed_ns", "comm_ns"} <= keys:
        return "exposed"
    if f.section == "roofline" and {"lost_ns", "kernel", "device"} <= keys:
        return "roofline"
    if "is the straggler" in f.text and "verdict" in keys:
        return "straggler"
    if "collective in flight" in f.text and "in_flight_ns" in keys:
        return "cpu_comm"
    return None


CHECKS = {"idle": _check_idle, "exposed": _check_exposed, "roofline": _check_roofline,
          "straggler": _check_straggler, "cpu_comm": _check_cpu_comm}


def _no_disagreement(found) -> None:
    """A rank a straggler finding says the host made late is not gpu-bound in most steps of an
    idle finding; no straggler 'later' by a negative time."""
    late_host = {f.evidence["verdict"]["rank"] for f in found if _kind(f) == "straggler" and HOST_WORDS in f.text}
    for f in found:
        if _kind(f) == "idle" and f.evidence["rank"] in late_host:
            assert not _mostly(f.text, "gpu"), [x.text for x in found]
        assert not re.search(r" -\d[\d,.]* ms later", f.text), f.text


def _claims(path: Path) -> set[str]:
    """Check every finding of `path`; the kinds checked."""
    session = Session.open([path], keep_events=True)
    found = session.findings()
    events = _events([r.profiles for r in session.runs])
    kinds = set()
    for f in found:
        kind = _kind(f)
        if kind:
            CHECKS[kind](f, events)
            kinds.add(kind)
    _no_disagreement(found)
    return kinds


@pytest.mark.slow
def test_claims_hold_on_these_captures():
    checked = set().union(*(_claims(DATA / name) for name in FAST))
    assert checked == set(CHECKS)  # every kind of finding met and recomputed at least once


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in _folders() if n not in FAST])
def test_claims_hold_on_every_capture(name):
    _claims(DATA / name)


@pytest.mark.slow
@pytest.mark.parametrize("path", _shared() or [None],
                         ids=lambda p: p.name if isinstance(p, Path) else "none")
def test_claims_hold_on_the_public_traces(path):
    if path is None:
        pytest.skip(f"no public traces at {SHARED_TRACES}")
    _claims(path)
