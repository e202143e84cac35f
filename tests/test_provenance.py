"""Inductor kernels attributed to modules through the map a compiled run wrote (issue 24):
tests/data/decode-compile-cpu-torch against a walk of its raw JSON trace and map written here."""
from __future__ import annotations

import gzip
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

import tracelab
from helpers import strict_json
from tracelab.ingest import provenance
from tracelab.core.errors import TraceFormatError
from tracelab.reports.breakdown.breakdown import breakdown, module_type

RUN = Path(__file__).parent / "data" / "decode-compile-cpu-torch"


def _deepest_majority(modules: dict[str, int]) -> str:
    """Brute force: every prefix of every path, the nodes under it; the longest holding > half."""
    total = sum(modules.values())
    prefixes = {".".join(p.split(".")[:d]) for p in modules for d in range(len(p.split(".")) + 1) if p} | {""}
    under = {q: sum(n for p, n in modules.items() if q == "" or p == q or p.startswith(q + "."))
             for q in prefixes}
    return max((q for q, n in under.items() if 2 * n > total), key=lambda q: len(q.split(".")) if q else 0)


def _walk() -> Counter:
    """module -> rows: each `graph_N_<kernel>` operator of the trace, in time order, takes the
    module of its kernel's (i mod k)-th call in the map."""
    graphs = json.loads((RUN / "rank0.provenance.json").read_text())["graphs"]
    assert len(graphs) == 1
    calls: dict[str, list[str]] = {}
    for k in graphs[0]:
        calls.setdefault(k["name"], []).append(_deepest_majority(k["modules"]))
    events = json.load(gzip.open(RUN / "rank0.pt.trace.json.gz"))["traceEvents"]
    ops = sorted((e for e in events if e.get("cat") == "cpu_op" and re.match(r"graph_\d+_", e["name"])),
                 key=lambda e: e["ts"])
    seen: Counter = Counter()
    out: Counter = Counter()
    for e in ops:
        name = re.sub(r"^graph_\d+_", "", e["name"])
        out[calls[name][seen[name] % len(calls[name])]] += 1
        seen[name] += 1
    return out


def test_kernels_per_module_equal_a_raw_walk():
    events = tracelab.load(RUN / "rank0.pt.trace.json.gz").events
    fused = events[events["name"].str.match(r"graph_\d+_")]
    assert Counter(fused["module"]) == _walk()


def test_layers_have_equal_counts_and_the_sum_is_kept():
    profile = tracelab.load(RUN / "rank0.pt.trace.json.gz")
    events = profile.events
    assert profile.meta.provenance.endswith("rank0.provenance.json") and profile.meta.notes == []
    compiled = events[events["module"] != ""]
    linear = compiled["module"].str.extract(r"^layers\.(\d+)\.\w+\.(wqkv|wo|w1|w2|w3)$").dropna()
    per_layer = linear.groupby(0)[1].value_counts().unstack()  # layer x projection: calls
    tokens = json.loads((RUN / "run.json").read_text())["config"]["new_tokens"] - 1
    assert per_layer.shape == (2, 5) and (per_layer == tokens).all().all()
    per_type = breakdown(events, by="module_type")
    assert per_type["total_ns"].sum() == events["dur_ns"].sum()
    assert per_type["count"].sum() == len(events)
    wqkv = events[events["module"].str.fullmatch(r"layers\.\d\.attention\.wqkv")]
    assert set(wqkv["name"]) == {"aten::mm"}  # a library call, placed by call order
    assert events.loc[wqkv.index, "scope"].eq(wqkv["module"].radd("decode_one_token/")).all()


@pytest.mark.parametrize("modules, owner", [
    ({"a.b": 3, "a.c": 1}, "a.b"),
    ({"a.b": 1, "a.c": 1}, "a"),
    ({"x": 1, "y": 1}, ""),
    ({"layers.0.ffn_norm": 6, "layers.0": 1, "tok_embeddings": 1, "layers.0.attention.wo": 1}, "layers.0.ffn_norm"),
    ({"": 4}, ""),
    ({}, ""),
])
def test_owner(modules, owner):
    assert provenance.owner(modules) == owner == (_deepest_majority(modules) if modules else "")


@pytest.mark.parametrize("path, kind", [("layers.3.attention", "layers.*.attention"), ("", "(no module)"),
                                        ("0.mlp", "*.mlp"), ("layers.12", "layers.*"), ("norm", "norm")])
def test_module_type(path, kind):
    assert module_type(pd.Series([path])).tolist() == [kind]


def _copy(tmp_path: Path, text: str | None = None) -> Path:
    for f in ("rank0.pt.trace.json.gz", "rank0.provenance.json"):
        shutil.copy(RUN / f, tmp_path / f)
    if text is not None:
        (tmp_path / "rank0.provenance.json").write_text(text)
    return tmp_path


@pytest.mark.parametrize("text", ["{", "[]", '{"graphs": [[{"name": "x"}]]}', '{"graphs": 3}'])
def test_a_broken_map_names_the_file(tmp_path, text):
    with pytest.raises(TraceFormatError, match="rank0.provenance.json: not a tracelab provenance file"):
        tracelab.load(_copy(tmp_path, text) / "rank0.pt.trace.json.gz")


def test_cli_one_line_for_a_broken_map(tmp_path, capsys):
    from helpers import run_cli_output

    status, _, err = run_cli_output(capsys, "breakdown", str(_copy(tmp_path, "{")))  # in this process
    assert status == 2 and err.count("\n") == 1 and "provenance" in err


def test_a_partial_run_of_the_graph_is_noted(tmp_path):
    data = json.loads((RUN / "rank0.provenance.json").read_text())
    name = next(k["name"] for k in data["graphs"][0]
                if sum(j["name"] == k["name"] for j in data["graphs"][0]) > 1)
    data["graphs"][0].append(dict(next(k for k in data["graphs"][0] if k["name"] == name)))  # one call more
    profile = tracelab.load(_copy(tmp_path, json.dumps(data)) / "rank0.pt.trace.json.gz")
    calls = sum(k["name"] == name for k in data["graphs"][0])
    assert len(profile.meta.notes) == 1
    assert profile.meta.notes[0].values["calls_per_graph"] == calls
    assert re.search(rf"ran \d+ times, not a multiple of its {calls} calls per compiled graph", profile.meta.notes[0].text)


def test_the_map_is_not_taken_for_a_trace():
    from tracelab.ingest.loading import expand
    assert [f.name for f in expand([RUN])] == ["rank0.pt.trace.json.gz"]


def test_cli_breakdown_by_module_type_is_strict_json(capsys):
    from tracelab import cli
    with pytest.raises(SystemExit) as done:
        cli.app(["breakdown", str(RUN), "--by", "module_type", "--format", "json", "--top", "0"])
    assert done.value.code == 0
    rows = strict_json(capsys.readouterr().out)
    assert "layers.*.attention.wqkv" in json.dumps(rows)


@pytest.mark.parametrize("stack_path, path", [
    ("L['model'].layers[3].attention", "layers.3.attention"),
    ("L['model']._modules['layers']._modules['3'].feed_forward.w1", "layers.3.feed_forward.w1"),
    ("L['self'].norm", "norm"),
    ("L['model']", ""),
])
def test_module_paths_from_dynamo_stacks(stack_path, path):
    from tracelab.workloads.provenance import innermost_module
    assert innermost_module({"key": (stack_path, type("Attention", (), {}))}) == (path, "Attention")
    assert innermost_module({}) == ("", "")


@pytest.mark.parametrize("backend", ["torch", "nsys", "proton"])
def test_gpu_compiled_decode_layers_have_equal_kernels(backend):
    """H100 captures of `tracelab run decode --compile` with the map (tests/data/decode-compile-prov-1gpu-*):
    the two layers get the same kernel count, and attributed + unattributed rows are the whole trace."""
    import tracelab

    from helpers import DATA

    folder = DATA / f"decode-compile-prov-1gpu-{backend}"
    events = tracelab.load_many(folder)[0].events
    layer = events["module"].str.extract(r"^layers\.(\d+)")[0]
    per_layer = events.assign(layer=layer).dropna(subset=["layer"]).groupby("layer")["count"].sum()
    assert len(per_layer) == 2 and per_layer.iloc[0] == per_layer.iloc[1] > 0
    attributed = events["module"] != ""
    assert events.loc[attributed, "dur_ns"].sum() + events.loc[~attributed, "dur_ns"].sum() == events["dur_ns"].sum()
