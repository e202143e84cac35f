"""Idle by cause, the words every layer reads alike: the causes (the columns of the idle topic's
step table, which add up to each step's idle), the bound of a step where none is clear and a bound
in words, and how many kernels launched one by one make CUDA graphs worth advising. The idle topic
makes the figures; the findings, the fixes, the gate and steps read them by these names."""
from __future__ import annotations

CAUSES = ("idle_host_ns", "idle_stall_ns", "idle_launch_ns", "idle_sync_ns", "idle_dependency_ns", "idle_other_ns")
HOST_CAUSES = ("idle_host_ns", "idle_stall_ns", "idle_launch_ns", "idle_sync_ns")  # the host bound of a step
UNCLEAR = "unclear"  # no bound: a step's path (the whatif topic's path_bounds digest) or its causes name none
UNCLEAR_WHY = "GPU gaps that no launch, stream order or wait in the trace explains make most of the critical path"
UNCLEAR_CAUSES_WHY = "waits and gaps the trace does not explain make most of its idle"
# CUDA-graph advice (the idle topic's hint, the fixes topic's graphs finding) only where at least
# this many kernels were launched one by one: a graph pays for itself by replacing many launch
# calls (its own launch costs about as much as a few, its capture and instantiation once more); a
# trace of fewer is warm-up or one-off calls (first-call module loading, allocator set-up), idle a
# graph does not remove
MIN_LAUNCHED_FOR_GRAPHS = 32


def bound_words(bound: str, under_profiler_only: bool = False) -> str:
    """'host-bound', or 'no clear bound' for UNCLEAR (UNCLEAR_WHY says why); 'host-bound under the
    profiler' where `under_profiler_only`: the what-if's replay without the profiler says its own
    host cost made the step host-bound (the device paces the step the user runs)."""
    if bound == UNCLEAR:
        return "no clear bound"
    return f"{bound}-bound under the profiler" if under_profiler_only and bound == "host" else f"{bound}-bound"
