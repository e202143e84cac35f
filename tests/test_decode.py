"""The decoder and its tensor-parallel shards, checked against the unsharded model in one process."""
from __future__ import annotations

import gzip
import json
import sqlite3
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import pytest

from tracelab.ingest import results
from tracelab.workloads.configs import CONFIGS, ModelArgs

from helpers import LazyModule, needs, slow_after

pytestmark = needs("torch")

# imported by the first test that uses them, not at collection (helpers.LazyModule says why)
torch = LazyModule("torch")
checkpoint = LazyModule("tracelab.workloads.checkpoint")
decode = LazyModule("tracelab.workloads.decode")
harness = LazyModule("tracelab.workloads.harness")
llama = LazyModule("tracelab.workloads.model")
tp = LazyModule("tracelab.workloads.tp")
options = LazyModule("tracelab.workloads.options.decode")

TINY = CONFIGS["tiny"]


def _full_model(seed: int = 0) -> llama.Transformer:
    torch.manual_seed(seed)
    model = llama.Transformer(TINY).eval()
    model.setup_caches(2, 16)
    return model


def _shards(full: llama.Transformer, world_size: int) -> list[llama.Transformer]:
    shards = []
    for rank in range(world_size):
        shard = llama.Transformer(TINY, world_size).eval()
        shard.load_state_dict(tp.shard_state(full.state_dict(), TINY, rank, world_size))
        shard.setup_caches(2, 16)
        shards.append(shard)
    return shards


@slow_after(1)
@pytest.mark.parametrize("world_size", [1, 2])
def test_shards_sum_to_the_full_layers(world_size):
    full = _full_model()
    shards = _shards(full, world_size)
    x = torch.randn(2, 5, TINY.dim, dtype=torch.float64).float()  # [B, S, D]
    pos = torch.arange(5)
    fc, mask = full.freqs_cis[pos], full.causal_mask[None, None, pos]
    with torch.no_grad():
        want_attn = full.layers[0].attention(x, fc, mask, pos)
        got_attn = sum(s.layers[0].attention(x, fc, mask, pos) for s in shards)
        want_ff = full.layers[1].feed_forward(x)
        got_ff = sum(s.layers[1].feed_forward(x) for s in shards)
    for want, got in ((want_attn, got_attn), (want_ff, got_ff)):
        assert torch.linalg.norm(got - want) / torch.linalg.norm(want) < 1e-5


def test_shard_parameter_bytes_split_evenly():
    full = _full_model()
    shards = _shards(full, 2)
    # every projection is split in two; norms and the output layer stay whole on every rank
    projections = sum(p.numel() for n, p in full.named_parameters() if ".attention.w" in n or ".feed_forward." in n)
    whole = sum(p.numel() for n, p in full.named_parameters() if n.endswith("norm.weight") or n == "output.weight")
    assert llama.weight_bytes(shards[0]) == llama.weight_bytes(shards[1]) == 4 * (projections // 2 + whole)
    assert llama.weight_bytes(full) == 4 * (projections + whole)  # the embedding table is not counted


@pytest.mark.parametrize("args, world_size, reason", [
    (TINY, 2, None),
    (TINY, 3, "heads (16) do not divide over 3 ranks"),
    (TINY, 16, "key/value heads (8) do not divide over 16 ranks"),
    (CONFIGS["llama-3-8b"], 8, None),
    (ModelArgs(n_head=8, dim=64, intermediate_size=100), 8, "hidden size (100) do not divide over 8 ranks"),
])
def test_unshardable(args, world_size, reason):
    assert options.unshardable(args, world_size) == reason


@pytest.mark.slow  # over 1.2 s of CPU here: the default run stays under 90 s
def test_separate_wq_wk_wv_checkpoints_load(tmp_path):
    full = _full_model()
    state = full.state_dict()
    wqkv = state.pop("layers.0.attention.wqkv.weight")
    q, k, v = wqkv.split([TINY.n_head * TINY.head_dim, TINY.kv_heads * TINY.head_dim,
                          TINY.kv_heads * TINY.head_dim])
    state.update({"layers.0.attention.wq.weight": q, "layers.0.attention.wk.weight": k,
                  "layers.0.attention.wv.weight": v})
    torch.save(state, tmp_path / "split.pth")
    merged = checkpoint.check(tmp_path / "split.pth", TINY, "tiny")
    assert torch.equal(merged["layers.0.attention.wqkv.weight"], wqkv)


def test_top1_sampling_is_argmax():
    logits = torch.randn(3, 4, 50)  # [B, S, V]
    got = decode.sample(logits, temperature=0.8, top_k=1)
    assert got.shape == (3, 1) and torch.equal(got[:, 0].long(), logits[:, -1].argmax(-1))


class _Window:
    """A profiler session's start/stop, recording which token's step each came around."""

    def __init__(self):
        self.calls: list[tuple[str, list[str]]] = []
        self.regions: list[str] = []

    def start(self):
        self.calls.append(("start", list(self.regions)))

    def stop(self):
        self.calls.append(("stop", list(self.regions)))


@pytest.mark.parametrize("new_tokens, window", [(6, 2), (6, 5), (3, 1)])
def test_the_profiled_window_is_tokens_1_to_n(monkeypatch, new_tokens, window):
    """The window opens before token 1's region and closes after token N's; tokens 1..N are timed, no other."""
    seen: list[str] = []
    real_region = decode.backends.region

    def region(name, work=None):
        seen.append(name)
        return real_region(name, work)

    monkeypatch.setattr(decode.backends, "region", region)
    args = decode.build_parser().parse_args(["--top-k", "1"])
    prof, clock = _Window(), harness.StepClock(torch.device("cpu"))
    prof.regions = seen
    with torch.no_grad():
        decode.generate(_full_model(), torch.zeros(2, 4, dtype=torch.int), new_tokens,
                        (decode.prefill, decode.decode_one_token), args, around=decode.first_tokens(clock, window, prof))
    tokens = [n for n in seen if n.startswith("token ")]
    assert tokens == [f"token {i}" for i in range(1, new_tokens)]
    started, stopped = prof.calls
    assert started == ("start", seen[:seen.index("token 1")])
    assert stopped == ("stop", seen[:seen.index(f"token {window}") + 2])  # token N and its decode_one_token
    assert len(clock.ns()) == window and min(clock.ns()) > 0


def test_generate_is_deterministic_per_seed_and_fills_every_position():
    full = _full_model()
    args = decode.build_parser().parse_args(["--top-k", "1", "--new-tokens", "6"])
    prompt = torch.randint(0, TINY.vocab_size, (2, 4), dtype=torch.int)
    steps = (decode.prefill, decode.decode_one_token)
    with torch.no_grad():
        first = decode.generate(full, prompt, 6, steps, args)
        again = decode.generate(full, prompt, 6, steps, args)
    assert first.shape == (2, 10) and torch.equal(first, again)
    assert torch.equal(first[:, :4], prompt)
    assert ((first >= 0) & (first < TINY.vocab_size)).all()


@pytest.mark.slow
def test_fused_attention_generates_what_the_math_path_does():
    full = _full_model()
    prompt = torch.randint(0, TINY.vocab_size, (2, 4), dtype=torch.int)
    steps = (decode.prefill, decode.decode_one_token)
    seqs = {}
    for choice in ("math", "auto"):
        args = decode.build_parser().parse_args(["--top-k", "1", "--new-tokens", "6", "--attention", choice])
        with torch.no_grad():
            seqs[choice] = decode.generate(full, prompt, 6, steps, args)
    assert torch.equal(seqs["math"], seqs["auto"])


@pytest.mark.slow
def test_compiled_step_with_the_tuning_options_generates_what_eager_does():
    # the path GPU runs take (--compile --fuse-mlp --attention auto --inductor ...), on the CPU
    import torch._dynamo
    import torch._inductor.config as inductor

    full = _full_model()
    prompt = torch.randint(0, TINY.vocab_size, (2, 4), dtype=torch.int)
    flags = ["--top-k", "1", "--new-tokens", "6", "--fuse-mlp", "--attention", "auto"]
    eager_args = decode.build_parser().parse_args(flags)
    compiled_args = decode.build_parser().parse_args(flags + ["--compile", "--inductor", "split_reductions=False"])
    saved = inductor.get_config_copy()
    try:
        with torch.no_grad():
            want = decode.generate(full, prompt, 6, decode.compiled_steps(eager_args), eager_args)
            llama.fuse_mlp(full)
            got = decode.generate(full, prompt, 6, decode.compiled_steps(compiled_args), compiled_args)
            assert inductor.split_reductions is False and inductor.coordinate_descent_tuning is True
    finally:
        inductor.load_config(saved)
        torch._dynamo.reset()
    assert torch.equal(got, want)


def test_use_matvec_routes_every_projection():
    full = _full_model()
    calls: list[tuple[int, int]] = []

    def matvec(x, w):  # x: [M, K], w: [N, K]
        calls.append((x.shape[0], w.shape[0]))
        return (x.double() @ w.double().T).to(x.dtype)

    idx, pos = torch.randint(0, TINY.vocab_size, (2, 3)), torch.arange(3)
    with torch.no_grad():
        want = full(idx, pos)
        llama.use_matvec(full, matvec)
        got = full(idx, pos)
    assert torch.linalg.norm(got - want) / torch.linalg.norm(want) < 1e-5
    # per layer wqkv, wo, w1, w3, w2, then the output projection; every call sees 2 x 3 rows
    assert len(calls) == 5 * TINY.n_layer + 1 and {m for m, _ in calls} == {6}
    assert calls[-1] == (6, TINY.vocab_size)


def test_fuse_mlp_keeps_the_logits_and_the_bytes_and_makes_one_product():
    full = _full_model()
    idx, pos = torch.randint(0, TINY.vocab_size, (2, 3)), torch.arange(3)
    with torch.no_grad():
        want, bytes_before = full(idx, pos), llama.weight_bytes(full)
        w1 = full.layers[0].feed_forward.w1.weight.clone()
        llama.fuse_mlp(full)
        got = full(idx, pos)
    ff = full.layers[0].feed_forward
    assert not hasattr(ff, "w1") and not hasattr(ff, "w3")
    assert ff.w13.weight.shape == (2 * TINY.hidden_dim, TINY.dim) and torch.equal(ff.w13.weight[:TINY.hidden_dim], w1)
    assert llama.weight_bytes(full) == bytes_before
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    calls = []
    llama.use_matvec(full, lambda x, w: calls.append(w.shape[0]) or x @ w.T)
    with torch.no_grad():
        full(idx, pos)
    # per layer wqkv, wo, w13, w2, then the output projection
    assert calls[1::4][:TINY.n_layer] == [TINY.dim] * TINY.n_layer and calls[2::4] == [2 * TINY.hidden_dim] * TINY.n_layer
    assert len(calls) == 4 * TINY.n_layer + 1


def test_pdl_needs_compile_and_a_gpu():
    args = decode.build_parser().parse_args(["--pdl"])
    with pytest.raises(decode.UsageError, match="--pdl"):
        decode.check(args, 1, gpu=False)


@pytest.mark.parametrize("gpu, pdl", [(False, False), (True, True)])
def test_tuned_spells_out_the_measured_set(gpu, pdl):
    args = decode.build_parser().parse_args(["--tuned", "--compile", "--inductor", "split_reductions=False",
                                             "--inductor", "combo_kernels=True"])
    decode.resolve(args, gpu)
    assert args.fuse_mlp and args.pdl is (pdl and decode.inductor_has_pdl())
    # each setting once, the user's own ones kept, in an order that lets a later one win
    assert args.inductor == ["triton.mix_order_reduction=False", "split_reductions=False", "combo_kernels=True"]
    assert decode.inductor_settings(args.inductor, True) == {
        "triton.mix_order_reduction": False, "split_reductions": False, "combo_kernels": True}


def test_tuned_needs_compile():
    args = decode.build_parser().parse_args(["--tuned"])
    with pytest.raises(decode.UsageError, match="--tuned.*only applies with --compile"):
        decode.check(args, 1, gpu=False)


@pytest.mark.parametrize("pairs, compile, want", [
    (["split_reductions=False"], True, {"split_reductions": False}),
    (["triton.enable_pdl=True", "coordinate_descent_search_radius=2"], True,
     {"triton.enable_pdl": True, "coordinate_descent_search_radius": 2}),
    (["split_reductions=False"], False, "only applies with --compile"),
    (["no_such_option=1"], True, "not NAME=VALUE"),
    (["split_reductions"], True, "not NAME=VALUE"),
    (["split_reductions=maybe"], True, "not a Python literal"),
    (["coordinate_descent_search_radius='2'"], True, "takes a int"),
])
def test_inductor_settings(pairs, compile, want):
    if isinstance(want, dict):
        assert decode.inductor_settings(pairs, compile) == want
    else:
        with pytest.raises(decode.UsageError, match=want):
            decode.inductor_settings(pairs, compile)


# --- real captures of this decode on one H100 (tests/data/decode-1gpu-*, see their README.md) ---

DATA = Path(__file__).resolve().parent / "data"


SYMM_KERNEL = "one_shot_all_reduce_kernel"  # torch.ops.symm_mem's one-shot kernel, in every file's spelling


class Raw(NamedTuple):
    """One rank's kernels, read straight from its file."""

    kernels: int
    kernel_ns: int
    steps: int | None  # decode_one_token regions; None for proton, which merges a scope's calls into one node
    symm_kernels: int  # the kernels whose name holds SYMM_KERNEL
    symm_ns: int


def _raw_torch(folder: Path, rank: int = 0) -> Raw:
    events = json.loads(gzip.decompress((folder / f"rank{rank}.pt.trace.json.gz").read_bytes()))["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    symm = [e for e in kernels if SYMM_KERNEL in e["name"]]
    steps = sum(1 for e in events if e.get("cat") == "user_annotation" and e.get("name") == "decode_one_token")
    return Raw(len(kernels), sum(round(e["dur"] * 1000) for e in kernels), steps,
               len(symm), sum(round(e["dur"] * 1000) for e in symm))


def _raw_nsys(folder: Path, rank: int = 0) -> Raw:
    with sqlite3.connect(f"file:{folder / f'rank{rank}.sqlite'}?mode=ro", uri=True) as db:
        n, ns, symm_n, symm_ns = db.execute(
            "SELECT count(*), sum(k.end - k.start), sum(instr(s.value, ?1) > 0),"
            " sum(iif(instr(s.value, ?1) > 0, k.end - k.start, 0))"
            " FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN StringIds s ON s.id = k.shortName",
            (SYMM_KERNEL,)).fetchone()
        steps = db.execute("SELECT count(*) FROM NVTX_EVENTS WHERE text = 'decode_one_token'").fetchone()[0]
    return Raw(n, ns, steps, symm_n, symm_ns)


def _raw_proton(folder: Path, rank: int = 0) -> Raw:
    root = json.loads((folder / f"rank{rank}.hatchet").read_text())[0]
    stack, leaves = [root], []  # (name, count, time_ns) per kernel leaf
    while stack:
        node = stack.pop()
        stack.extend(node.get("children", []))
        if node["frame"].get("type") == "function" and not node.get("children"):
            leaves.append((node["frame"]["name"], node["metrics"].get("count", 0), node["metrics"].get("time (ns)", 0)))
    symm = [leaf for leaf in leaves if SYMM_KERNEL in leaf[0]]
    return Raw(sum(n for _, n, _ in leaves), sum(ns for _, _, ns in leaves), None,
               sum(n for _, n, _ in symm), sum(ns for _, _, ns in symm))


RAW = {"torch": _raw_torch, "nsys": _raw_nsys, "proton": _raw_proton}


@pytest.mark.parametrize("backend, raw", [("torch", _raw_torch), ("nsys", _raw_nsys), ("proton", _raw_proton)])
def test_decode_captures_load_with_their_kernels_and_regions(backend, raw):
    import tracelab

    folder = DATA / f"decode-1gpu-{backend}"
    (profile,) = tracelab.load_many(folder)  # run.json and README.md are not traces
    kernels = profile.events[profile.events["kind"] == "kernel"]
    got = raw(folder)
    assert (int(kernels["count"].sum()), int(kernels["dur_ns"].sum())) == (got.kernels, got.kernel_ns)
    assert got.kernels == 301  # 1 prefill + 5 compiled steps: the same kernels under each profiler
    assert got.steps in (5, None)
    assert got.symm_kernels == 0  # one rank: no all-reduce
    assert kernels["scope"].str.startswith("decode_one_token").any()
    assert kernels["scope"].str.startswith("prefill").any()


def test_decode_captures_agree_across_profilers():
    runs = {b: json.loads((DATA / f"decode-1gpu-{b}" / "run.json").read_text()) for b in ("proton", "torch", "nsys")}
    tokens = {b: results.of_run(r)["0"]["first_tokens"] for b, r in runs.items()}  # captures of before "results"
    assert tokens["proton"] == tokens["torch"] == tokens["nsys"]
    totals = [RAW[b](DATA / f"decode-1gpu-{b}").kernel_ns for b in RAW]
    assert max(totals) / min(totals) < 1.03  # 0.601 to 0.608 ms of kernels


# --- real captures of the tensor-parallel decode on two H200s (tests/data/decode-2gpu-*, see their README.md) ---


@lru_cache(maxsize=None)
def _tp_profiles(backend: str) -> dict:
    import tracelab

    return {p.rank: p for p in tracelab.load_many(DATA / f"decode-2gpu-{backend}")}


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("backend", sorted(RAW))
def test_tp_decode_captures_load_with_their_kernels_and_all_reduces(backend, rank):
    folder = DATA / f"decode-2gpu-{backend}"
    config = json.loads((folder / "run.json").read_text())["config"]
    assert sorted(_tp_profiles(backend)) == [0, 1]
    events = _tp_profiles(backend)[rank].events
    kernels = events[events["kind"] == "kernel"]
    got = RAW[backend](folder, rank)
    assert (int(kernels["count"].sum()), int(kernels["dur_ns"].sum())) == (got.kernels, got.kernel_ns)
    assert got.kernels == 325 and got.steps in (config["new_tokens"] - 1, None)
    comm = kernels[kernels["op_class"] == "communication"]
    assert set(comm["kernel"].astype(str)) == {SYMM_KERNEL}
    assert (int(comm["count"].sum()), int(comm["dur_ns"].sum())) == (got.symm_kernels, got.symm_ns)
    # two all-reduces per layer (after the attention, after the MLP) per forward pass: the prefill,
    # then new_tokens - 1 compiled steps
    per_region = comm.groupby(comm["scope"].str.split("/").str[0])["count"].sum().to_dict()
    assert per_region == {"prefill": 2 * TINY.n_layer, "decode_one_token": 2 * TINY.n_layer * (config["new_tokens"] - 1)}
    assert got.symm_kernels == 2 * TINY.n_layer * config["new_tokens"] == 24


def test_tp_decode_captures_agree_across_profilers_and_ranks():
    figures = {(b, r): json.loads((DATA / f"decode-2gpu-{b}" / f"rank{r}.figures.json").read_text())
               for b in RAW for r in (0, 1)}
    for (b, r), f in figures.items():
        assert f == json.loads((DATA / f"decode-2gpu-{b}" / "run.json").read_text())["figures"][str(r)]
    assert {tuple(f["first_tokens"]) for f in figures.values()} == {(53, 445, 121, 109, 191, 248)}
    shard = llama.Transformer(TINY, world_size=2).to(torch.bfloat16)
    assert {f["weight_bytes"] for f in figures.values()} == {llama.weight_bytes(shard)}  # made with today's tiny
    # the one-shot kernel spins until the other rank arrives, so its time is how far apart the ranks
    # ran (0.27 to 60.6 ms a rank), not work: compare the rest
    compute_ns = [got.kernel_ns - got.symm_ns for got in (RAW[b](DATA / f"decode-2gpu-{b}", r) for b, r in figures)]
    assert max(compute_ns) / min(compute_ns) < 1.03  # 0.531 to 0.542 ms


class _FakeSymmOps:
    """torch.ops.symm_mem's contract as a 2-GPU run showed it (H200 x2, torch 2.11): the symmetric
    buffer passed must have the message's size ('input/output size mismatch' otherwise)."""

    def __init__(self):
        self.sizes = []

    def one_shot_all_reduce_copy(self, symm, local, op, group):
        if symm.shape != local.shape:
            raise RuntimeError(f"one_shot_all_reduce: input/output size mismatch, {symm.shape} vs {local.shape}")
        symm.copy_(local)
        self.sizes.append(symm.numel())
        return symm * 2  # two ranks holding the same values

    def two_shot_all_reduce_(self, symm, op, group):
        self.sizes.append(symm.numel())
        symm.mul_(2)
        return symm


def _symm_all_reduce(mode: str):
    """SymmAllReduce without a process group: a plain buffer with room for 8 tokens of dim 16."""
    reduce = tp.SymmAllReduce.__new__(tp.SymmAllReduce)
    torch.nn.Module.__init__(reduce)
    reduce.mode, reduce.group_name = mode, "0"
    reduce.register_buffer("buf", torch.zeros(8 * 16))
    return reduce


@pytest.mark.parametrize("mode", ["symm-one-shot", "symm-two-shot"])
def test_symm_all_reduce_passes_the_buffer_at_the_message_size(monkeypatch, mode):
    fake = _FakeSymmOps()
    monkeypatch.setattr(torch.ops, "symm_mem", fake)
    reduce = _symm_all_reduce(mode)
    for tokens in (8, 1):  # prefill, then one decode step
        x = torch.randn(1, tokens, 16)
        assert torch.equal(reduce(x), 2 * x)
    assert fake.sizes == [8 * 16, 16]


def test_symm_two_shot_traces_with_fake_tensors():
    # torch.ops.symm_mem.two_shot_all_reduce_ has no fake kernel, so tracing it failed (dynamo
    # under torch.compile, 2 x H200, torch 2.11); the tracelab op wrapping it has one, and takes
    # the whole registered buffer. export traces with fake tensors and runs nothing.
    exported = torch.export.export(_symm_all_reduce("symm-two-shot"), (torch.randn(1, 8, 16),))
    target = torch.ops.tracelab.symm_two_shot_all_reduce.default
    calls = [n for n in exported.graph.nodes if n.target is target]
    assert len(calls) == 1
    buffer = calls[0].args[0]
    assert exported.graph_signature.inputs_to_buffers.get(buffer.name) == "buf"
    assert buffer.meta["val"].shape == (8 * 16,)


@pytest.mark.slow  # an inductor compile on the CPU: ~1 s
def test_symm_two_shot_compiled_by_inductor_sums_in_the_registered_buffer(monkeypatch):
    fake = _FakeSymmOps()
    monkeypatch.setattr(torch.ops, "symm_mem", fake)
    torch._dynamo.reset()
    reduce = _symm_all_reduce("symm-two-shot")
    compiled = torch.compile(reduce, fullgraph=True, dynamic=False)
    for tokens in (8, 1):  # prefill, then one decode step
        x = torch.randn(1, tokens, 16)
        assert torch.equal(compiled(x), 2 * x)
        assert torch.equal(reduce.buf[: x.numel()], 2 * x.reshape(-1))  # not a copy of it
    assert fake.sizes == [8 * 16, 16]


def test_a_long_torch_window_of_a_large_model_is_announced():
    """torch.profiler on a GPU with the 7B model and a window of 1,000 tokens: minutes of writing,
    said before it starts; the default window, the tiny model, the CPU or another backend say nothing."""
    from argparse import Namespace
    long = Namespace(backend="torch", model="llama-2-7b", profile_tokens=1000)
    note = decode.trace_size_note(long, gpu=True)
    assert note and "1,000 tokens traced (--profile-tokens)" in note and "--profile-tokens 50" in note
    assert decode.trace_size_note(Namespace(**{**vars(long), "profile_tokens": options.PROFILE_TOKENS}), gpu=True) is None
    assert decode.trace_size_note(Namespace(**{**vars(long), "model": "tiny"}), gpu=True) is None
    assert decode.trace_size_note(Namespace(**{**vars(long), "backend": "proton"}), gpu=True) is None
    assert decode.trace_size_note(long, gpu=False) is None
