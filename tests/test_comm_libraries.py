"""Communication recognised by what it is, not only by NCCL's names: a real capture whose most frequent
kernels are renamed to DeepEP's, MSCCL++'s and NVSHMEM's kernels (as a DeepSeek-V3 trace names
them) is read with that time as communication, each kernel under its library's name."""
from __future__ import annotations

import gzip
import json

import pytest

from tracelab.core.classify import canonical, classify_one

from helpers import DATA, run_cli_output

TRACE = DATA / "decode-1gpu-torch" / "rank0.pt.trace.json.gz"
RENAMED = {"void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)": "deep_ep::dispatch",
           "_ZN7deep_ep9internode7combineILi8EEEvPv": "deep_ep::combine",
           "void mscclpp::allreduce6<__nv_bfloat16>(__nv_bfloat16*, int)": "mscclpp::allreduce6",
           "nvshmemi_transfer_rma_kernel": "nvshmemi_transfer_rma_kernel"}


@pytest.fixture(scope="module")
def renamed(tmp_path_factory):
    """The capture with its four most frequent kernel names renamed; (path, ns per new name)."""
    with gzip.open(TRACE) as f:
        trace = json.load(f)
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    names = sorted({e["name"] for e in kernels}, key=lambda n: -sum(e["name"] == n for e in kernels))[:len(RENAMED)]
    assert len(names) == len(RENAMED)
    new_of = dict(zip(names, RENAMED))
    ns = dict.fromkeys(RENAMED.values(), 0)
    for e in kernels:
        if e["name"] in new_of:
            e["name"] = new_of[e["name"]]
            ns[RENAMED[e["name"]]] += round(e["dur"] * 1000)
    path = tmp_path_factory.mktemp("comm") / "rank0.pt.trace.json"
    path.write_text(json.dumps(trace))
    return path, ns


def _json(capsys, *args) -> dict:
    """`tracelab ARGS --format json` in this process, its document."""
    status, out, err = run_cli_output(capsys, *args, "--format", "json")
    assert status == 0, err
    return json.loads(out)


@pytest.mark.slow
def test_library_kernels_are_communication_under_their_library(renamed, capsys):
    path, ns = renamed
    rows = {r["kernel"]: r for r in _json(capsys, "breakdown", str(path), "--top", "0")["breakdown"]}
    for name, total_ns in ns.items():
        assert rows[name]["total_ns"] == total_ns
    by_class = {r["op_class"]: r["total_ns"] for r in _json(capsys, "breakdown", str(path), "--by", "op_class")["breakdown"]}
    assert by_class["communication"] == sum(ns.values())


@pytest.mark.parametrize("name, short, cls", [
    ("void deep_ep::intranode::notify_dispatch<8>(int const*)", "deep_ep::notify_dispatch", "communication"),
    ("void deep_ep::internode_ll::combine<false>(void*)", "deep_ep::combine", "communication"),
    ("uccl::ep::dispatch_kernel", "uccl::dispatch_kernel", "communication"),
    ("gloo_allreduce_ring", "gloo_allreduce_ring", "communication"),
    ("dispatch", "dispatch", "other"),  # a kernel of that name in no library of collectives
    ("void at::native::vectorized_elementwise_kernel<4>(int)", "vectorized_elementwise_kernel", "elementwise"),
])
def test_names_and_classes(name, short, cls):
    assert canonical(name) == short and classify_one(canonical(name)) == cls
