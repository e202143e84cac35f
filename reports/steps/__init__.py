"""The steps topic: per step and rank, the who-waits table and the straggler verdict in words
(the analysis is the timeline layer's: reports/timeline/waits.py)."""
