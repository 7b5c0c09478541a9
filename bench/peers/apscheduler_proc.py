"""APScheduler 3's side of the comparison, as `python -m bench.peers.apscheduler_proc`: one
process holding a BackgroundScheduler whose job store is SQLAlchemyJobStore on PostgreSQL and
whose executor is a thread pool; jobs are added on request (APScheduler 3 runs jobs in the
process that schedules them)."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler

from bench.peers.child import serve

DSN_VARIABLE = "BENCH_PEERS_APSCHEDULER_DSN"
THREADS = 10
MISFIRE_GRACE_SECONDS = 60


def _scheduler() -> BackgroundScheduler:
    url = os.environ[DSN_VARIABLE].replace("postgresql://", "postgresql+psycopg://", 1)
    return BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=url)},
        executors={"default": ThreadPoolExecutor(THREADS)},
        # The default grace of 1 s would skip a burst's later jobs as misfired: every job runs
        # if its scheduler gets to it within a minute, and each runs once (no coalescing of
        # distinct jobs happens anyway).
        job_defaults={"misfire_grace_time": MISFIRE_GRACE_SECONDS, "coalesce": False, "max_instances": 1},
        timezone=UTC,
    )


def main() -> None:
    scheduler = _scheduler()
    scheduler.start()

    def add(request: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        for job_id, due in request["jobs"]:
            scheduler.add_job(
                "bench.peers.effect:post",
                trigger="date",
                run_date=datetime.fromtimestamp(due, UTC),
                args=[request["url"], job_id],
                id=job_id,
            )
        return {"seconds": time.perf_counter() - started}

    try:
        serve({"add": add})
    finally:
        scheduler.shutdown(wait=True)


if __name__ == "__main__":
    main()
