"""procrastinate's side of the comparison: the App and its one task, run by the worker that
`procrastinate --app=bench.peers.procrastinate_app.app worker` starts; the app process that
defers jobs on request is `python -m bench.peers.procrastinate_proc`."""

from __future__ import annotations

import os

import procrastinate

from bench.peers import effect

DSN_VARIABLE = "BENCH_PEERS_PROCRASTINATE_DSN"

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=os.environ.get(DSN_VARIABLE, "")))


# A failed effect is retried (3 attempts, 1 s apart), as jobsched retries a failed run.
@app.task(name="bench_effect", retry=procrastinate.RetryStrategy(max_attempts=3, wait=1))
def bench_effect(url: str, job_id: str) -> None:
    effect.post(url, job_id)
