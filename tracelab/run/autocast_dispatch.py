"""autocast's own host cost per CPU operator, on the train workload's ops: the same forward and
backward (lm.TrainLM, tiny, a few tokens: the host's work is timed) with bf16 autocast off and on,
without the profiler, in turn. The model's weights and activations are bf16 on both sides, so the
products run alike and autocast's difference is its own: each op's pass through the autocast
dispatch key (and, where its policy casts, the casts).

    tracelab factors (tracelab/run/factors.py) measures it; python benchmarks/autocast_dispatch.py alone

    dispatch_ns_per_op = (median(step_on - step_off) - casts_added * cast) / ops_off

step_on - step_off: each step with autocast less the step without it run just before (their
median; their quartiles beside it: on a loaded host the noise); ops_off: the CPU operators torch.profiler records in one step without
autocast (every one, nested too: what the profiler's cost model and the whatif scenario count);
casts_added: the casts autocast adds (aten::_to_copy, on against off), at a tiny cast's own time,
as the scenario models the casts apart. On a GPU the work is asynchronous and small here: the
step is the host's.
"""
from __future__ import annotations

import os
import platform
import statistics
import time

import torch

from tracelab.run.machine import device_words
from tracelab.workloads.harness import synchronize, time_each_us
from tracelab.workloads.configs import SIZES
from tracelab.workloads.lm import TrainLM, loss_fn, model_args

VOCAB, BATCH, CONTEXT = 1000, 1, 16  # a few tokens: the host's work dominates


def _step(model: TrainLM, batch: tuple, device: torch.device, on: bool):
    x, y = batch  # [B, S] token ids, next-token targets

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=on):
            loss = loss_fn(model(x), y)
        loss.backward()
        model.zero_grad(set_to_none=True)
    return step


def _recorded(step, device: torch.device) -> tuple[int, int]:
    """One step under torch.profiler: its CPU operators and its casts."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
        synchronize(device)
    events = prof.events()
    return len(events), sum(e.name == "aten::_to_copy" for e in events)


def measure(device: torch.device, steps: int = 60) -> dict:
    """The dispatch cost per CPU operator on `device` (module docstring), with its parts."""
    torch.manual_seed(0)
    model = TrainLM(model_args(SIZES["tiny"], VOCAB, CONTEXT)).to(device, torch.bfloat16)
    tokens = torch.randint(VOCAB, (BATCH, CONTEXT + 1), device=device)
    batch = (tokens[:, :-1], tokens[:, 1:])
    off, on = _step(model, batch, device, False), _step(model, batch, device, True)
    ops_off, casts_off = _recorded(off, device)
    ops_on, casts_on = _recorded(on, device)
    x = torch.randn(CONTEXT, SIZES["tiny"].d_model, device=device, dtype=torch.bfloat16)
    cast_us = statistics.median(time_each_us(lambda: x.to(torch.float32), 50, device))
    times = {False: [], True: []}
    for _ in range(steps):  # in turn: a loaded host's drift reaches both alike
        for flag, fn in ((False, off), (True, on)):
            times[flag] += time_each_us(fn, 1, device)
    step_off, step_on = statistics.median(times[False]), statistics.median(times[True])
    pairs = sorted(b - a for a, b in zip(times[False], times[True]))  # each step on less the step off beside it
    casts_us = (casts_on - casts_off) * cast_us
    rest_us = statistics.median(pairs) - casts_us
    quartiles_ns = [(q - casts_us) * 1e3 / ops_off for q in statistics.quantiles(pairs, n=4)[::2]]
    return {"dispatch_ns_per_op": max(rest_us, 0.0) * 1e3 / ops_off, "machine": device_words(device),
            "device": device.type, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_avg_1m": os.getloadavg()[0], "torch": torch.__version__, "host": platform.node(),
            "workload": f"train tiny in bf16, vocab {VOCAB}, batch {BATCH} x {CONTEXT}, forward+backward",
            "steps": steps, "quartiles_ns_per_op": quartiles_ns, "step_off_us": step_off, "step_on_us": step_on,
            "ops_off": ops_off, "ops_on": ops_on,
            "casts_added": casts_on - casts_off, "cast_us": cast_us, "whole_ns_per_op": (step_on - step_off) * 1e3 / ops_off}
