"""The findings (reports/findings/findings.py): what each source states on real captures, checked
against numbers read straight from the JSON and run.json; what it leaves out on captures
that cannot support it; ranking and the cap; the same sentences on the terminal and in
the report."""
from __future__ import annotations

import gzip
import html
import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tracelab.cli import app
from tracelab.cli.html_report import write_report
from tracelab.ingest.session import Session
from tracelab.reports.findings import findings as F
from helpers import slow_after

DATA = Path(__file__).parent / "data"
LATE = DATA / "ddp-2gpu-late-torch"
TRAIN4 = [DATA / f"train-1gpu-steps-{b}" for b in ("none", "torch", "nsys", "proton")]


def _found(paths: list[Path]) -> list[F.Finding]:
    paths = [str(p) for p in paths]
    return Session.open(paths).findings()


def _evidence(paths: list[Path]) -> F.Evidence:
    from tracelab.reports.align.align import comparison

    session = Session.open([str(p) for p in paths])
    return F.Evidence(session.inputs, comparison(session.inputs, "kernel"), session.run_infos)


def _kernels(path: Path, cats: tuple[str, ...] = ("kernel",)) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("cat") in cats and e.get("ph") == "X"]


def _union_us(events: list[dict]) -> float:
    busy, end = 0.0, -np.inf
    for start, stop in sorted((e["ts"], e["ts"] + e["dur"]) for e in events):
        if stop > end:
            busy += stop - max(start, end)
            end = stop
    return busy


@pytest.fixture(scope="module")
def late() -> list[F.Finding]:
    return _found([LATE])


@pytest.mark.slow
def test_the_late_rank_is_named_with_the_verdicts_numbers(late):
    (straggler,) = [f for f in late if f.section == "steps"]
    v = straggler.evidence["verdict"]
    assert v["pattern"] == "straggler" and v["rank"] == 1  # the capture's README: rank 1 given extra work
    assert straggler.text.startswith(f"rank 1 is the straggler, {F.duration(v['lateness_ns'])} late per step on average "
                                     f"(last in {v['gated_by_rank'][1]} of {v['gated_units']} steps): ")
    assert "(extra_work)" in straggler.text  # the scope that made it late


def test_exposed_communication_from_the_json(late):
    """rank 0's NCCL kernels, summed from the raw JSON, all exposed (nothing else runs beside them)."""
    (exposed,) = [f for f in late if "exposed" in f.text]
    nccl_us = sum(e["dur"] for e in _kernels(LATE / "rank0.pt.trace.json.gz") if e["name"].startswith("nccl"))
    assert exposed.evidence["rank"] == 0 and exposed.evidence["comm_ns"] == pytest.approx(nccl_us * 1e3, abs=1e3)
    assert f"100% of its communication is exposed, {nccl_us / 1e3:.1f} ms" in exposed.text
    assert re.search(r"rank 0 waits \d+\.\d\d ms per step at allreduce", exposed.text)


def test_idle_share_from_the_json():
    """The idle share alone (what stands where no step gives idle by cause), from the JSON."""
    (idle,) = F.idle_share_findings(_evidence([LATE]))
    kernels = _kernels(LATE / "rank0.pt.trace.json.gz", ("kernel", "gpu_memcpy", "gpu_memset"))
    span_us = max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)
    share = 1 - _union_us(kernels) / span_us
    assert idle.evidence["runs"][""]["rank"] == 0 and f"is idle {100 * share:.0f}% of its {span_us / 1e3:.1f} ms span" in idle.text


@slow_after(1)
@pytest.mark.parametrize("run", ["gloo-2cpu-equal", "ddp-2gpu-equal-nsys", "ddp-2gpu-alternating-torch"])
def test_no_straggler_where_the_verdict_names_none(run):
    """Equal work, and a late rank that alternates where the verdict finds no pattern: nothing is
    said of a straggler or an alternation (left out, not hedged)."""
    found = _found([DATA / run])
    assert not [f for f in found if f.section == "steps"]
    assert not any("straggler" in f.text or "alternates" in f.text for f in found)


def test_an_alternation_is_stated_with_its_counts():
    (alt,) = [f for f in _found([DATA / "tp-2gpu-alternating-torch"]) if f.section == "steps"]
    v = alt.evidence["verdict"]
    assert v["pattern"] == "alternating" and "the last rank alternates between consecutive steps" in alt.text
    assert f"rank 0 in {v['gated_by_rank'][0]}" in alt.text and f"of {v['gated_units']})" in alt.text


@pytest.mark.slow
def test_profiler_cost_from_run_json():
    """One sentence for the runs against one run under none whose cost the medians' test puts
    beyond the noise (runs.cost_of's within_noise, not decided here), each change as the
    medians of the step times in run.json give it, the largest first."""
    from tracelab.reports.runtable import cost_of

    infos = [(p.name, json.loads((p / "run.json").read_text())) for p in TRAIN4]
    beyond = [name for name, info in infos[1:] if not cost_of(info, infos)["within_noise"]]
    (cost,) = [f for f in _found(TRAIN4) if f.section == "runs"]
    assert beyond and set(cost.evidence["runs"]) == set(beyond) and cost.evidence["baseline"] == TRAIN4[0].name
    none = np.median(infos[0][1]["results"]["0"]["rows"][0]["step_ms"])
    changes = {}
    for name, info in infos[1:]:
        mine = np.median(info["results"]["0"]["rows"][0]["step_ms"])
        changes[name] = mine / none - 1
        assert (f"{100 * changes[name]:+.1f}% ({mine:,.4g} ms, {name})" in cost.text) == (name in beyond)
    order = [cost.text.index(name) for name in sorted(beyond, key=lambda n: -abs(changes[n]))]
    assert order == sorted(order) and f"under none ({none:,.4g} ms, " in cost.text


@pytest.mark.slow
def test_no_difference_claimed_where_profilers_agree():
    """torch, nsys and proton of one job: every kernel within the step-to-step noise, so no
    difference is stated (compare's `slowest` is empty on every row)."""
    assert not [f for f in _found(TRAIN4) if f.section == "comparison"]


@pytest.mark.slow
def test_no_difference_claimed_between_different_workloads_or_configs():
    """A tiny fp32 model and a small bf16 one (run.json: size, dtype, batch differ): their
    kernels differ because the programs do; that is no finding about either (issue 28)."""
    runs = [DATA / "idle-1gpu-small-torch", DATA / "idle-1gpu-large-torch"]
    assert not [f for f in _found(runs) if f.section == "comparison"]
    assert not [f for f in _found([DATA / "train-small-1gpu-torch", DATA / "train-1gpu-steps-torch"])
                if f.section == "comparison"]


def _as_one_config(tmp_path: Path, runs: list[Path]) -> list[Path]:
    """Copies of run folders whose run.json all state the last one's config: the difference
    rule admits them, and the arithmetic below is checked on their real traces."""
    import shutil
    config = json.loads((runs[-1] / "run.json").read_text())
    out = []
    for run in runs:
        copy = tmp_path / run.name
        shutil.copytree(run, copy)
        info = json.loads((copy / "run.json").read_text())
        (copy / "run.json").write_text(json.dumps({**info, **{k: config[k] for k in ("workload", "config")}}))
        out.append(copy)
    return out


@pytest.mark.slow  # over 1.2 s of CPU here: the default run stays under 90 s
def test_a_difference_between_runs_per_call_from_the_json(tmp_path):
    """Two runs of one config (4 and 3 steps: compared per call): the kernel whose difference
    costs most, its time per call in each as the raw JSON's kernel durations and counts give it."""
    runs = _as_one_config(tmp_path, [DATA / "idle-1gpu-small-torch", DATA / "idle-1gpu-large-torch"])
    (diff,) = [f for f in _found(runs) if f.section == "comparison"]
    per_call, calls = [], 0
    for run in runs:
        durs = [e["dur"] for e in _kernels(run / "rank0.pt.trace.json.gz") if diff.evidence["kernel"] in e["name"]]
        per_call.append(sum(durs) / len(durs))
        calls = len(durs)
    assert diff.evidence["kernel"] == "vectorized_elementwise_kernel" and "per call" in diff.evidence["basis"]
    assert diff.evidence["delta_ns"] == pytest.approx((per_call[1] - per_call[0]) * 1e3, rel=1e-3)
    # two runs of one config and profiler are repeats: their difference is said as drift between them
    assert diff.text.startswith("between repeats of one config, no change made: vectorized_elementwise_kernel takes "
                                f"{per_call[1] - per_call[0]:,.1f} us more per call in idle-1gpu-large-torch than in "
                                "idle-1gpu-small-torch")
    assert f"over its {calls:,} calls there" in diff.text


def test_ranked_by_time_at_stake_and_capped():
    made = [F.Finding(f"finding {n}", n * 1000, "runs") for n in range(12)]
    found = F.findings(None, sources=(lambda ev: made[:6], lambda ev: made[6:]))
    assert [f.at_stake_ns for f in found] == [11000, 10000, 9000, 8000, 7000, 6000, 5000, 4000]
    assert F.lines(found)[0] == "findings:" and F.lines(found)[1] == "  1. finding 11" and F.lines([]) == [f"findings: none ({F.NONE})"]


def _terminal(command: str, paths: list[Path]) -> list[str]:
    result = CliRunner().invoke(app, [command, *map(str, paths)])
    assert result.exit_code == 0, result.output
    tail = result.output.split("\nfindings:\n", 1)[1]
    return [re.sub(r"^ +\d+\. ", "", line) for line in tail.splitlines() if line.strip()]


def _page(paths: list[Path], tmp_path: Path) -> list[str]:
    text = write_report([str(p) for p in paths], tmp_path / "r.html").read_text()
    block = text.split('<section id="findings">', 1)[1].split("</section>", 1)[0]
    return [html.unescape(t) for t in re.findall(r'<li><a href="#[\w-]+">(.*?)</a></li>', block)]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["steps", "breakdown", "compare"])
def test_the_terminal_says_what_the_report_says(command, tmp_path):
    page = _page([LATE], tmp_path)
    assert len(page) >= 3 and _terminal(command, [LATE]) == page  # the straggler, idle and exposed findings, and the fixes


@pytest.mark.slow
def test_the_terminal_says_what_the_report_says_of_four_profilers(tmp_path):
    page = _page(TRAIN4, tmp_path)
    assert page and _terminal("compare", TRAIN4) == page


def test_json_output_stays_json():
    result = CliRunner().invoke(app, ["steps", str(LATE), "--format", "json"])
    assert result.exit_code == 0 and json.loads(result.output) and "findings:" not in result.output


@pytest.mark.slow
@pytest.mark.parametrize("paths, command", [([LATE], "steps"), (TRAIN4, "compare")], ids=["late", "profilers"])
def test_findings_on_top_linked_and_rendered_in_chromium(paths, command, chromium, tmp_path):
    """In headless Chromium: the findings come first, each links to a section that exists, every
    plot renders, no console message, no request; and they are the terminal's sentences."""
    from helpers import ARTIFACTS, check_rendered, open_page

    out = write_report([str(p) for p in paths], tmp_path / "r.html")
    dom = check_rendered(chromium, out)["dom"]
    block = dom.split('<section id="findings">', 1)[1].split("</section>", 1)[0]
    assert dom.index('<section id="findings">') < dom.index('<h2 id="runs">')
    links = re.findall(r'<li><a href="#([\w-]+)">(.*?)</a></li>', block)
    assert links and all(f'id="{target}"' in dom for target, _ in links)
    assert [html.unescape(text) for _, text in links] == _terminal(command, paths)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"findings-{paths[0].name}.png"
    open_page(chromium, out, screenshot=shot)
    assert shot.stat().st_size > 10_000


@pytest.mark.slow
def test_charts_of_many_ranks_draw_the_late_rank_beside_the_first(tmp_path, twenty_late_ranks):
    """20 ranks (the late DDP capture's waiting rank, its late rank as rank 7): every chart with a
    bar, column or box per rank draws at most 16 of them, rank 7 among them, and says so; the
    findings name rank 7."""
    text = write_report([str(twenty_late_ranks)], tmp_path / "r.html").read_text()
    figs = json.loads(text.split('id="tracelab-figures">', 1)[1].split("</script>", 1)[0])
    per_rank = 0
    for fig in figs.values():
        for trace in fig["data"]:
            names = [str(x) for x in trace.get("x", []) if str(x).startswith("rank")]
            if len(set(names)) > 2:
                per_rank += 1
                assert len(set(names)) <= 16 and "rank7" in {n.replace(" ", "") for n in names}
    assert per_rank >= 4  # op classes, heatmap, overlap, step x rank heatmaps
    assert "16 of 20 inputs drawn" in text and "16 of 20 ranks" in text
    assert text.count("work known for") == 1 and "20 inputs: work known for" in text  # the roofline's coverage: one line
    roofline = text.split('<h2 id="roofline">', 1)[1].split("<h2", 1)[0]
    assert roofline.count("<tr>") <= 31  # its table: the drawn ranks' worst rows, not ten per rank
    assert "rank 7 is the straggler" in text.split('<section id="findings">', 1)[1].split("</section>", 1)[0]
