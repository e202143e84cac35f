"""Per-rank digests that share what they build (issue 30, second pass): the what-if graph made
once per rank for the path_bounds and whatif digests, the step rows once for who-waits and
idle, and the numpy rewrites of pandas steps, each against the plain formulation it replaced."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracelab
from tracelab.reports.whatif.profiler_cost import config_of
from tracelab.reports import verdicts
from tracelab.reports.align.digests import BY, SUM_KEYS, rank_sums
from tracelab.reports.roofs import trace_device
from tracelab.reports.ranks import RANK_DIGESTS
from tracelab.reports.stats import noise
from tracelab.reports.timeline import stalls, steps as S
from tracelab.reports.timeline.intervals import timed
from tracelab.reports.whatif import bound, nodes, regions
from tracelab.core.schema import RankData, kind_mask
from helpers import slow_after

DATA = Path(__file__).parent / "data"
CASES = ["train-1gpu-steps-torch", "idle-sync-1gpu-nsys", "ddp-2gpu-late-torch", "gloo-2cpu-late"]


def _fields_equal(a: nodes.RankGraph, b: nodes.RankGraph) -> bool:
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            same = x.dtype == y.dtype and (np.array_equal(x, y, equal_nan=True) if x.dtype.kind == "f"
                                           else x.tolist() == y.tolist())
        elif isinstance(x, pd.DataFrame):
            same = x.equals(y) and list(x.dtypes) == list(y.dtypes)
        else:
            same = x == y or (x != x and y != y)
        if not same:
            return False
    return True


@slow_after(1)
@pytest.mark.parametrize("name", CASES)
def test_the_graph_is_built_once_per_rank_and_equals_a_graph_of_its_own(name, monkeypatch):
    calls = []
    built = nodes.rank_graph
    monkeypatch.setattr(nodes, "rank_graph", lambda *a, **k: calls.append(1) or built(*a, **k))
    for p in tracelab.load_many(DATA / name, workers=1):
        calls.clear()
        rank = RankData(p.events, p.meta, p.host, p.memory)
        shared = RANK_DIGESTS["whatif"](rank)
        RANK_DIGESTS["path_bounds"](rank)
        assert len(calls) == 1  # whatif built it (the registry's order), path_bounds read it
        own = built(p.events, p.host, p.meta.rank, trace_device(p.meta))  # as the digest made it before
        own.profiler = config_of(p.meta, p.memory, not own.cpu_only)  # and how the trace was profiled
        assert _fields_equal(shared, own)
        assert shared is not rank.memo["whatif.graph"]  # its roofline times on a copy, the shared one unwritten
        assert np.isnan(rank.memo["whatif.graph"].roof_ns).all()


@slow_after(1)
@pytest.mark.parametrize("name", CASES)
def test_path_bounds_alone_builds_the_graph_without_the_profilers_counts_and_bounds_alike(name):
    for p in tracelab.load_many(DATA / name, workers=1):
        rank = RankData(p.events, p.meta, p.host, p.memory)
        alone = RANK_DIGESTS["path_bounds"](rank)  # as in a job of more than 16 ranks: no whatif graph kept
        counted = nodes.rank_graph(p.events, p.host, p.meta.rank)
        assert counted.profiled_before is not None and counted.regions is not None
        uncounted = replace(counted, profiled_before=None, profiled_inside=None, regions=None)
        assert _fields_equal(uncounted, nodes.rank_graph(p.events, p.host, p.meta.rank, counts=False))
        if not len(timed(p.events)):  # a CPU-only trace: no GPU timeline, no bounds, no graph made
            assert not len(alone) and not rank.memo
            continue
        bare = rank.memo["whatif.graph.uncounted"]
        assert "whatif.graph" not in rank.memo
        assert _fields_equal(replace(uncounted, profiler=bare.profiler), bare)  # every node as the counted graph's
        assert alone.equals(bound.rank_path_bounds(p.events, p.host, lambda: counted))
        assert alone.equals(bound.rank_path_bounds(p.events, p.host))  # made from the frames
        graph = RANK_DIGESTS["whatif"](rank)  # asked after it: the counted graph, made then
        assert graph.profiled_before is not None and rank.memo["whatif.graph"] is not bare
        assert np.array_equal(graph.profiled_inside, counted.profiled_inside) and graph.regions.equals(counted.regions)


@pytest.mark.parametrize("name", CASES)
def test_who_waits_and_idle_read_one_step_table_equal_to_each_own(name):
    for p in tracelab.load_many(DATA / name, workers=1):
        rank = RankData(p.events, p.meta, p.host, p.memory)
        waits = RANK_DIGESTS["waits"](rank)
        idle = RANK_DIGESTS["idle"](rank)
        assert waits.steps.equals(S.step_rows(p.events).drop(columns="rank"))
        alone = RANK_DIGESTS["idle"](RankData(p.events, p.meta, p.host, p.memory))  # no shared rows
        assert idle.steps.equals(alone.steps) and idle.ops.equals(alone.ops) and idle.launches.equals(alone.launches)


def test_kind_mask_equals_a_string_test_with_missing_and_unused_kinds():
    kinds = pd.Series(pd.Categorical(["sync", None, "cpu_op", "range", "sync", "osrt"],
                                     categories=["alloc", "sync", "cpu_op", "range", "osrt", "step"]))
    frame = pd.DataFrame({"kind": kinds})
    for wanted in [("sync",), ("range", "cpu_op", "osrt"), ("step",), ("nothing",), ()]:
        plain = kinds.astype(str).isin(wanted).to_numpy()
        assert kind_mask(frame, wanted).tolist() == plain.tolist()
        assert kind_mask(frame.astype({"kind": object}), wanted).tolist() == plain.tolist()


def _plain_std(events: pd.DataFrame, keys: list[str]) -> pd.Series | None:
    """step_std as it was written before (groupby, unstack, std)."""
    n = noise.step_count(events)
    if not n or n < 2:
        return None
    frame = pd.DataFrame({**{k: events[k].astype(str) for k in keys}, "step": events["step"],
                          "dur_ns": events["dur_ns"]}).dropna(subset=["step"])
    per = frame.groupby([*keys, "step"])["dur_ns"].sum().unstack("step", fill_value=0)
    return per.std(axis=1, ddof=1)


def test_step_noise_equals_groupby_and_unstack_on_real_and_hand_made_frames():
    events = tracelab.load_many(DATA / "train-1gpu-steps-torch", workers=1)[0].events
    odd = pd.DataFrame({"scope": pd.array(["a", None, "b", "a", "b", "a"], dtype="string"),
                        "kernel": pd.Categorical(["k1", "k2", None, "k1", "k2", "k1"]),
                        "op_class": pd.Categorical(["gemm"] * 6),
                        "step": pd.array([3, 3, pd.NA, 5, 5, 9], dtype="Int64"),
                        "dur_ns": np.array([10, 20, 30, 40, 50, 60], dtype=np.int64)})
    for frame in (events, odd, odd.assign(step=pd.array([1] * 6, dtype="Int64"))):
        got = noise.step_stds(frame, BY)
        for by, keys in BY.items():
            want = _plain_std(frame, keys)
            assert (want is None and got[by] is None) or (want.equals(got[by]) and want.index.equals(got[by].index))


def test_names_per_window_equal_the_string_categorical_with_a_missing_name():
    column = pd.Series(pd.Categorical(["b", None, "a", "zz", "b", None], categories=["zz", "b", "a", "q"]))
    for mask in (np.ones(6, bool), np.array([1, 0, 1, 1, 0, 1], bool), np.zeros(6, bool)):
        want = pd.Categorical(column.astype(str).to_numpy()[mask].astype(object))
        got = verdicts._as_str_categorical(column, mask)
        assert list(got.categories) == list(want.categories) and got.codes.tolist() == want.codes.tolist()


def _sums_row_by_row(events: pd.DataFrame) -> list[tuple]:
    """(kind, scope, kernel, op_class, dur_ns, count) per key tuple, in order of first appearance, row by row
    (a missing key: None)."""
    def value(v):
        return None if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else str(v)
    sums: dict[tuple, list[int]] = {}
    for row in zip(*(events[k].tolist() for k in SUM_KEYS), events["dur_ns"].tolist(), events["count"].tolist()):
        total = sums.setdefault(tuple(map(value, row[:4])), [0, 0])
        total[0], total[1] = total[0] + int(row[4]), total[1] + int(row[5])
    return [(*k, *v) for k, v in sums.items()]


def test_rank_sums_by_codes_equal_the_groupby_and_a_row_by_row_sum():
    events = tracelab.load_many(DATA / "ddp-2gpu-late-torch", workers=1)[0].events
    odd = events.head(40).copy()
    odd["kernel"] = odd["kernel"].cat.add_categories(["never used"])
    odd.loc[odd.index[:5], "scope"] = pd.NA
    odd.loc[odd.index[3:12], "kernel"] = np.nan
    odd.loc[odd.index[10:14], "op_class"] = np.nan
    plain = odd.astype({"kind": object, "kernel": object, "op_class": object})  # not the schema's types: the groupby
    for frame in (events, odd, plain, events.iloc[:0]):
        got = rank_sums(frame)
        want = frame.groupby(SUM_KEYS, observed=True, sort=False, dropna=False)[["dur_ns", "count"]].sum().reset_index()
        assert got.equals(want) and list(got.dtypes) == list(want.dtypes)
        rows = list(zip(*(got[k].tolist() for k in SUM_KEYS), got["dur_ns"].tolist(), got["count"].tolist()))
        assert [(*(None if v is None or v is pd.NA or v != v else str(v) for v in r[:4]), *r[4:]) for r in rows] \
            == _sums_row_by_row(frame)
    assert len(rank_sums(odd)) > len(rank_sums(odd.dropna(subset=["scope"])))  # the missing scope is a group of its own


def test_phases_summed_by_region_equal_the_groupby_with_repeats_and_a_missing_region():
    spans = pd.DataFrame({"step": np.array([3, 3, 4, 3, 4, 3], dtype=np.int64),
                          "region": np.array(["fwd", "bwd", "fwd", "fwd", "opt", "bwd"], dtype=object),
                          "start_ns": np.array([0, 5, 20, 9, 30, 12], dtype=np.int64),
                          "end_ns": np.array([4, 9, 26, 11, 38, 19], dtype=np.int64)})
    counts = np.array([[1.0, 2.0, 0.0], [0.0, 5.0, 1.0], [7.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    starts = np.array([1, 6, 13, 21], dtype=np.int64)  # host nodes: two in step 3's fwd and bwd, one in step 4's fwd
    for frame in (spans, spans.assign(region=spans["region"].where(spans.index != 2, None))):  # a missing region
        got = regions.region_counts(frame, starts, counts, np.array([0, 1, 0, 0]))
        held = {c: [] for c in (*regions.COUNT_COLUMNS, regions.SYNCS)}
        for s, e in zip(frame["start_ns"], frame["end_ns"]):  # span by span: the records of the nodes starting inside
            inside = (starts >= s) & (starts < e)
            for i, c in enumerate(regions.COUNT_COLUMNS):
                held[c].append(float(counts[inside, i].sum()))
            held[regions.SYNCS].append(float(np.array([0, 1, 0, 0])[inside].sum()))
        plain = frame.assign(dur_ns=frame["end_ns"] - frame["start_ns"], **held).groupby(
            ["step", "region"], sort=False, as_index=False)[["dur_ns", *held]].sum()
        assert got.equals(plain) and list(got.dtypes) == list(plain.dtypes)
        assert got[["step", "region"]].values.tolist()[:2] == [[3, "fwd"], [3, "bwd"]]  # first appearance first
    assert regions.region_counts(spans, starts, counts).loc[0, "dur_ns"] == 4 + 2  # step 3's fwd: two spans summed


LOADER_CASES = ["public/kineto/resnet50_num_workers_0", "train-1gpu-steps-torch", "stall-1cpu-torch"]


@slow_after(1)
@pytest.mark.parametrize("name", LOADER_CASES)
def test_the_stalls_and_the_loader_digest_read_one_search_of_the_hosts_names(name, monkeypatch):
    made = []
    rows_of = stalls.loader_rows
    monkeypatch.setattr(stalls, "loader_rows", lambda host: made.append(1) or rows_of(host))
    for p in tracelab.load_many(DATA / name, workers=1):
        made.clear()
        rank = RankData(p.events, p.meta, p.host, p.memory)
        found = RANK_DIGESTS["loader"](rank)
        shared = RANK_DIGESTS["stalls"](rank)
        assert len(made) == 1  # one search of the host's names for both digests
        # the rows whose name holds a data loader's (any case), among the operators and ranges, row by row
        plain = [k in ("cpu_op", "range") and bool(re.search("dataloader", n, re.IGNORECASE))
                 for k, n in zip(p.host["kind"].astype(str), p.host["name"])]
        assert rank.memo["timeline.loader_rows"].tolist() == plain
        loader = p.host[plain]
        want = _union_plain(loader["start_ns"].tolist(), (loader["start_ns"] + loader["dur_ns"]).tolist())
        assert found["loader_ns"] == want and (want > 0) == ("resnet50" in name)
        alone = RANK_DIGESTS["stalls"](RankData(p.events, p.meta, p.host, p.memory))  # its own search
        assert shared["stalls"].equals(alone["stalls"]) and shared["span_ns"] == alone["span_ns"]
        assert stalls.host_stalls(p.events, p.host).equals(rank.memo["timeline.stalls"])


def _union_plain(starts: list[int], ends: list[int]) -> int:
    """ns the intervals cover, overlaps once, interval by interval."""
    total, reach = 0, None
    for s, e in sorted(zip(starts, ends)):
        if reach is None or s > reach:
            total, reach = total + e - s, e
        elif e > reach:
            total, reach = total + e - reach, e
    return total
