"""Steps, collectives and who waits on whom: per step and rank, the straggler verdict."""
