"""Llama-style token-by-token decode, gpt-fast style, on one or many ranks (tensor parallel).

    python -m tracelab.workloads.decode --model tiny --new-tokens 8          # alone, one rank
    tracelab run decode --ranks 4 --backend proton -- --model llama-2-7b --compile

Per rank it prints and writes (rank{r}.results.json, tracelab/results.py) what gpt-fast prints: seconds
per sample, tokens/s, and achieved bandwidth = bytes of weights this rank reads per
step x steps per second, from samples run with the profiler off. Phases are marked `prefill`
and `decode_one_token`, each token inside a `token N` region, the step tracelab reads. The
profiler records tokens 1..N (--profile-tokens) of one more sample; the same tokens of each
measured sample, timed the same way, give the step without it (results: unprofiled_step_ns).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import time

import torch
from torch import Tensor

from tracelab.run import backends

from tracelab.ingest import results
from tracelab.core.errors import UsageError

from . import checkpoint, harness, late, provenance
from .common import Dist, device_name, env_rank, exit_now
from .configs import CONFIGS
from .model import Transformer, fuse_mlp, use_matvec, weight_bytes
from .options import decode as options
from .options.decode import build_parser
from .tp import install_all_reduce

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}  # options.DTYPES, as torch's types
SEED = 1234  # the same on every rank: replicated weights and sampled tokens must agree


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked (UsageError) for this machine and the world torchrun set, and
    resolved: what run.json records."""
    args = build_parser().parse_args(argv)
    check(args, env_rank()[1], torch.cuda.is_available())
    return args


def resolve(args: argparse.Namespace, gpu: bool) -> argparse.Namespace:
    """Fill the defaults that depend on the machine (options.resolve), and --tuned's --pdl
    where this torch's inductor has it."""
    options.resolve(args, gpu)
    if args.tuned:
        args.pdl = args.pdl or (gpu and args.compile and inductor_has_pdl())
    return args


def check(args: argparse.Namespace, world_size: int, gpu: bool) -> None:
    """UsageError for options that cannot work on this machine and world size: options.check,
    then what needs torch (--pdl and --inductor against its inductor, the checkpoint's tensors)."""
    resolve(args, gpu)
    options.check(args, world_size, gpu)
    if args.pdl and not inductor_has_pdl():
        raise UsageError("--pdl", f"torch {torch.__version__}'s inductor has no PDL option")
    inductor_settings(args.inductor, args.compile)
    if args.checkpoint is not None:
        checkpoint.check(args.checkpoint, CONFIGS[args.model], args.model)


def inductor_has_pdl() -> bool:
    return hasattr(importlib.import_module("torch._inductor.config").triton, "enable_pdl")


def inductor_settings(pairs: list[str], compiled: bool) -> dict[str, object]:
    """`--inductor NAME=VALUE` options as {name: value}; UsageError for an unknown name, a value
    that is no Python literal or of another type than the option's."""
    if pairs and not compiled:
        raise UsageError("--inductor", "only applies with --compile")
    known = importlib.import_module("torch._inductor.config").get_config_copy()
    settings = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or name not in known:
            raise UsageError("--inductor", f"{pair!r} is not NAME=VALUE with NAME a torch._inductor.config option")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise UsageError("--inductor", f"{pair!r}: {text!r} is not a Python literal (True, 8, 'x', ...)") from None
        if known[name] is not None and not isinstance(value, type(known[name])):
            raise UsageError("--inductor", f"{pair!r}: {name} takes a {type(known[name]).__name__}")
        settings[name] = value
    return settings


def build_model(args: argparse.Namespace, d: Dist) -> Transformer:
    """This rank's shard: from the checkpoint, or random weights made on the device."""
    dtype = DTYPES[args.dtype]
    with torch.device("meta"):
        model = Transformer(CONFIGS[args.model], d.world_size)
    if args.checkpoint is not None:
        checkpoint.load_shard(model, args.checkpoint, args.model, d.rank, d.world_size, dtype, d.device)
    else:
        model = model.to(dtype).to_empty(device=d.device)  # made in dtype: no float32 copy of 7B
        randomize(model)
    if args.fuse_mlp:
        fuse_mlp(model)
    if args.matvec == "triton":
        from .gemv import matvec
        use_matvec(model, matvec)
    if d.group is not None and d.world_size > 1:
        install_all_reduce(model, args.allreduce, d.group, args.batch_size * args.prompt_len, d.device)
    return model.eval()


@torch.no_grad()
def randomize(model: Transformer) -> None:
    # never zeros: they hide wrong indexing and can run faster than real weights
    torch.manual_seed(SEED)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.fill_(1.0)
        else:
            p.normal_(0.0, 0.02)


def sample(logits: Tensor, temperature: float, top_k: int) -> Tensor:
    # logits: [B, S, V] -> next token ids [B, 1] (top-k, then an exponential race: no host sync)
    logits = logits[:, -1].float() / max(temperature, 1e-5)  # [B, V]
    pivot = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]  # [B, 1]
    probs = torch.softmax(torch.where(logits < pivot, -float("inf"), logits), dim=-1)
    race = torch.empty_like(probs).exponential_(1)
    return torch.argmax(probs / race, dim=-1, keepdim=True).to(torch.int)


def prefill(model: Transformer, x: Tensor, input_pos: Tensor, temperature: float, top_k: int) -> Tensor:
    # x: [B, T]; input_pos: [T] -> [B, 1]
    return sample(model(x, input_pos), temperature, top_k)


def decode_one_token(model: Transformer, x: Tensor, input_pos: Tensor, temperature: float, top_k: int) -> Tensor:
    # x: [B, 1]; input_pos: [1] -> [B, 1]
    return sample(model(x, input_pos), temperature, top_k)


def compiled_steps(args: argparse.Namespace):
    """(prefill, decode step): compiled as gpt-fast compiles them when asked."""
    if not args.compile:
        return prefill, decode_one_token
    import torch._inductor.config as inductor
    inductor.coordinate_descent_tuning = args.matvec != "cublas"  # also what turns 1-row mm into reductions
    inductor.triton.unique_kernel_names = True
    inductor.fx_graph_cache = True
    if args.pdl:
        inductor.triton.enable_pdl = True  # check() made sure this torch has it
    for name, value in inductor_settings(args.inductor, args.compile).items():
        setattr(inductor, name, value)  # dotted names (triton.x) too
    step = torch.compile(decode_one_token, mode="reduce-overhead", fullgraph=True)
    first = torch.compile(prefill, fullgraph=True, dynamic=True) if args.compile_prefill else prefill
    return first, step


def attention_backend(choice: str):
    """The context a decode step runs in: SDPA restricted to its math backend, or left to torch."""
    from contextlib import nullcontext
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel(SDPBackend.MATH) if choice == "math" else nullcontext()


def generate(model: Transformer, prompt: Tensor, new_tokens: int, steps, args: argparse.Namespace,
             extra=None, around=None) -> Tensor:
    """`around(i)`: a context around token i's step (timing, the profiler's window), outside its region."""
    # prompt: [B, T] -> [B, T + new_tokens]
    around = around or (lambda i: contextlib.nullcontext())
    first, step = steps
    bsz, t = prompt.shape
    seq = torch.empty(bsz, t + new_tokens, dtype=torch.int, device=prompt.device)
    seq[:, :t] = prompt
    with backends.region("prefill"):
        token = first(model, prompt, torch.arange(t, device=prompt.device), args.temperature, args.top_k)
    seq[:, t:t + 1] = token
    input_pos = torch.tensor([t], device=prompt.device, dtype=torch.int)
    work = {"bytes": float(weight_bytes(model))}  # gpt-fast's bytes per token: the weights, read once
    for i in range(1, new_tokens):
        # one step per token: `token N` is the step (parsers/_steps.py), decode_one_token its phase
        with around(i), backends.region(f"token {i}"):
            if extra is not None:
                extra(i)  # late.late_work: the late rank's products, before this token's all-reduces
            with backends.region("decode_one_token", work), attention_backend(args.attention):
                token = step(model, token, input_pos, args.temperature, args.top_k).clone()
        seq[:, t + i:t + i + 1] = token
        input_pos += 1
    return seq


def timed_sample(model: Transformer, prompt: Tensor, steps, args: argparse.Namespace,
                 extra=None, around=None, new_tokens: int | None = None) -> tuple[float, Tensor]:
    """Seconds for one sample (prefill + all new tokens), device work included, and the tokens."""
    sync = torch.cuda.synchronize if prompt.is_cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    seq = generate(model, prompt, new_tokens or args.new_tokens, steps, args, extra, around)
    sync()
    return time.perf_counter() - t0, seq


def first_tokens(clock: harness.StepClock, count: int, prof=None):
    """around(i) for generate: tokens 1..count timed on `clock`; with `prof`, its window
    opened before token 1 and closed after token `count` (the trace holds those steps only)."""

    @contextlib.contextmanager
    def around(i: int):
        if i > count:
            yield
            return
        if prof is not None and i == 1:
            prof.start()
        with clock.step():
            yield
        if prof is not None and i == count:
            prof.stop()

    return around


def record(args: argparse.Namespace, d: Dist, seconds: list[float], model_bytes: int, seq: Tensor,
           step_ns: dict) -> dict:
    # seq: [B, T + new]; its first new tokens let ranks and runs be checked against each other
    s_per_sample = sum(seconds) / len(seconds)
    tokens_per_s = args.new_tokens / s_per_sample
    return {"workload": "decode", "rank": d.rank, "world_size": d.world_size, "device": device_name(d.device),
            "model": args.model, "dtype": args.dtype, "compile": args.compile, "allreduce": args.allreduce,
            "matvec": args.matvec,
            "fuse_mlp": args.fuse_mlp, "pdl": args.pdl, "inductor": args.inductor,
            "attention": args.attention, "late": args.late, "late_work": args.late_work,
            "host_stall_ms": args.host_stall_ms, "late_every": args.late_every,
            "host_stall_unmarked": args.host_stall_unmarked,
            "batch_size": args.batch_size, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
            "sample_s": seconds, "s_per_sample": s_per_sample, "tokens_per_s": tokens_per_s,
            "batch_tokens_per_s": tokens_per_s * args.batch_size, "weight_bytes": model_bytes,
            "bandwidth_gb_s": model_bytes * tokens_per_s / 1e9,
            "first_tokens": seq[0, args.prompt_len:args.prompt_len + 16].tolist(),
            "profiled_tokens": args.profile_tokens if args.backend != "none" else 0, **step_ns}


def run(args: argparse.Namespace, d: Dist) -> None:
    """Decode, print gpt-fast's line and write this rank's results."""
    result = measure(args, d)
    print(summary(result), flush=True)
    results.write(args.out, d.rank, result)


# torch.profiler records every op of every traced token: on 2 H200s the eager llama-2-7b wrote 24.6 MiB of
# gzip per rank in 22.5 s for 50 tokens
TORCH_TRACED_TOKENS = 250


def trace_size_note(args: argparse.Namespace, gpu: bool) -> str | None:
    """A line for the user before a torch.profiler window of many tokens of a large model on a GPU."""
    tokens = args.profile_tokens
    if args.backend != "torch" or not gpu or args.model == "tiny" or tokens <= TORCH_TRACED_TOKENS:
        return None
    return (f"note: torch.profiler records every op of the {tokens:,} tokens traced (--profile-tokens): for "
            f"{args.model} that is about 0.5 MiB of gzip and 0.45 s of writing per token and rank (measured on "
            f"2 H200s), so minutes; `-- --profile-tokens 50` traces 50 tokens")


def measure(args: argparse.Namespace, d: Dist, say=print) -> dict:
    """Warm-up, the measured samples with the profiler off (tokens/s; tokens 1..N of each
    timed one by one: the unprofiled step), then tokens 1..N of one more sample profiled and
    timed the same way (the profiled step, and the trace)."""
    phase = say if d.rank == 0 else (lambda line: None)
    if note := trace_size_note(args, d.gpu):
        phase(note)
    model = build_model(args, d)
    model.setup_caches(args.batch_size, args.prompt_len + args.new_tokens)
    steps = compiled_steps(args)  # compiles lazily, at the first call: the recorder sees it
    recorder = provenance.record(args.out, d.rank) if args.compile and args.provenance else None
    prompt = torch.randint(0, model.args.vocab_size, (args.batch_size, args.prompt_len),
                           generator=torch.Generator().manual_seed(SEED)).to(d.device, torch.int)
    extra = late.extra(args, d.rank, d.device)
    n = args.profile_tokens
    unprofiled, profiled = harness.StepClock(d.device), harness.StepClock(d.device)
    with torch.no_grad(), backends.session(args.backend, args.out, d.rank) as prof:
        phase(f"rank 0: warm-up: {args.warmup} sample(s) of {args.new_tokens} tokens")
        for i in range(args.warmup):
            seconds, _ = timed_sample(model, prompt, steps, args, extra)
            say(f"rank {d.rank}: warm-up sample {i + 1}/{args.warmup}: {seconds:.2f} s")
        phase(f"rank 0: measuring: {args.samples} sample(s), the profiler off")
        timed = []
        for i in range(args.samples):
            around = first_tokens(unprofiled, n) if args.unprofiled else None
            timed.append(timed_sample(model, prompt, steps, args, extra, around))
            say(f"rank {d.rank}: sample {i + 1}/{args.samples}: {timed[-1][0]:.2f} s")
        if args.backend != "none":
            phase(f"rank 0: profiling {n} tokens under {args.backend}")
            timed_sample(model, prompt, steps, args, extra, first_tokens(profiled, n, prof), new_tokens=n + 1)
            phase(f"rank 0: writing the {args.backend} trace")
    if recorder is not None:
        recorder.write()  # every compile is done: the warm-up's, and the window's if there was none
    step_ns = harness.step_times(unprofiled.ns(), profiled.ns())
    return record(args, d, [t for t, _ in timed], weight_bytes(model), timed[-1][1], step_ns)


def summary(f: dict) -> str:
    return (f"rank {f['rank']}: {f['s_per_sample']:.3f} s per sample, {f['tokens_per_s']:.2f} tokens/s, "
            f"bandwidth achieved {f['bandwidth_gb_s']:.2f} GB/s ({f['weight_bytes'] / 1e9:.3f} GB of weights)")


def main(argv: list[str] | None = None) -> int:
    return harness.main("decode", parse, run, argv)


if __name__ == "__main__":
    exit_now(main())
