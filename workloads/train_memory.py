"""The train workload's memory options and figures, so a trace's memory events can
be checked against the allocator's own counters:

- per timed step, torch.cuda's memory_allocated() before and after it, max_memory_allocated()
  and max_memory_reserved() over it (peaks reset at its start) and memory_reserved() after it
  (None on the CPU, which has no such counters);
- `--extra-memory-mb R:MB[,R:MB]`: rank R holds MB MiB more through each step (allocated at
  the step's start in an `extra_memory` region, freed at its end: inside the profiled window,
  so the CPU allocator's events see it too): a rank that holds more, on purpose;
- `--memory-snapshot`: a PyTorch memory snapshot of the last timed step
  (torch.cuda.memory._record_memory_history around it, dumped to rank{r}.memory.pickle; GPU only);
- `--module-scopes`: each of the model's top-level modules (embedding, every block, the final
  norm, the output layer) opens a region named after it in the forward, so activations are
  grouped by module (tracelab memory's scope).
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Iterator

import torch

from tracelab.run import backends

SNAPSHOT_FILE = "rank{rank}.memory.pickle"
SNAPSHOT_ENTRIES = 200_000  # trace entries the allocator keeps for the snapshot
STEP_FIGURES = ("step_start_allocated_bytes", "step_end_allocated_bytes", "step_peak_allocated_bytes",
                "step_end_reserved_bytes", "step_peak_reserved_bytes")


def held(mib: float | None, device: torch.device) -> Callable[[], contextlib.AbstractContextManager]:
    """A context for one step that holds `mib` MiB on `device` through it (nothing for None)."""
    @contextlib.contextmanager
    def hold() -> Iterator[None]:
        if not mib:
            yield
            return
        with backends.region("extra_memory"):
            block = torch.ones(int(mib * 2**20), dtype=torch.uint8, device=device)  # touched: really held
        try:
            yield
        finally:
            del block

    return hold


def module_scopes(model: torch.nn.Module) -> None:
    """A region per top-level module (by its name; each block of a ModuleList as `layers.i`)."""
    for name, child in model.named_children():
        children = child.named_children() if isinstance(child, torch.nn.ModuleList) else [("", child)]
        for sub, module in children:
            _scoped(module, f"{name}.{sub}" if sub else name)


def _scoped(module: torch.nn.Module, name: str) -> None:
    stacks: list[contextlib.ExitStack] = []

    def enter(*_) -> None:
        stack = contextlib.ExitStack()
        stack.enter_context(backends.region(name))
        stacks.append(stack)

    def leave(*_) -> None:
        stacks.pop().close()

    module.register_forward_pre_hook(enter)
    module.register_forward_hook(leave)


class StepMemory:
    """The allocator's counters around each step (module docstring); lists of None on the CPU."""

    def __init__(self, device: torch.device):
        self.device, self.gpu = device, device.type == "cuda"
        self.figures: dict[str, list] = {k: [] for k in STEP_FIGURES}

    def before(self) -> None:
        if self.gpu:
            torch.cuda.reset_peak_memory_stats(self.device)
        self.figures["step_start_allocated_bytes"].append(torch.cuda.memory_allocated(self.device) if self.gpu else None)

    def after(self) -> None:
        cuda = torch.cuda
        values = ((cuda.memory_allocated, "step_end_allocated_bytes"), (cuda.max_memory_allocated, "step_peak_allocated_bytes"),
                  (cuda.memory_reserved, "step_end_reserved_bytes"), (cuda.max_memory_reserved, "step_peak_reserved_bytes"))
        for fn, key in values:
            self.figures[key].append(fn(self.device) if self.gpu else None)


@contextlib.contextmanager
def snapshot(wanted: bool, out: Path, rank: int) -> Iterator[Path | None]:
    """Record the allocator's history through the block and dump it (GPU; nothing otherwise)."""
    if not wanted:
        yield None
        return
    path = Path(out) / SNAPSHOT_FILE.format(rank=rank)
    torch.cuda.memory._record_memory_history(max_entries=SNAPSHOT_ENTRIES)
    try:
        yield path
        torch.cuda.memory._dump_snapshot(str(path))
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
