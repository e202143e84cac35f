"""One door (tracelab/session.py): every command opens its inputs through Session.open, groups them
by one rule and ends on its findings, on any mix of inputs: one trace, rank files of one run,
traced runs beside a run under backend none, a trace, an nsys export and a memory snapshot of one
job, a run folder holding a snapshot, a folder of many ranks; broken inputs beside them."""
from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

from malformed import run_cli_output
from tracelab.ingest.session import NONE, SNAPSHOT, TRACES, Session

DATA = Path(__file__).parent / "data"
TORCH, NSYS, NONE_RUN = DATA / "decode-2gpu-torch", DATA / "decode-2gpu-nsys", DATA / "decode-1gpu-steps-none"


def _snapshot_bytes() -> bytes:
    """A memory snapshot pickle as torch.cuda.memory._snapshot() lays it out (tests/test_memory.py)."""
    from helpers import memory_snapshot

    return pickle.dumps(memory_snapshot(), protocol=4)


@pytest.fixture(scope="module")
def mixes(tmp_path_factory) -> dict[str, list[str]]:
    root = tmp_path_factory.mktemp("mixes")
    (root / "rank0.memory.pickle").write_bytes(_snapshot_bytes())
    run = root / "run-with-snapshot"
    shutil.copytree(TORCH, run)
    (run / "rank0.memory.pickle").write_bytes(_snapshot_bytes())
    return {
        "one trace": [str(TORCH / "rank0.pt.trace.json.gz")],
        "rank files": [str(TORCH / "rank0.pt.trace.json.gz"), str(TORCH / "rank1.pt.trace.json.gz")],
        "runs and none": [str(TORCH), str(NSYS), str(NONE_RUN)],
        "profilers and snapshot": [str(TORCH / "rank0.pt.trace.json.gz"), str(NSYS / "rank0.sqlite"),
                                   str(root / "rank0.memory.pickle")],
        "run with snapshot": [str(run)],
    }


# mix -> (each run's kind, the traced runs' input labels): the one grouping every command sees
GROUPING = {
    "one trace": ([TRACES], ["rank0"]),
    "rank files": ([TRACES], ["rank0", "rank1"]),
    "runs and none": ([TRACES, TRACES, NONE], ["torch/rank0", "torch/rank1", "nsys/rank0", "nsys/rank1"]),
    "profilers and snapshot": ([TRACES, TRACES, SNAPSHOT], ["torch", "nsys"]),
    "run with snapshot": ([TRACES, SNAPSHOT], ["rank0", "rank1"]),
}


@pytest.mark.parametrize("mix", list(GROUPING))
def test_one_grouping(mixes, mix):
    session = Session.open(mixes[mix], digests=())
    kinds, labels = GROUPING[mix]
    assert [r.kind for r in session.runs] == kinds
    assert [i.label for i in session.inputs] == labels
    ranks = [p.rank for r in session.of_kind(TRACES) for p in r.profiles]
    assert len(ranks) == len(labels)


def test_a_snapshot_given_twice_is_noted_once(mixes):
    """A run folder's own snapshot, also given as a file (its path spelled another way): one note."""
    run = mixes["run with snapshot"][0]
    session = Session.open([run + "/", run + "//rank0.memory.pickle"], digests=())
    assert [r.kind for r in session.runs].count(SNAPSHOT) == 2
    session.usable("whatif")
    where = [n.where for n in session.notes if n.code == "snapshot_not_read"]
    assert where == [(str(Path(run) / "rank0.memory.pickle"),)]


def test_none_run_read_for_its_run_json(mixes):
    session = Session.open(mixes["runs and none"], digests=())
    none = session.of_kind(NONE)[0]
    assert none.profiles == [] and none.info == json.loads((NONE_RUN / "run.json").read_text()) | none.info
    assert [name for name, _ in session.run_infos] == [TORCH.name, NSYS.name, NONE_RUN.name]


@pytest.mark.pool
def test_each_rank_parsed_in_a_worker_pool_is_announced_in_order():
    """on_loaded (the command's progress bar) hears of each file as its rank comes back from the
    worker processes that parse the ranks (one per rank where the cores allow), in the files' order."""
    files = sorted((DATA / "gloo-2cpu-equal").glob("rank*.pt.trace.json.gz"))
    loaded: list[str] = []
    session = Session.open([str(f) for f in files], digests=(), on_loaded=lambda f: loaded.append(str(f)))
    assert loaded == [str(f) for f in files] and [p.rank for p in session.profiles] == [0, 1]


# command -> its arguments besides the paths; what it writes goes under the test's folder
COMMANDS = {
    "breakdown": [], "roofline": [], "compare": [], "steps": [], "idle": [], "whatif": [], "memory": [],
    "report": ["-o", "{out}/r.html", "--force"], "export perfetto": ["-o", "{out}/m.json", "--force"],
    "export parquet": ["-o", "{out}/ds", "--force"],
}
TABLES = ("breakdown", "roofline", "compare", "steps", "idle", "whatif", "memory")  # end on their findings
# what a command cannot do with a mix: one line on stderr, exit 2
REFUSED = {("compare", "one trace"): "needs two or more traces or ranks",
           ("export parquet", "runs and none"): "takes the ranks of one job",
           ("export parquet", "profilers and snapshot"): "takes the ranks of one job"}
FAST = ("profilers and snapshot",)  # the mix the fast run covers; all of them under -m slow


def _cases():
    for command in COMMANDS:
        for mix in GROUPING:
            marks = () if mix in FAST else (pytest.mark.slow,)
            yield pytest.param(command, mix, marks=marks, id=f"{command}-{mix}")


@pytest.mark.parametrize(("command", "mix"), list(_cases()))
def test_every_command_every_mix(mixes, tmp_path, capsys, command, mix):
    args = [a.format(out=tmp_path) for a in COMMANDS[command]]
    status, out, err = run_cli_output(capsys, *command.split(), *mixes[mix], *args)
    if (command, mix) in REFUSED:
        assert status == 2 and REFUSED[command, mix] in err and len(err.strip().splitlines()) == 1
        return
    assert status == 0, err
    assert "Traceback" not in err
    if SNAPSHOT in GROUPING[mix][0] and command != "memory":
        assert "a memory snapshot, which `tracelab" in err  # said, not skipped without a word
    if command in TABLES:
        _ends_on_findings(out)


def _ends_on_findings(out: str) -> None:
    """The output's last block is the findings, numbered, or one line saying why there are none."""
    lines = out.rstrip("\n").splitlines()
    at = max(n for n, line in enumerate(lines) if line.startswith("findings:"))
    assert lines[at] == "findings:" and lines[at + 1:] or lines[at].startswith("findings: none (") and at == len(lines) - 1
    assert all(line.startswith(f"  {n}. ") for n, line in enumerate(lines[at + 1:], 1))


@pytest.mark.parametrize("command", ["idle", "memory", "whatif", "roofline"])
def test_json_stays_pure(mixes, capsys, command):
    status, out, err = run_cli_output(capsys, command, *mixes["runs and none"], "--format", "json")
    assert status == 0, err
    json.loads(out)  # no findings after it


def test_memory_reads_a_snapshot_beside_its_trace(mixes, capsys):
    status, out, _ = run_cli_output(capsys, "memory", *mixes["profilers and snapshot"], "--format", "json")
    assert status == 0
    mib = 2**20
    peaks = [r["peak_allocated_bytes"] for r in json.loads(out)["steps"]]
    assert 14 * mib in peaks  # the snapshot's own peak (tests/test_memory.py replays it by hand)


def test_steps_of_several_runs_one_after_another(mixes, capsys):
    status, out, err = run_cli_output(capsys, "steps", *mixes["runs and none"], "--format", "json")
    assert status == 0, err
    doc = json.loads(out)
    assert [r["input"] for r in doc["runs"]] == [str(TORCH), str(NSYS)]
    assert all(set(run) >= {"steps", "straggler"} for run in doc["runs"])  # each run's own document


def test_rank_files_one_run_in_every_command(mixes, capsys):
    """Two rank files of one run: idle reads them as one run, as breakdown does (one `input`)."""
    status, out, _ = run_cli_output(capsys, "idle", *mixes["rank files"], "--format", "json")
    assert status == 0
    steps = json.loads(out)["steps"]
    assert "input" not in steps[0] and {r["rank"] for r in steps} == {0, 1}


# ---- broken inputs beside good ones ---------------------------------------------------------------

def test_broken_beside_good(tmp_path, capsys):
    bad = tmp_path / "rank1.pt.trace.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00broken")
    status, out, err = run_cli_output(capsys, "breakdown", str(TORCH / "rank0.pt.trace.json.gz"), str(bad))
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1 and str(bad) in err


def test_a_pickle_that_is_no_snapshot(tmp_path, capsys):
    bad = tmp_path / "rank0.memory.pickle"
    bad.write_bytes(pickle.dumps([1, 2, 3], protocol=4))
    status, _, err = run_cli_output(capsys, "memory", str(bad))
    assert status == 2 and "not a PyTorch memory snapshot" in err and len(err.strip().splitlines()) == 1


def test_only_runs_under_none(capsys):
    status, _, err = run_cli_output(capsys, "idle", str(NONE_RUN))
    assert status == 2 and "no trace files" in err and len(err.strip().splitlines()) == 1


def test_a_snapshot_alone_steps_says_why(mixes, capsys):
    status, _, err = run_cli_output(capsys, "steps", mixes["profilers and snapshot"][2])
    assert status == 2 and len(err.strip().splitlines()) == 1 and "none of its inputs" in err


MANY = 24  # ranks: past every many-ranks switch (16), and rank10 on sorted after rank9, not before rank2


@pytest.mark.slow
def test_many_ranks_one_run(tmp_path, capsys, monkeypatch):
    """A folder of MANY rank files of one job (benchmarks/make_ranks.py: copies of a real rank, each
    saying its own rank of MANY): one run, MANY inputs in rank order, in every command that ends on findings."""
    import subprocess
    import sys

    from tracelab.ingest import cache
    from tracelab.reports.html import figures
    from tracelab.reports.idle import idle_text
    from tracelab.reports.memory import memory_text
    from tracelab.reports.steps import steps_text
    from tracelab.reports.whatif import findings

    # tables of ranks become spreads, and the what-if replays no job, past these: so past each, as a large job is
    assert MANY > max(figures.MANY_RANKS, idle_text.MANY_RANKS, memory_text.MANY_RANKS, steps_text.MANY_RANKS, findings.MAX_RANKS)
    folder = tmp_path / "ranks"
    make = Path(__file__).resolve().parents[1] / "benchmarks" / "make_ranks.py"
    subprocess.run([sys.executable, str(make), str(folder), "--ranks", str(MANY), "--src",
                    str(TORCH / "rank0.pt.trace.json.gz"), str(TORCH / "rank1.pt.trace.json.gz")], check=True,
                   capture_output=True)
    # the ranks are parsed and digested by the first command, then read from the run's caches by
    # the others (as tracelab reads a large trace again): the rule here is the grouping and findings
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    session = Session.open([str(folder)], digests=())
    assert len(session.runs) == 1 and [i.label for i in session.inputs] == [f"rank{r}" for r in range(MANY)]
    for command in TABLES:  # compare: the MANY ranks side by side
        status, out, err = run_cli_output(capsys, command, str(folder))
        assert status == 0, (command, err)
        _ends_on_findings(out)


# ---- a rank file beside its own run folder ----------------------------------------------------------

@pytest.mark.parametrize("command", [  # one grouping rule: steps and idle again under -m slow
    pytest.param("steps", marks=pytest.mark.slow), "breakdown", pytest.param("idle", marks=pytest.mark.slow), "compare"])
def test_a_rank_file_beside_its_own_run_folder(capsys, command):
    """The file is read on its own and as a rank of its folder (a comparison of a run with one of
    its ranks); their labels, equal both ways, are numbered in the order given, never a traceback."""
    status, out, err = run_cli_output(capsys, command, str(TORCH / "rank0.pt.trace.json.gz"),
                                      str(NSYS / "rank1.sqlite"), str(TORCH), "--format", "json")
    assert status == 0, err
    assert "Traceback" not in err
    doc = json.loads(out)
    if command == "compare":
        labels = [i["label"] for i in doc["inputs"]]
        assert len(labels) == len(set(labels)) == 1 + 1 + 2  # the file, nsys' rank 1, the folder's two ranks
        assert sum(label.endswith("#1") or label.endswith("#2") for label in labels) == 2
