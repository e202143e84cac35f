"""Parsers: one module per trace format, each with read(path) -> Profile."""
