"""GPU idle by cause (reports/idle/idle.py, tracelab idle): on the H100 captures of a host-bound
and a GPU-bound training run under torch.profiler and nsys, each cause against a plain walk
of the raw JSON / SQLite written here; the rule on hand-made frames; broken inputs."""
from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import tracelab
from helpers import strict_json, slow_after
from tracelab.ingest import cache
from tracelab.core import classify, schema
from tracelab.cli import app
from tracelab.core.errors import TraceFormatError
from tracelab.reports.idle import idle as I
from tracelab.reports.idle.idle_text import idle_json
from tracelab.reports.whatif.bound import path_bounds
from tracelab.core.schema import RankData

DATA = Path(__file__).parent / "data"
CAPTURES = {("small", "torch"): "host", ("large", "torch"): "gpu", ("small", "nsys"): "host", ("large", "nsys"): "gpu"}
SYNC_NAMES = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaFree",
              "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize"}
STEP = re.compile(r"step (\d+)")


def _idle(events: pd.DataFrame, hosts: dict) -> I.Idle:
    """I.idle with each rank's steps bound by its critical path, the whatif topic's path_bounds
    digest of the rank, as the session joins them."""
    bounds = {int(r): path_bounds(RankData(g, {}, hosts.get(int(r)))) for r, g in events.groupby("rank")}
    return I.idle(events, hosts, bounds=bounds)


def _trace(size: str, source: str) -> Path:
    folder = DATA / f"idle-1gpu-{size}-{source}"
    return next(f for f in folder.glob("rank0.*") if not f.name.endswith(".results.json"))


# ---- the plain walk: a step's gaps, one by one, from raw rows ------------------------------------


def _walk(ops: list[dict], syncs: list[tuple[int, int]]) -> dict[str, int]:
    """ops: one step's GPU rows {start, end, stream, launch, launch_end (None: unknown)}."""
    ops = sorted(ops, key=lambda o: (o["start"], o["launch"] is None, o["launch"] or 0))
    out = defaultdict(int)
    busy_end, stream_end = ops[0]["end"], {ops[0]["stream"]: ops[0]["end"]}
    for o in ops[1:]:
        if o["start"] > busy_end:
            g0, g1 = busy_end, o["start"]
            if o["launch"] is None:
                out["idle_other_ns"] += g1 - g0
            else:
                a = min(max(o["launch"], g0), g1)
                sync = sum(max(0, min(e, a) - max(s, g0)) for s, e in syncs)
                out["idle_sync_ns"] += sync
                out["idle_host_ns"] += a - g0 - sync
                if o["launch_end"] > g0:
                    out["idle_launch_ns"] += g1 - a
                elif stream_end.get(o["stream"], -1) >= g0:
                    out["idle_other_ns"] += g1 - a
                else:
                    out["idle_dependency_ns"] += g1 - a
        busy_end = max(busy_end, o["end"])
        stream_end[o["stream"]] = max(stream_end.get(o["stream"], -1), o["end"])
    return out


def _by_step(ops: list[dict], steps: list[tuple[int, int, int]], syncs: list) -> dict[int, dict]:
    """ops grouped by the step range holding their launch (ops without a launch left out), walked."""
    grouped = defaultdict(list)
    for o in ops:
        for number, s, e in steps:
            if o["launch"] is not None and s <= o["launch"] < e:
                grouped[number].append(o)
    return {n: _walk(rows, syncs) for n, rows in grouped.items()}


def _ns(us: float) -> int:
    return round(us * 1000)


def _kineto_walk(path: Path) -> dict[int, dict]:
    events = json.load(gzip.open(path))["traceEvents"]
    launches = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launches.setdefault(e["args"]["correlation"], (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
    ops = []
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            launch = launches.get(e["args"].get("correlation"))
            ops.append({"start": _ns(e["ts"]), "end": _ns(e["ts"]) + _ns(e["dur"]), "stream": e["args"]["stream"],
                        "launch": launch and launch[0], "launch_end": launch and launch[1]})
    steps = [(int(m.group(1)), _ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in events
             if e.get("cat") == "user_annotation" and (m := STEP.fullmatch(e["name"]))]
    syncs = [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in events
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and e["name"] in SYNC_NAMES]
    return _by_step(ops, steps, syncs)


def _nsys_walk(path: Path) -> dict[int, dict]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    launches, syncs = {}, []
    for corr, start, end, name in con.execute("SELECT correlationId, start, end, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                                              "r JOIN StringIds s ON s.id = r.nameId ORDER BY r.rowid"):
        launches.setdefault(corr, (start, end))
        if re.sub(r"_v\d+$", "", name) in SYNC_NAMES:
            syncs.append((start, end))
    ops = []
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if table in tables:
            for start, end, stream, corr in con.execute(f"SELECT start, end, streamId, correlationId FROM {table}"):
                launch = launches.get(corr)
                ops.append({"start": start, "end": end, "stream": stream, "launch": launch and launch[0],
                            "launch_end": launch and launch[1]})
    steps = [(int(m.group(1)), s, e) for text, s, e in con.execute(
        "SELECT COALESCE(n.text, t.value), n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds t ON t.id = n.textId "
        "WHERE n.eventType IN (59, 60)") if text and (m := STEP.fullmatch(text))]
    con.close()
    return _by_step(ops, steps, syncs)


WALKS = {"torch": _kineto_walk, "nsys": _nsys_walk}


@pytest.fixture(scope="module")
def results() -> dict:
    out = {}
    for size, source in CAPTURES:
        profiles = tracelab.load_many(_trace(size, source), reduce={"idle": I.RankIdle(), "path_bounds": path_bounds})
        out[size, source] = I.combine({p.rank: p.summary["idle"] for p in profiles},
                                      {p.rank: p.summary["path_bounds"] for p in profiles})
    return out


@slow_after(1)
@pytest.mark.parametrize("size,source", list(CAPTURES))
def test_each_cause_equals_a_plain_walk_of_the_raw_trace(results, size: str, source: str) -> None:
    steps = results[size, source].steps.set_index("step")
    walked = WALKS[source](_trace(size, source))
    assert sorted(walked) == sorted(steps.index) and len(walked) >= 3
    for number, causes in walked.items():
        row = steps.loc[number]
        assert sum(int(row[c]) for c in I.CAUSES) == row["idle_ns"] == row["span_ns"] - row["busy_ns"]
        for cause in I.CAUSES:
            assert abs(row[cause] - causes[cause]) <= 0.01 * row["idle_ns"], (number, cause, row[cause], causes[cause])


@pytest.mark.parametrize("size,source", list(CAPTURES))
def test_host_bound_and_gpu_bound_are_named_right(results, size: str, source: str) -> None:
    result = results[size, source]
    assert set(result.steps["bound"]) == {CAPTURES[size, source]}
    assert (I.HINT in result.notes) == (CAPTURES[size, source] == "host")
    host = result.steps["idle_host_ns"] + result.steps["idle_launch_ns"]
    if CAPTURES[size, source] == "host":  # tiny batch: the GPU idles most of the step, waiting on the host
        assert (host > 0.8 * result.steps["idle_ns"]).all() and (result.steps["idle_ns"] > 0.8 * result.steps["span_ns"]).all()
    else:
        assert (result.steps["idle_ns"] < 0.05 * result.steps["span_ns"]).all()


@pytest.mark.parametrize("size", ["small", "large"])
def test_torch_and_nsys_agree_on_the_same_workload(results, size: str) -> None:
    torch, nsys = results[size, "torch"], results[size, "nsys"]
    assert (torch.steps["kernels"].to_numpy() == nsys.steps["kernels"].to_numpy()).all()
    assert torch.launches["kernels_per_step"].iloc[0] == nsys.launches["kernels_per_step"].iloc[0]
    busy_t, busy_n = torch.steps["busy_ns"].median(), nsys.steps["busy_ns"].median()
    assert abs(busy_t - busy_n) < 0.02 * busy_n
    if size == "small":  # launch latency is the GPU's and the driver's, not the profiler's: within 15%
        launch_t, launch_n = torch.steps["idle_launch_ns"].median(), nsys.steps["idle_launch_ns"].median()
        assert abs(launch_t - launch_n) < 0.15 * launch_n


def test_launch_statistics_equal_the_launch_columns_by_hand() -> None:
    events = tracelab.load(_trace("small", "torch")).events
    kernels = events[events["kind"] == "kernel"]
    raw = json.load(gzip.open(_trace("small", "torch")))["traceEvents"]
    durs = {e["args"]["correlation"]: _ns(e["dur"]) for e in raw if e.get("cat") in ("cuda_runtime", "cuda_driver")
            and "correlation" in e.get("args", {})}
    kernel_raw = [e for e in raw if e.get("cat") == "kernel"]
    stats = I.launch_stats(kernels, 0).iloc[0]
    assert stats["launch_cpu_ns"] == sum(durs[e["args"]["correlation"]] for e in kernel_raw)
    assert stats["short_kernels"] == sum(_ns(e["dur"]) < durs[e["args"]["correlation"]] for e in kernel_raw)
    assert stats["kernels_per_step"] == len(kernel_raw) / 4
    delay = (kernels["start_ns"] - kernels["launch_start_ns"]).to_numpy(dtype=float)
    assert stats["delay_median_ns"] == np.median(delay) and 0 < stats["delay_median_ns"] < stats["delay_p90_ns"]


def test_host_ops_cover_only_host_caused_idle(results) -> None:
    for (size, source), result in results.items():
        ops = result.ops
        host_total = int(result.steps["idle_host_ns"].sum())
        assert len(ops) and (ops["host_idle_ns"] == host_total).all(), (size, source)
        assert (ops["covered_ns"] <= host_total).all() and (ops["covered_ns"] > 0).all()
    kinds = set(results["small", "torch"].ops["kind"])
    assert "cpu_op" in kinds and set(results["small", "nsys"].ops["kind"]) == {"range"}  # nsys: NVTX only


# ---- the rule, on hand-made frames ---------------------------------------------------------------


def _frame(rows: list[tuple]) -> pd.DataFrame:
    """rows: (stream, start, dur, launch_start or None, launch_dur or None), all in step 0."""
    stream, start, dur, launch, launch_dur = zip(*rows)
    return schema.validate(classify.classified(schema.coerce({
        "rank": 0, "source": "torch", "kind": "kernel", "name": "k", "device": 0, "stream": list(stream),
        "start_ns": list(start), "dur_ns": list(dur), "step": 0, "launch_start_ns": list(launch),
        "launch_dur_ns": list(launch_dur)}, n_rows=len(rows), spec=schema.PARSED)))


def _host(rows: list[tuple]) -> pd.DataFrame:
    kind, name, start, dur = zip(*rows) if rows else ((), (), (), ())
    return schema.host_frame(kind, name, [1] * len(rows), start, dur)


def test_each_cause_on_a_hand_made_step() -> None:
    events = _frame([
        (7, 0, 100, -50, 10),      # busy 0-100
        (7, 300, 100, 250, 20),    # gap 100-300: sync 120-180, host rest to 250, launch 250-300
        (7, 410, 90, 150, 10),     # gap 400-410: queued behind its own stream: other
        (8, 600, 50, 450, 10),     # gap 500-600: queued on another stream, nothing ran on it: dependency
        (7, 700, 10, None, None),  # gap 650-700: no launch call known: other
    ])
    host = _host([("sync", "cudaStreamSynchronize", 120, 60), ("cpu_op", "aten::mm", 100, 150),
                  ("cpu_op", "aten::mm", 110, 50), ("step", "step 0", 0, 1000),
                  ("wait", "cudaStreamWaitEvent", 440, 5)])  # stream 8 made to wait before its op's launch
    result = _idle(events, {0: host})
    row = result.steps.iloc[0]
    assert (row["idle_sync_ns"], row["idle_host_ns"], row["idle_launch_ns"], row["idle_dependency_ns"],
            row["idle_other_ns"]) == (60, 90, 50, 100, 10 + 50)
    # the dependency names its cause: stream 8 waited (cudaStreamWaitEvent) on stream 7, whose op ended at 500
    assert result.waits[["stream", "waited_on_stream", "waited_on_kernel", "wait_call", "gaps", "dependency_ns"]
                        ].values.tolist() == [[8, 7, "k", "cudaStreamWaitEvent", 1, 100]]
    no_wait = _idle(events, {0: host[host["kind"] != "wait"].reset_index(drop=True)}).steps.iloc[0]
    assert (no_wait["idle_dependency_ns"], no_wait["idle_other_ns"]) == (0, 10 + 50 + 100)  # unexplained, not a dependency
    # issue 27: bound is what the step's critical path is made of (tracelab whatif): 200 ns of kernels
    # on it against 300 of host, launches and the sync (busy 350 against host-caused idle 200 said gpu)
    assert row["idle_ns"] == 360 and row["bound"] == "host"
    ops = result.ops.set_index("name")
    assert list(ops.index) == ["aten::mm"] and ops.loc["aten::mm", "covered_ns"] == 90  # nested once, less the sync
    assert "step 0" not in set(result.ops["name"])


def test_bound_is_the_largest_share() -> None:
    gpu = _frame([(7, 0, 1000, -10, 5), (7, 1010, 1000, 20, 5)])  # queued: a host launching after A ended paces it
    assert _idle(gpu, {0: _host([])}).steps["bound"].tolist() == ["gpu"]
    host = _frame([(7, 0, 10, -10, 5), (7, 1010, 10, 1005, 5)])
    assert _idle(host, {0: _host([])}).steps["bound"].tolist() == ["host"]


@pytest.mark.parametrize("busy, comm, host, dependency, other, want", [
    (900, 0, 50, 0, 10, "gpu"),                 # host-caused idle 5% of the step: the GPU is the bound
    (530, 0, 410, 0, 10, "host"),               # most of the step busy, yet 41% waiting for the host: host
    (500, 300, 150, 0, 10, "communication"),    # host 15%, but communication waits more
    (350, 100, 150, 200, 10, "communication"),  # exposed comm and dependency 300 against gpu 250, host 150
    (0, 0, 0, 0, 10, "unclear"),                # nothing but the GPU's own gaps
    (200, 0, 30, 100, 700, "unclear"),          # 70% idle on what the trace does not explain: not gpu-bound
    (200, 0, 150, 100, 550, "host"),            # the same, but the host paced 15% of it: host
    (400, 0, 30, 100, 299, "gpu"),              # the gaps and waits short of the busy time: gpu
    (400, 0, 30, 100, 399, "unclear"),          # no exposed communication: the 100 of waits are unexplained too
    (300, 100, 30, 250, 210, "communication"),  # waits beside exposed communication are its: 350 > gpu 200
    (300, 0, 30, 250, 210, "unclear"),          # the same waits with no communication exposed: 460 unexplained
])
def test_step_bound_never_calls_a_step_gpu_bound_that_waited_on_the_host(busy, comm, host, dependency, other, want):
    span = busy + host + dependency + other
    # half the host's idle in host stalls: a stall is the host's time as much as a late launch is
    step = pd.DataFrame({"span_ns": [span], "busy_ns": [busy], "exposed_comm_ns": [comm],
                         "idle_host_ns": [host - host // 2], "idle_stall_ns": [host // 2],
                         "idle_launch_ns": [0], "idle_sync_ns": [0], "idle_dependency_ns": [dependency],
                         "idle_other_ns": [other]})
    assert I.step_bound(step).tolist() == [want]


# ---- the command: strict JSON, proton, broken inputs ---------------------------------------------


def test_json_is_strict_and_steps_json_carries_the_idle_columns() -> None:
    result = CliRunner().invoke(app, ["idle", str(DATA / "idle-1gpu-small-nsys"), "--format", "json", "--top", "3"])
    assert result.exit_code == 0, result.output
    doc = strict_json(result.stdout)
    assert len(doc["steps"]) == 4 and len(doc["host_ops"]) == 3 and doc["launches"][0]["kernels_per_step"] == 297
    steps = CliRunner().invoke(app, ["steps", str(DATA / "idle-1gpu-small-nsys"), "--format", "json"])
    rows = json.loads(steps.stdout)["steps"]  # its clock line's NaN is issue 22's
    by_step = {r["step"]: r for r in doc["steps"]}
    for r in rows:
        assert {c: r[c] for c in (*I.CAUSES, "idle_ns", "bound")} == {c: by_step[r["step"]][c]
                                                                       for c in (*I.CAUSES, "idle_ns", "bound")}


@pytest.mark.slow
def test_proton_says_it_records_no_launches_in_one_line() -> None:
    result = CliRunner().invoke(app, ["idle", str(DATA / "decode-1gpu-proton"), "--format", "json"])
    doc = strict_json(result.stdout)
    assert result.exit_code == 0 and doc["steps"] == [] and doc["launches"] == []
    assert doc["notes"] == [{"code": "idle_untimed", "values": {}, "rank": 0,
                             "text": "rank 0: no idle breakdown: proton records no launches and no timestamps"}]
    table = CliRunner().invoke(app, ["idle", str(DATA / "decode-1gpu-proton"), str(DATA / "idle-1gpu-small-torch")])
    assert table.exit_code == 0 and "proton records no launches" in table.stdout and "0.000 │ host" not in table.stdout


def test_a_trace_without_launch_calls_is_all_other_and_says_so(tmp_path: Path) -> None:
    doc = json.load(gzip.open(DATA / "train-1gpu-steps-torch" / "rank0.pt.trace.json.gz"))  # steps, as launched
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("cuda_runtime", "cuda_driver")]
    broken = tmp_path / "rank0.pt.trace.json"
    broken.write_text(json.dumps(doc))
    profile = tracelab.load(broken)
    assert profile.events["launch_start_ns"].isna().all()
    result = _idle(profile.events, {0: profile.host})
    assert [n.code for n in result.notes] == ["no_steps", "idle_no_launches"]
    # no launch, so no step either (steps follow the launch): nothing to split, and it says so
    assert (result.steps["idle_other_ns"] == result.steps["idle_ns"]).all()


def test_a_damaged_runtime_table_names_its_row(tmp_path: Path) -> None:
    broken = tmp_path / "rank0.sqlite"
    shutil.copy(_trace("small", "nsys"), broken)
    con = sqlite3.connect(broken)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end = start - 5 WHERE rowid = 3")
    con.commit()
    con.close()
    with pytest.raises(TraceFormatError, match=r"CUPTI_ACTIVITY_KIND_RUNTIME row 3: end"):
        tracelab.load(broken)


def test_the_host_frame_survives_the_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    monkeypatch.setattr(cache, "RACY_S", -1e9)
    first = tracelab.load(_trace("small", "nsys"))
    assert list(tmp_path.glob("*/0.host.parquet"))
    again = tracelab.load(_trace("small", "nsys"))
    pd.testing.assert_frame_equal(first.host, again.host)
    pd.testing.assert_frame_equal(first.events, again.events)


@pytest.mark.slow
def test_the_report_draws_busy_then_each_cause_per_step(results, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", str(DATA / "idle-1gpu-small-torch"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    figures = json.loads(re.search(r'id="tracelab-figures">(.*?)</script>', page, re.S).group(1))
    bars = next(f for f in figures.values() if f["layout"]["title"]["text"].startswith("per step: GPU busy"))
    names = [d["name"] for d in bars["data"]]
    assert names == ["GPU busy", "idle: host", "idle: host stall", "idle: launch", "idle: sync", "idle: dependency",
                     "idle: other"]
    steps = results["small", "torch"].steps
    host = next(d for d in bars["data"] if d["name"] == "idle: host")["y"]
    assert host == pytest.approx((steps["idle_host_ns"] / 1e6).tolist(), abs=1e-4)
    assert "host-bound in 4 of 4 steps" in page and page.count("a suggestion, not a measurement") == 1


def test_a_dataset_keeps_the_launches_and_says_it_has_no_host_frame(results, tmp_path: Path) -> None:
    from tracelab.ingest.dataset import export

    export([str(_trace("small", "nsys"))], tmp_path / "ds")
    doc = strict_json(CliRunner().invoke(app, ["idle", str(tmp_path / "ds"), "--format", "json"]).stdout)
    direct = results["small", "nsys"].steps
    host_and_sync = direct["idle_host_ns"] + direct["idle_sync_ns"]
    assert [r["idle_host_ns"] for r in doc["steps"]] == host_and_sync.tolist() and doc["host_ops"] == []
    assert [r["idle_launch_ns"] for r in doc["steps"]] == direct["idle_launch_ns"].tolist()
    assert any(n["code"] == "no_host_intervals" and "no host intervals" in n["text"] for n in doc["notes"])


def test_a_cpu_only_trace_says_there_is_no_gpu_activity() -> None:
    doc = strict_json(CliRunner().invoke(app, ["idle", str(DATA / "train-cpu-torch"), "--format", "json"]).stdout)
    assert doc["steps"] == [] and all("no GPU kernel, memcpy or memset" in n["text"] for n in doc["notes"])


def test_many_ranks_give_the_spread_per_step_and_every_format_renders() -> None:
    from tracelab.reports.idle.idle_text import IDLE_RENDERERS

    one = _frame([(7, 0, 100, -50, 10), (7, 300, 100, 250, 20)])
    frames = [one.assign(rank=np.int32(r), start_ns=one["start_ns"] + r, launch_start_ns=one["launch_start_ns"] + r)
              for r in range(17)]
    result = _idle(pd.concat(frames, ignore_index=True), {r: _host([]) for r in range(17)})
    assert len(result.steps) == 17 and (result.steps["idle_host_ns"] == 150).all()
    table = CliRunner().invoke(app, ["idle", "--help"]).stdout
    assert all(word in table for word in ("host:", "sync:", "launch:", "dependency:", "other:", "bound"))
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(IDLE_RENDERERS["table"](result, 3))
    assert "medians over the ranks" in console.export_text()
    assert strict_json(IDLE_RENDERERS["json"](result, 3))["steps"][0]["bound"] in I.BOUNDS
    assert IDLE_RENDERERS["csv"](result, 3).count("\n") == 18


def test_a_trace_without_steps_is_one_window(results) -> None:
    events = tracelab.load(_trace("small", "nsys")).events.assign(step=pd.NA)
    events["step"] = events["step"].astype("Int64")
    host = tracelab.load(_trace("small", "nsys")).host
    result = _idle(events, {0: host})
    row = result.steps.iloc[0]
    assert len(result.steps) == 1 and pd.isna(row["step"]) and any(n.code == "no_steps" and "one window" in n.text for n in result.notes)
    assert sum(row[c] for c in I.CAUSES) == row["idle_ns"] == row["span_ns"] - row["busy_ns"]
    steps = results["small", "nsys"].steps  # the steps' idle lies inside the whole trace's
    assert row["idle_ns"] > steps["idle_ns"].sum() and row["busy_ns"] == steps["busy_ns"].sum()
    assert strict_json(idle_json(result))["steps"][0]["step"] is None


@pytest.mark.parametrize("capture", ["idle-sync-1gpu-torch", "idle-sync-1gpu-nsys"])
def test_sync_and_host_causes_on_a_capture_that_has_them(capture):
    """benchmarks/idle_causes.py (in git at da8b67c) on an H100: per step `syncs` x (.item(), then host_ms of sleep).
    The host's sleeps are idle_host_ns (at least syncs x host_ms a step); the synchronising
    calls' return is idle_sync_ns, non-zero under both profilers."""
    import json as _json

    folder = DATA / capture
    expected = _json.loads((folder / "expected.results.json").read_text())
    profile = tracelab.load(next(p for p in folder.iterdir() if p.name.startswith("rank0.")))
    steps = _idle(profile.events, {profile.rank: profile.host}).steps
    assert len(steps) == expected["steps"]
    assert (steps["idle_host_ns"] >= expected["syncs"] * expected["host_ms"] * 1e6).all()
    assert (steps["idle_sync_ns"] > 0).all() and (steps["bound"] == "host").all()
    causes = steps[["idle_host_ns", "idle_launch_ns", "idle_sync_ns", "idle_dependency_ns", "idle_other_ns"]]
    assert (causes.sum(axis=1) == steps["idle_ns"]).all()


def test_a_graph_launch_counts_once_and_its_kernels_are_not_shorter_than_it() -> None:
    # one cudaGraphLaunch (1000-1100) replaying 3 kernels; two kernel launches: one longer than its kernel
    events = _frame([(7, 1200, 10, 1000, 100), (7, 1210, 10, 1000, 100), (7, 1220, 10, 1000, 100),
                     (7, 1300, 20, 1250, 50), (7, 1400, 30, 1390, 5)])
    row = I.launch_stats(events, 0).iloc[0]
    assert row["launch_cpu_ns"] == 100 + 50 + 5 and row["graph_launches"] == 1 and row["launched"] == 5
    assert row["short_kernels"] == 1 and row["short_kernels_gpu_ns"] == 20  # not the three replayed kernels
    assert row["delay_median_ns"] == 50  # per call: 200 (the graph's first kernel), 50, 10


def test_launch_cpu_is_each_launch_call_once_on_a_graph_capture() -> None:
    """The launch calls' CPU time equals the runtime calls' durations read from the JSON, each
    call once however many kernels it started (cudaGraphLaunch replays)."""
    path = DATA / "decode-1gpu-steps-torch" / "rank0.pt.trace.json.gz"
    raw = json.loads(gzip.open(path).read())["traceEvents"]
    kernel_ids = {e["args"]["correlation"] for e in raw if e.get("cat") == "kernel"}
    calls = [e for e in raw if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and e.get("args", {}).get("correlation") in kernel_ids]
    graph = [e for e in calls if e["name"] == "cudaGraphLaunch"]
    events = tracelab.load(path).events
    row = I.launch_stats(events, 0).iloc[0]
    assert graph and row["graph_launches"] == len(graph)
    assert row["launch_cpu_ns"] == pytest.approx(sum(round(e["dur"] * 1000) for e in calls), abs=len(calls))


@pytest.mark.slow
def test_a_rank_whose_path_is_mostly_unexplained_gaps_is_not_called_gpu_bound() -> None:
    """tp-2gpu-late-torch's rank 0, alone, waits ~10.7 ms per token for its late peer inside NCCL,
    66 us compute. It was called gpu-bound. Its collectives' wait edges now explain that delay
    (whatif/edges._relax drops their chain gap), so its path is wait, communication-bound, not
    'other'; a step is unclear wherever the path's other outweighs every bound's categories, as
    whatif's own path table (an independent walk) gives them: on neither rank here."""
    from tracelab.reports.whatif.analyse import path_steps
    from tracelab.reports.whatif.bound import BOUNDS
    from tracelab.reports.whatif.nodes import rank_graph

    for r, want_unclear in ((0, False), (1, False)):
        p = tracelab.load(DATA / "tp-2gpu-late-torch" / f"rank{r}.pt.trace.json.gz")
        path = path_steps({0: rank_graph(p.events, p.host, 0)}, {0: None})
        score = np.c_[tuple(path[list(cols)].sum(axis=1) for cols in BOUNDS.values())]
        unclear = path["other_ns"].to_numpy() > score.max(axis=1)
        assert unclear.all() if want_unclear else not unclear.any()
        steps = _idle(p.events, {0: p.host}).steps
        by_step = dict(zip(steps["step"].tolist(), steps["bound"].tolist()))
        for step, u, best in zip(path["step"].tolist(), unclear.tolist(), np.argmax(score, axis=1).tolist()):
            assert by_step[step] == ("unclear" if u else list(BOUNDS)[best])
        if r == 0:
            assert set(by_step.values()) == {"communication"} and (path["wait_ns"] > 100 * path["compute_ns"]).all()


@pytest.mark.slow
def test_a_step_range_that_holds_no_launch_is_not_called_absent(capsys):
    """HTA's triton_example has a ProfilerStep#1 range (read from the file) on a thread other than the
    one that launched its one kernel: 'no range matches the step pattern' was false; it says the
    ranges hold no GPU work's launch. decode-1gpu-torch, with no step range, keeps the old reason."""
    from helpers import shared_trace
    from helpers import run_cli_output
    path = shared_trace("hta/triton_example/triton_example.json.gz")
    with gzip.open(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    step, = (e for e in events if e["name"].startswith("ProfilerStep#"))
    launch, = (e for e in events if e["name"] == "cuLaunchKernel")
    assert step["tid"] != launch["tid"]
    status, out, err = run_cli_output(capsys, "idle", str(path))
    assert status == 0 and "its step ranges hold no GPU work's launch" in " ".join(out.split()), err
    status, out, err = run_cli_output(capsys, "idle", str(DATA / "decode-1gpu-torch"))
    assert status == 0 and "no range matches the step pattern" in " ".join(out.split()), err


def test_a_launch_returning_long_before_its_op_starts_is_launch_latency_only_until_then() -> None:
    """A gap whose next op's launch call began in it but returned long before the op started: launch
    latency is the call and LAUNCH_LATENCY_NS after it; the rest the op waited on another stream (a
    HIP kernel queued behind an event for 463 ms was all 'launch' before)."""
    lat = I.LAUNCH_LATENCY_NS
    events = _frame([
        (7, 0, 100, -50, 10),                      # busy 0-100
        (8, 1_000_000, 50, 200, 300),              # gap 100-1,000,000: host 100-200, launch call 200-500
        (8, 1_000_100, 50, 1_000_040, 30),         # gap 1,000,050-1,000,100: launch running: all launch
    ])
    row = _idle(events, {0: _host([("wait", "hipStreamWaitEvent", 150, 10)])}).steps.iloc[0]
    assert row["idle_host_ns"] == 100 and row["idle_sync_ns"] == 0
    assert row["idle_launch_ns"] == (500 + lat - 200) + 50  # call and latency; the second gap's 50 ns are launch
    assert row["idle_dependency_ns"] == 1_000_000 - (500 + lat)  # queued on stream 8, nothing of it ran: waited
    assert row["idle_other_ns"] == 0 and row["idle_ns"] == sum(row[c] for c in I.CAUSES)


def test_hip_sync_and_allocator_calls_are_known_as_cuda_ones_are() -> None:
    """ROCm's Kineto names the runtime hip*: a blocking hipMemcpyWithStream or hipDeviceSynchronize is a
    sync (the idle it covers is sync, not host or launch), hipMalloc/hipFree the allocator's."""
    from tracelab.parsers._host import host_kinds, is_sync

    names = ["hipDeviceSynchronize", "hipStreamSynchronize", "hipMemcpyWithStream", "hipMemcpy", "hipFree",
             "hipMemcpyAsync", "hipMemsetAsync", "hipLaunchKernel", "hipMalloc", "hipHostMalloc", "hipExtMallocWithFlags",
             "cudaMemcpy", "cudaMemcpyAsync", "hipGraphLaunch"]
    assert is_sync(names).tolist() == [True, True, True, True, True, False, False, False, False, False, False,
                                       True, False, False]
    assert host_kinds(names).tolist() == ["sync"] * 5 + ["", "", "", "alloc", "alloc", "alloc", "sync", "", ""]
    path = DATA / "public" / "hta" / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    want = sorted(e["name"] for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"
                  and e["name"] in ("hipMemcpyWithStream", "hipDeviceSynchronize"))  # 2 + 1, counted from the JSON
    host = tracelab.load(path).host
    assert sorted(host.loc[host["kind"] == "sync", "name"]) == want and len(want) == 3
