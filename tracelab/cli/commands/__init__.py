"""The CLI's commands, one short function each (tracelab/cli.py registers them on the app)."""
