"""One merged Chrome/Perfetto trace of every rank and run."""
