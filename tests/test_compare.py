"""tracelab compare: aligned rows checked against sums read straight from the trace files
(Kineto JSON, nsys SQLite, proton hatchet JSON), the straggler, the tree diff, bad input."""
from __future__ import annotations

import copy
import gzip
import io
import json
import sqlite3
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from helpers import shared_trace, slow_after
from rich.console import Console
from typer.testing import CliRunner

import tracelab
from tracelab.core.classify import canonical
from tracelab.cli import app
from tracelab.ingest.inputs import label_inputs
from tracelab.reports.align.align import comparison
from tracelab.reports.compare.compare_text import compare_tables
from helpers import run_cli_output
from helpers import DATA

ROOT = Path(__file__).resolve().parents[1]
# public traces, by their path under shared/traces (helpers.shared_trace finds them)
SAMPLED = ["hta/trace_filter/sampled_rank-0.json.gz", "hta/trace_filter/sampled_rank-1.json.gz"]
NSYS_BEFORE_AFTER = ["nsys-ai/mfu_2gpu_before.sqlite", "nsys-ai/mfu_2gpu_after.sqlite"]
PROTON_CUDA = "proton/cuda.json"


def _compare(paths: list[Path], by: str = "kernel"):
    paths = [str(p) for p in paths]
    return comparison(label_inputs(paths, [tracelab.load_many([p]) for p in paths]), by)


def _row(table: pd.DataFrame, kernel: str) -> pd.Series:
    match = table[table["kernel"] == kernel]
    assert len(match) == 1, kernel
    return match.iloc[0]


# ---- independent sums ---------------------------------------------------------


def kineto_sums(path: Path) -> tuple[Counter, Counter, int]:
    """Kernel ns and launches per canonical name, and all GPU activity ns, from the JSON."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    time_ns, count, gpu_ns = Counter(), Counter(), 0
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            gpu_ns += round(e["dur"] * 1000)
        if e.get("cat") == "kernel":
            time_ns[canonical(e["name"])] += round(e["dur"] * 1000)
            count[canonical(e["name"])] += 1
    return time_ns, count, gpu_ns


def nsys_sums(path: Path, count: bool = False) -> list[Counter]:
    """Kernel ns (or with `count`, calls) per canonical name for each process, in pid order
    (how ranks are given)."""
    sql = """SELECT k.globalPid, COALESCE(d.value, s.value), k."end" - k.start
             FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN StringIds d ON d.id = k.demangledName
             LEFT JOIN StringIds s ON s.id = k.shortName"""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute(sql).fetchall()
    by_pid: dict[int, Counter] = {}
    for global_pid, name, dur_ns in rows:
        by_pid.setdefault((global_pid >> 24) & 0xFFFFFF, Counter())[canonical(name)] += 1 if count else dur_ns
    return [by_pid[pid] for pid in sorted(by_pid)]


def hatchet_sums(path: Path) -> Counter:
    """Kernel ns per canonical name: nodes with a device id, exclusive metrics."""
    out: Counter = Counter()
    stack = [json.loads(path.read_text())[0]]
    while stack:
        node = stack.pop()
        if "device_id" in node["metrics"]:
            out[canonical(node["frame"]["name"])] += node["metrics"]["time (ns)"]
        stack.extend(node["children"])
    return out


# ---- ranks of one run: HTA's two sampled ranks ------------------------------------


@pytest.mark.slow
def test_hta_ranks_aligned_rows_match_json():
    files = [shared_trace(rel) for rel in SAMPLED]
    c = _compare(files)
    assert c.labels == ["rank0", "rank1"]
    sums = [kineto_sums(f) for f in files]
    kernels = set(sums[0][0]) | set(sums[1][0])
    assert len(kernels) >= 100
    for kernel in kernels:
        row = _row(c.table, kernel)
        for label, (time_ns, count, _) in zip(c.labels, sums):
            assert row[f"time_ns[{label}]"] == time_ns[kernel], (kernel, label)
            assert row[f"count[{label}]"] == count[kernel], (kernel, label)
        assert row["delta_ns[rank1]"] == sums[1][0][kernel] - sums[0][0][kernel]
        # named only where the lead beats the step-to-step noise (tests/test_normalise.py)
        assert row["slowest"] in ("", "rank1" if sums[1][0][kernel] > sums[0][0][kernel] else "rank0")
    assert c.totals["total_ns"].tolist() == [s[2] for s in sums]


@pytest.mark.slow
def test_hta_two_steps_name_no_straggler():
    """Timed ranks are judged by who arrives last at the collectives, per step (reports/timeline/waits.py),
    not by compute time: each of the two ranks gates one of the two steps, so none is named;
    the row still carries the most compute time, computed here from the JSON."""
    files = [shared_trace(rel) for rel in SAMPLED]
    c = _compare(files)
    compute = []
    for f in files:
        time_ns, _, gpu_ns = kineto_sums(f)
        compute.append(gpu_ns - sum(v for k, v in time_ns.items() if k.startswith("nccl")))
    assert c.stragglers["label"].tolist() == [""] and c.stragglers["rank"].isna().all()
    assert c.stragglers["line"].iloc[0].startswith("no clear straggler") and c.straggler["rank"] is None
    assert c.stragglers["compute_ns"].iloc[0] == max(compute)
    assert set(c.timeline["label"]) == {"rank0", "rank1"}
    assert (c.timeline["busy_ns"] <= c.timeline["span_ns"]).all()
    assert len(c.skew) == 1 and c.skew["instances"].iloc[0] == 10  # ten SendRecv launches on each rank


# ---- wording: what the times are (GPU kernels, or CPU operators in a trace with none) ----------

CPU_ONLY = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


def _rendered(paths: list[Path]) -> str:
    """The terminal compare output for the files, loaded as ranks 0, 1, ... of one run."""
    groups = [[tracelab.load(p, rank=r)] for r, p in enumerate(paths)]
    c = comparison(label_inputs(paths, groups), "kernel")
    console = Console(file=io.StringIO(), width=200)
    console.print(compare_tables(c, ["kernel"]))
    return console.file.getvalue()


@pytest.mark.parametrize("paths, said, not_said, summed", [
    ([CPU_ONLY, CPU_ONLY], "CPU operator time", "GPU time", "threads"),
    (SAMPLED, "GPU time", "CPU operator", "streams"),
])
def test_compare_text_says_what_was_timed(paths, said, not_said, summed):
    """What the totals time, and that they add a rank's threads or streams (which overlap: a
    finding's union of them is smaller, and must not read as a contradiction)."""
    text = _rendered([shared_trace(rel) for rel in paths])
    assert f"{said} per input (summed over {summed})" in text
    assert "no clear straggler" in text, text  # the same work twice, or two steps that disagree
    assert not_said not in text


# ---- runs: the nsys-ai before/after pair --------------------------------------------


@pytest.mark.slow
@pytest.mark.shared
def test_nsys_before_after_aligned_rows_match_sqlite():
    files = [shared_trace(rel) for rel in NSYS_BEFORE_AFTER]
    c = _compare(files)
    assert c.labels == ["mfu_2gpu_before/rank0", "mfu_2gpu_before/rank1",
                        "mfu_2gpu_after/rank0", "mfu_2gpu_after/rank1"]
    expected = dict(zip(c.labels, nsys_sums(files[0]) + nsys_sums(files[1])))
    for label, sums in expected.items():
        for kernel, time_ns in sums.items():
            assert _row(c.table, kernel)[f"time_ns[{label}]"] == time_ns, (label, kernel)
        assert c.table[f"time_ns[{label}]"].sum() >= sum(sums.values())  # plus copies
    flash = _row(c.table, "flash_fwd_kernel")
    calls = dict(zip(c.labels, nsys_sums(files[0], count=True) + nsys_sums(files[1], count=True)))
    per_call = {label: expected[label]["flash_fwd_kernel"] / calls[label]["flash_fwd_kernel"] for label in c.labels}
    # two runs without steps: the ratio is per call (issue 22), the totals stay in time_ns
    assert c.table.attrs["basis_kind"] == "per call"
    assert flash["ratio[mfu_2gpu_after/rank0]"] == pytest.approx(
        per_call["mfu_2gpu_after/rank0"] / per_call["mfu_2gpu_before/rank0"])
    assert set(c.stragglers["group"]) == {"mfu_2gpu_before", "mfu_2gpu_after"}


# ---- proton: two ranks, and the tree diff ------------------------------------------------


def _proton_ranks(tmp_path: Path) -> list[Path]:
    """rank0.hatchet: Triton's cuda.json example; rank1.hatchet: the same tree with foo0
    3x slower and a kernel only rank 1 has (the user's `compare rank0.hatchet rank1.hatchet`)."""
    doc = json.loads(shared_trace(PROTON_CUDA).read_text())
    slower = copy.deepcopy(doc)
    slower[0]["children"][0]["metrics"]["time (ns)"] *= 3
    slower[0]["children"].append({"frame": {"name": "only_rank1_kernel", "type": "function"}, "children": [],
                                  "metrics": {"count": 2, "device_id": "0", "device_type": "CUDA", "time (ns)": 777}})
    paths = [tmp_path / "rank0.hatchet", tmp_path / "rank1.hatchet"]
    for path, tree in zip(paths, (doc, slower)):
        path.write_text(json.dumps(tree))
    return paths


def _captured_proton_pairs() -> list[list[Path]]:
    return [[d / "rank0.hatchet", d / "rank1.hatchet"] for d in sorted((ROOT / "tests" / "data").glob("*-proton"))
            if (d / "rank0.hatchet").is_file() and (d / "rank1.hatchet").is_file()]


def _check_proton(files: list[Path]) -> None:
    c = _compare(files)
    assert c.labels == ["rank0", "rank1"]
    sums = [hatchet_sums(f) for f in files]
    for kernel in set(sums[0]) | set(sums[1]):
        row = _row(c.table, kernel)
        assert [row["time_ns[rank0]"], row["time_ns[rank1]"]] == [sums[0][kernel], sums[1][kernel]]


def test_proton_two_ranks(tmp_path):
    files = _proton_ranks(tmp_path)
    _check_proton(files)
    c = _compare(files)
    assert _row(c.table, "foo0")["ratio[rank1]"] == 3.0
    only = _row(c.table, "only_rank1_kernel")
    assert (only["inputs"], only["time_ns[rank0]"], pd.isna(only["spread"])) == (1, 0, True)


@slow_after(1)
@pytest.mark.parametrize("files", _captured_proton_pairs() or [pytest.param(None, marks=pytest.mark.skip(
    reason="no tests/data/*-proton/rank{0,1}.hatchet capture"))])
def test_proton_captured_ranks(files):
    _check_proton(files)


def test_tree_diff_against_the_files(tmp_path):
    from tracelab.parsers.hatchet import tree
    from tracelab.reports.html.treediff import tree_diff

    pytest.importorskip("hatchet")
    files = _proton_ranks(tmp_path)
    rows = tree_diff(tree(files[0]), tree(files[1])).set_index("name")
    assert rows.loc["foo0", "delta_ns"] == 2 * 204800
    assert rows.loc["only_rank1_kernel", "only_in"] == "second"
    assert rows.loc["ROOT", "first_ns"] == sum(hatchet_sums(files[0]).values())
    assert rows.loc["ROOT", "delta_ns"] == sum(hatchet_sums(files[1]).values()) - sum(hatchet_sums(files[0]).values())


# ---- the reference case: four ranks, rank 1 the straggler ------------------------------------

AR = "_ZN4c10d15intra_node_comm22oneShotAllReduceKernelILj4ELb1EEEvPN3c108BFloat16EmmPPNS0_8P2pStateEPS4_mb"
FILL = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIiEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_"
# seconds under decode_one_token, copied from the four proton-viewer trees in
# ../shared/reference/000_759ba384f104f0a8.txt (a constructed tree, not a capture)
REFERENCE = {0: {AR: 2.866, FILL: 0.698, "triton_red_fused_div_mm_20": 0.462},
             1: {AR: 0.457, FILL: 1.181, "triton_red_fused_div_mm_20": 0.461, "triton_red_fused_mm_14": 0.128},
             2: {AR: 1.095, FILL: 1.014, "triton_red_fused_div_mm_20": 0.460, "triton_red_fused_mm_14": 0.139},
             3: {AR: 2.767, FILL: 0.660, "triton_red_fused_div_mm_20": 0.457}}


def _tree(kernels: dict[str, float]) -> list:
    leaves = [{"frame": {"name": k, "type": "function"}, "children": [],
               "metrics": {"count": 100, "device_id": "0", "device_type": "CUDA", "time (ns)": round(s * 1e9)}}
              for k, s in kernels.items()]
    scope = {"frame": {"name": "decode_one_token", "type": "function"}, "metrics": {}, "children": leaves}
    return [{"frame": {"name": "ROOT", "type": "function"}, "metrics": {}, "children": [scope]}, {}]


def test_cli_reference_four_ranks_names_rank1(tmp_path):
    for rank, kernels in REFERENCE.items():
        (tmp_path / f"rank{rank}.hatchet").write_text(json.dumps(_tree(kernels)))
    result = CliRunner().invoke(app, ["compare", str(tmp_path), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert [s["label"] for s in doc["stragglers"]] == ["rank1"]
    row = next(r for r in doc["rows"] if r["kernel"] == "oneShotAllReduceKernel")
    assert row["scope"] == "decode_one_token" and row["slowest"] == "rank0"
    assert [row[f"time_ns[rank{r}]"] for r in range(4)] == [2_866_000_000, 457_000_000, 1_095_000_000, 2_767_000_000]
    assert row["spread"] == pytest.approx(2.866 / 0.457)
    table = CliRunner().invoke(app, ["compare", str(tmp_path)])
    assert "straggler: rank1" in table.output


# ---- bad input: one clear line, exit 2 ---------------------------------------------------------


def _bad_inputs(tmp: Path) -> dict[str, tuple[list[str], str]]:
    (tmp / "garbage.json").write_text("not a trace")
    (tmp / "empty").mkdir()
    hatchet = str(shared_trace(PROTON_CUDA))
    return {
        "one input": ([hatchet], "needs two or more traces"),
        "missing file": ([hatchet, str(tmp / "nope.json")], "no such file"),
        "not a trace": ([hatchet, str(tmp / "garbage.json")], "not a trace"),
        "empty folder": ([hatchet, str(tmp / "empty")], "no trace files"),
        "bad --by": ([hatchet, hatchet, "--by", "stream"], "--by"),
        "bad --format": ([hatchet, hatchet, "--format", "xml"], "--format"),
        "--tree on nsys": ([hatchet, str(ROOT / "tests/data/decode-1gpu-nsys/rank0.sqlite"), "--tree"], "two proton"),
    }


@pytest.mark.parametrize("case", ["one input", "missing file", "not a trace", "empty folder", "bad --by",
                                  "bad --format", "--tree on nsys"])
@pytest.mark.slow
def test_bad_input_one_line_exit_2(tmp_path, capsys, case):
    """In this process, through the CLI's entry point (tests/test_cli_errors.py runs it as a process)."""
    args, words = _bad_inputs(tmp_path)[case]
    status, _, err = run_cli_output(capsys, "compare", *args)
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracelab: error:") and words in lines[0], err


# ---- across profilers: one workload under proton, torch and nsys ---------------------------


def _profile(source: str, names: list[str], dur_ns: list[int], scope: str):
    from tracelab.core.classify import op_classes
    from tracelab.core.schema import Profile, coerce

    kernels = [canonical(n) for n in names]
    df = coerce({"rank": 0, "source": source, "kind": "kernel", "name": names, "kernel": kernels,
                 "op_class": op_classes(pd.Series(kernels)), "scope": scope, "device": 0, "dur_ns": dur_ns})
    return Profile(df, {"rank": 0, "source": source})


def test_across_profilers_join_on_canonical_names():
    """The same two kernels as each profiler spells them (mangled in proton, demangled in
    Kineto, with `void` and arguments in nsys) and with different scope spellings."""
    from tracelab.reports.align.align import default_by

    groups = [[_profile("proton", [AR, "triton_red_fused_mm_10"], [1000, 400], "decode_one_token")],
              [_profile("torch", ["void c10d::intra_node_comm::oneShotAllReduceKernel<4u, true>(c10::BFloat16*)",
                                  "triton_red_fused_mm_10"], [1100, 380], "## decode_one_token ##")],
              [_profile("nsys", ["void c10d::intra_node_comm::oneShotAllReduceKernel<4u, true>(c10::BFloat16*, "
                                 "unsigned long)", "triton_red_fused_mm_10"], [1050, 390], "decode_one_token")]]
    inputs = label_inputs(["rank0.hatchet", "rank0.pt.trace.json", "rank0.sqlite"], groups)
    assert [i.label for i in inputs] == ["proton", "torch", "nsys"]
    assert default_by(inputs) == "kernel"
    table = comparison(inputs, default_by(inputs)).table.set_index("kernel")
    assert table.loc["oneShotAllReduceKernel", ["time_ns[proton]", "time_ns[torch]", "time_ns[nsys]"]].tolist() \
        == [1000, 1100, 1050]
    assert table.loc["oneShotAllReduceKernel", "ratio[torch]"] == pytest.approx(1.1)
    # 400 against 390 ns, no steps to measure noise: a 10 ns lead names no slowest (stats.MIN_LEAD_NS)
    assert table.loc["triton_red_fused_mm_10", "slowest"] == ""
    assert (table["inputs"] == 3).all()


# ---- input labels: the shortest path tail that tells inputs apart --------------------------


@pytest.mark.parametrize("paths, labels", [
    (["/r/a/rank0.json", "/r/a/rank1.json"], ["rank0", "rank1"]),
    (["/r/a/rank0.json", "/r/b/rank0.json"], ["a/rank0", "b/rank0"]),
    (["/r/a/x/rank0.json", "/r/b/x/rank0.json"], ["a/x/rank0", "b/x/rank0"]),
    (["/r/a/rank0.json", "/r/b/rank0.json", "/r/a/rank1.json"], ["a/rank0", "b/rank0", "rank1"]),
    (["/r/a/rank0.json", "/r/a/rank0.json"], ["rank0#1", "rank0#2"]),
    (["/r/a/rank0.json", "/r/b/rank0.json", "/r/a/rank0.json"], ["a/rank0#1", "b/rank0", "a/rank0#2"]),
    (["/r/a/rank0.json", "/r/a/rank0.json.gz"], ["rank0.json", "rank0.json.gz"]),
    (["/r/a/rank0.json", "/r/b/../a/rank0.json"], ["rank0#1", "rank0#2"]),
    (["/a/rank0.json", "/x/a/rank0.json"], ["/a/rank0", "x/a/rank0"]),
])
def test_path_labels(paths, labels):
    from tracelab.reports.ranks import path_labels

    assert path_labels([Path(p) for p in paths], [False] * len(paths)) == labels


def test_path_labels_relative_and_folders(monkeypatch):
    from tracelab.reports.ranks import path_labels

    monkeypatch.chdir(ROOT / "tests")
    run = ROOT / "tests" / "data" / "train-2gpu-torch"
    assert path_labels([Path("data/train-2gpu-torch"), run], [True, True]) == ["train-2gpu-torch#1", "train-2gpu-torch#2"]
    assert path_labels([Path("data/train-2gpu-torch/rank0.pt.trace.json.gz"), Path(".")], [False, True]) == ["rank0", "tests"]


@pytest.mark.parametrize("args, labels", [
    ([CPU_ONLY, CPU_ONLY], ["rank-34.Jul_15_10_52_41.1074#1", "rank-34.Jul_15_10_52_41.1074#2"]),
    ([ROOT / "tests/data/train-2gpu-torch"] * 2,
     ["train-2gpu-torch#1/rank0", "train-2gpu-torch#1/rank1", "train-2gpu-torch#2/rank0", "train-2gpu-torch#2/rank1"]),
    ([ROOT / "tests/data/train-2gpu-torch/rank0.pt.trace.json.gz", ROOT / "tests/data/overlap-2gpu-torch/rank0.pt.trace.json.gz"],
     ["train-2gpu-torch/rank0", "overlap-2gpu-torch/rank0"]),
])
def test_cli_compare_labels(args, labels):
    args = [shared_trace(a) if isinstance(a, str) else a for a in args]  # str: a public trace
    result = CliRunner().invoke(app, ["compare", *map(str, args), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert [i["label"] for i in json.loads(result.output)["inputs"]] == labels


@pytest.mark.slow
def test_compare_across_profilers_warns_nothing():
    """The proton run has no timestamps, so no collective skew: it adds no rows (and,
    before, an empty frame that pandas warned about concatenating)."""
    import warnings

    runs = [ROOT / "tests" / "data" / f"train-2gpu-{source}" for source in ("proton", "torch", "nsys")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = comparison(label_inputs(runs, [tracelab.load_many(r) for r in runs]), "kernel")
    launches = [kineto_sums(runs[1] / f"rank{r}.pt.trace.json.gz")[1] for r in (0, 1)]
    allreduce = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    assert c.skew["group"].tolist() == ["torch", "nsys"]
    assert c.skew["kernel"].tolist() == [allreduce, allreduce]
    assert c.skew["instances"].iloc[0] == min(n[allreduce] for n in launches)


def _ranked(rank: int):
    from tracelab.core.schema import Profile, coerce

    df = coerce({"rank": rank, "source": "torch", "kind": "kernel", "name": ["k"], "kernel": ["k"],
                 "op_class": "gemm", "scope": "", "device": 0, "dur_ns": [1000 * (rank + 1)]})
    return Profile(df, {"rank": rank, "source": "torch"})


@pytest.mark.parametrize("paths, ranks, labels", [
    (["control.json.gz", "test.json.gz"], [[3], [1]], ["rank3", "rank1"]),  # files: the order given
    (["b.json.gz", "a.json.gz"], [[2], [0]], ["rank2", "rank0"]),
    (["run/"], [[1, 0, 2]], ["rank0", "rank1", "rank2"]),  # one folder: its ranks in order
])
def test_one_run_keeps_the_first_input_as_reference(paths, ranks, labels, tmp_path):
    (tmp_path / "run").mkdir()
    groups = [[_ranked(r) for r in g] for g in ranks]
    inputs = label_inputs([tmp_path / p for p in paths], groups)
    assert [i.label for i in inputs] == labels
    result = comparison(inputs, "kernel")
    assert result.labels == labels
    assert result.totals["ratio"].iloc[0] == 1.0


def _dist(path) -> tuple[int, int, float]:
    """(rank, world size, first ts in us) straight from a Kineto file."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    info = doc["distributedInfo"]
    return info["rank"], info["world_size"], min(e["ts"] for e in doc["traceEvents"] if "ts" in e)


@pytest.mark.parametrize("sizes, starts_s, sources, why", [
    ((8, 2), (0, 735_004), "tt", "world sizes differ"), ((2, 2), (0, 3 * 3600), "tt", "3.0 hours apart"),
    ((2, 2), (0, 59), "tt", None), ((None, 2), (None, 0), "tt", None), ((128, 128), (0, 1), "tt", None),
    ((2, 2), (0, 1), "tn", "profilers differ (torch, nsys)")])
def test_one_job_by_profiler_world_size_and_start(sizes, starts_s, sources, why):
    from tracelab.reports.ranks import not_one_job
    name = {"t": "torch", "n": "nsys"}
    profiles = [tracelab.Profile(pd.DataFrame(), {"rank": r, "path": f"r{r}", "world_size": n, "source": name[src],
                                                  "trace_start_epoch_ns": None if t is None else t * 10**9})
                for r, (n, t, src) in enumerate(zip(sizes, starts_s, sources))]
    got = not_one_job(profiles)
    assert (got is None) if why is None else (why in got)


@pytest.mark.slow
def test_ranks_of_different_jobs_are_runs_not_one_run(capsys):
    """HTA's trace_diff pair is rank 3 of 8 and rank 1 of 2, 8.5 days apart (read from the files):
    taken as one run, steps and compare put them on one clock 735,003 s apart ('rank 3 waits 290.2
    ms per step at sendrecv', a collective skew of 735,003,792,218 us). They are now two runs:
    steps and whatif take each alone. HTA's two sampled ranks of one
    128-rank job stay one run."""
    control = shared_trace("hta/trace_diff/control/control.json.gz")
    test = shared_trace("hta/trace_diff/test/test.json.gz")
    (r0, n0, t0), (r1, n1, t1) = _dist(control), _dist(test)
    assert (r0, n0, r1, n1) == (3, 8, 1, 2) and (t1 - t0) / 3.6e9 > 24
    status, out, err = run_cli_output(capsys, "compare", str(control), str(test), "--format", "json")
    assert status == 0, err
    doc = json.loads(out)
    assert [i["label"] for i in doc["inputs"]] == ["control", "test"] and doc["straggler"] is None
    assert not doc["collective_skew"]
    status, out, err = run_cli_output(capsys, "steps", str(control), str(test), "--format", "json")
    assert status == 0, err  # two runs, each on its own clock: no wait across the 8.5 days
    runs = json.loads(out)["runs"]
    assert [r["input"] for r in runs] == [str(control), str(test)]
    status, out, err = run_cli_output(capsys, "whatif", str(control), str(test), "--format", "json")
    assert status == 0 and len(json.loads(out)["inputs"]) == 2, err
    a, b = shared_trace("hta/trace_filter/sampled_rank-0.json.gz"), shared_trace("hta/trace_filter/sampled_rank-1.json.gz")
    assert _dist(a)[1] == _dist(b)[1] == 128
    status, out, err = run_cli_output(capsys, "compare", str(a), str(b), "--format", "json")
    assert [i["label"] for i in json.loads(out)["inputs"]] == ["rank0", "rank1"]


def test_a_rank_neither_file_nor_name_gives_is_said_to_be_assumed():
    """HTA's rank_not_found.json.gz: distributedInfo without a rank (read from the file), a name
    without one; it is shown as rank 0 and a note says so (the breakdown said 'rank 0' as if read)."""
    path = shared_trace("hta/rank_unavailable/rank_not_found.json.gz")
    with gzip.open(path, "rt") as f:
        assert "rank" not in json.load(f)["distributedInfo"]
    p = tracelab.load(path)
    assert p.rank == 0 and p.meta.rank_from == "default (one file)"
    assert [n.code for n in p.meta.notes] == ["rank_assumed"]
    assert "gives its rank: shown as rank 0" in p.meta.notes[0].text
    named = tracelab.load(shared_trace("hta/trace_filter/sampled_rank-1.json.gz"))
    assert named.rank == 1 and not any(n.code == "rank_assumed" for n in named.meta.notes)


def _gpu_ns(path) -> tuple[int, int]:
    """(kernel ns, kernel + memcpy + memset ns) summed straight from a Kineto file."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    dur = lambda cats: sum(round(e["dur"] * 1000) for e in events if e.get("cat") in cats)  # noqa: E731
    return dur(("kernel",)), dur(("kernel", "gpu_memcpy", "gpu_memset"))


@pytest.mark.slow  # about 1 s of CPU here: the default run stays under 90 s
def test_breakdown_and_roofline_take_two_runs_that_share_a_rank(capsys, tmp_path):
    """A 2-rank run folder and a 1-rank file both hold rank 0: breakdown and roofline refused them
    ('resolves to rank 0, as does ...; pass ranks explicitly') though every command takes any mix
    of run folders and files; each input's ranks now come labelled with it, their figures those
    of the files alone. A broken file beside them is still one line naming it."""
    folder, file = DATA / "decode-2gpu-torch", DATA / "decode-1gpu-torch" / "rank0.pt.trace.json.gz"
    status, out, err = run_cli_output(capsys, "breakdown", str(folder), str(file), "--format", "json")
    assert status == 0, err
    got = {(r["input"], r["rank"]): r["kernel_ns"] for r in json.loads(out)["summary"]}
    want = {(str(folder), r): _gpu_ns(folder / f"rank{r}.pt.trace.json.gz")[0] for r in (0, 1)}
    assert got == {**want, (str(file), 0): _gpu_ns(file)[0]}
    status, out, err = run_cli_output(capsys, "roofline", str(folder), str(file), "--format", "json")
    assert status == 0, err
    cover = {(c["input"], c["rank"]): c["gpu_ns"] for c in json.loads(out)["coverage"]}
    assert cover[(str(file), 0)] == _gpu_ns(file)[1] and cover[(str(folder), 1)] == _gpu_ns(folder / "rank1.pt.trace.json.gz")[1]
    status, out, err = run_cli_output(capsys, "breakdown", str(folder), str(file))
    assert status == 0 and f"{folder}: rank 1 (torch" in " ".join(out.split()), err
    status, out, err = run_cli_output(capsys, "roofline", str(folder), str(file), "--format", "csv")
    assert status == 0 and out.startswith("input,rank,kernel,") and f"\n{file},0," in out, err
    status, out, err = run_cli_output(capsys, "steps", str(folder), str(file), "--format", "json")  # one run each
    assert status == 0 and [r["input"] for r in json.loads(out)["runs"]] == [str(folder), str(file)], err
    broken = tmp_path / "rank0.pt.trace.json"
    broken.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur"')
    status, out, err = run_cli_output(capsys, "breakdown", str(folder), str(broken))
    assert status == 2 and len(err.strip().splitlines()) == 1 and str(broken) in err
