"""Each workload's options, parsed and checked without torch: the launcher (tracelab run) checks
them before it starts anything, in an instant and without holding torch through the run, and the
workload's ranks parse the same options with the same code, deciding `gpu` with torch.

A module here offers

    def parse(argv: list[str] | None, gpu: bool) -> argparse.Namespace  # UsageError on bad input
    def needs_torch(args) -> bool   # options whose checks only the workload's own parse can make

and, where the profiled window is not all the steps, profiled_steps(config) -> int. Nothing
here imports torch (tests/test_launch_imports.py)."""
