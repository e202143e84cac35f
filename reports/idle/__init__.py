"""Why the GPU was idle: per step and rank by cause (host, launch, sync, dependency, other)."""
