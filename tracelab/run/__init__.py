"""Running workloads: the runner, torchrun, the machine, the profiling backends a workload imports."""
