"""What should I fix first, and how much faster will the step be? The critical path of every
step across host, streams and ranks, and what-if replays. Pure modules: nodes.py
and edges.py (one rank's graph, made in the worker that parsed it), join.py (ranks on one
clock, collectives matched), replay.py (the discrete-event replay), path.py (the critical
path and its composition), scenarios.py, analyse.py (the answer); render.py (table, csv, json). The package
imports none of them: `tracelab whatif --help` reads only command.py.
"""
