"""`make bench-peers`: jobsched's local mode beside procrastinate and APScheduler 3, both on
PostgreSQL, on the same workloads, with the same loopback HTTP receiver as every job's effect.

Runs in its own venv (.venv-peers, bench/peers/requirements.txt): the peers are never part of
the dev dependencies. The pure parts (compute.py, render.py, procfs.py) import nothing of
the peers, so the unit tests and `make bench`'s report use them from the dev venv."""
