"""`tracelab factors`: the factors file of `whatif --scenario autocast:bf16=@FILE`
(reports/whatif/bf16_factors.py) measured here for a torch.profiler trace recorded with
record_shapes: each matrix product of the trace timed at its own shapes and strides, fp32 against
bf16 operands, on this machine's device, and autocast's dispatch cost per CPU operator
(autocast_dispatch.py). A bf16 product's speed-up depends on its shape and on the device (a CPU
without native bf16 runs it 5x to 100x slower, a GPU gains nothing on small ones), so the
factors must be measured on the machine that runs the change.

Each distinct shape is timed SHAPE_CALLS calls after WARMUP_CALLS, at most `max_shapes` shapes
(the most multiply-adds a step first); which products hold which shapes and what their change is
are reports/whatif/factor_products.py's, pure.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable

from tracelab.core.errors import UsageError
from tracelab.run.machine import device_words

WARMUP_CALLS, SHAPE_CALLS = 2, 5
MAX_SHAPES = 64
KINETO_SUFFIXES = (".json", ".json.gz")
OTHER_SOURCES = {"proton": "a proton trace keeps no operator shapes",
                 "nsys": "an nsys trace's operator sizes (emit_nvtx) are not read by factors"}
OnProgress = Callable[[str, int, int], None]  # (what is measured now, shapes done, shapes in all)


@dataclass(frozen=True)
class Trace:
    """One rank's trace to measure: its file and events (the events schema)."""

    path: str
    events: object  # pd.DataFrame


def check_shapes(meta) -> None:
    """Refuses, naming the file, a trace whose operators' shapes were not recorded: factors are
    timed at the shapes torch.profiler records with record_shapes=True, in its Kineto JSON."""
    path = str(meta.path)
    if meta.source != "torch":
        why = OTHER_SOURCES.get(meta.source, f"a {meta.source} trace")
        raise UsageError(path, f"{why}: factors need a torch.profiler trace recorded with record_shapes=True "
                               "(tracelab run ... --backend torch)")
    if not path.endswith(KINETO_SUFFIXES):
        raise UsageError(path, "factors read the shapes from the torch.profiler trace itself (.json or .json.gz)")
    if not meta.extras.get("record_shapes"):
        raise UsageError(path, "recorded without shapes (torch.profiler record_shapes=False): no product can be "
                               "timed at its shapes; profile with record_shapes=True (tracelab run ... --backend torch)")


def device_for(asked: str | None, cpu_only: bool):
    """The torch device to time on: `asked`, else the trace's own (cpu for a CPU-only trace, else
    cuda); UsageError where it does not fit the trace or is not here."""
    want = asked or ("cpu" if cpu_only else "cuda")
    if want not in ("cpu", "cuda"):
        raise UsageError("--device", f"{want!r} is not one of cpu, cuda")
    if (want == "cpu") != cpu_only:
        raise UsageError("--device", f"the trace is {'CPU-only' if cpu_only else 'of a GPU'} and the device {want}: "
                                     "factors must be timed on the device that runs the trace's products")
    import torch

    if want == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device", "cuda: no GPU is visible here; run tracelab factors on the GPU machine")
    return torch.device(want)


def measure(traces: list[Trace], device, max_shapes: int | None = MAX_SHAPES, dispatch: bool = True,
            on_progress: OnProgress | None = None) -> dict:
    """The factors file's content (bf16_factors.FORMAT) for the ranks `traces` of one job, timed
    on `device` (module docstring); shapes shared by ranks are timed once."""
    from tracelab.ingest.kineto_leaves import leaves_of_rows
    from tracelab.reports.whatif import factor_products as fp

    found = []
    for t in traces:
        rows = fp.product_rows(t.events)
        found += fp.products(rows, leaves_of_rows(t.path, list(rows["raw_name"]), rows["start_ns"].to_numpy(),
                                                  fp.cpu_only(t.events)))
    if not any(p["leaves"] for p in found):
        raise UsageError(traces[0].path if len(traces) == 1 else "factors",
                         f"no matrix product with its shapes among {len(found)} products (aten::linear, matmul, mm, "
                         "GEMM kernels): autocast:bf16 has nothing here to time")
    import torch

    chosen = fp.shapes_to_time(found, max_shapes)
    said = on_progress or (lambda what, done, total: None)
    times = {}
    for n, (leaf, calls) in enumerate(chosen):
        said(f"timing {leaf[0]} {' x '.join(map(_dims, leaf[1]))}", n, len(chosen))
        fp32, bf16 = (time_shape_us(*leaf, dtype, device) for dtype in (torch.float32, torch.bfloat16))
        times[leaf] = fp.shape_entry(leaf, calls, fp32, bf16)
    measured = None
    if dispatch:
        from tracelab.run.autocast_dispatch import measure as measure_dispatch

        said("measuring autocast's dispatch per CPU operator", len(chosen), len(chosen))
        measured = measure_dispatch(device)
    header = {"device": device.type, "machine": device_words(device),
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_avg_1m": os.getloadavg()[0],
              "torch": torch.__version__, "threads": torch.get_num_threads(), "trace": ", ".join(t.path for t in traces),
              "dispatch_ns_per_op": measured["dispatch_ns_per_op"] if measured else None,
              "dispatch_machine": measured["machine"] if measured else None, "dispatch": measured}
    return fp.factors_doc(found, times, header)


def _dims(dims: tuple) -> str:
    return "[" + ",".join(map(str, dims)) + "]"


def time_shape_us(op: str, dims: tuple, strides: tuple | None, dtype, device) -> float:
    """The median time (us) of one leaf product at `dims` and `strides` (its Input Dims and
    Strides: a transposed operand takes another kernel, in bf16 on a CPU up to 30x faster) with
    operands of `dtype`."""
    import torch

    from tracelab.workloads.harness import time_each_us

    strides = strides or (None,) * len(dims)
    tensors = [_tensor(d, st, dtype, device) if d else None for d, st in zip(dims, strides)]
    fn = {"mm": lambda a, b: torch.mm(a, b), "bmm": lambda a, b: torch.bmm(a, b),
          "addmm": lambda c, a, b: torch.addmm(c, a, b) if c is not None else torch.mm(a, b),
          "baddbmm": lambda c, a, b: torch.baddbmm(c, a, b) if c is not None else torch.bmm(a, b)}[op]
    for _ in range(WARMUP_CALLS):
        fn(*tensors)
    return statistics.median(time_each_us(lambda: fn(*tensors), SHAPE_CALLS, device))


def _tensor(dims: tuple, strides: tuple | None, dtype, device):
    """A tensor of `dims` laid out with `strides` (as the trace recorded it), random values."""
    import torch

    if strides is None or len(strides) != len(dims):
        return torch.randn(*dims, device=device, dtype=dtype)
    return torch.empty_strided(dims, strides, device=device, dtype=dtype).normal_()
