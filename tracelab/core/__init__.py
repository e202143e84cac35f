"""The core: the events schema and Meta, errors, options, limits, the classes of kernels, devices' facts, bounded regexes. Imports nothing of the other layers."""
