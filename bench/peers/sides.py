"""The two peers' stacks: their processes started, jobs created, CPU groups named, stopped."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from .child import REPO, Child, environment
from .postgres import Postgres

WORKER_CONCURRENCY = 10
POLL_SECONDS = 0.2  # procrastinate's fetch polling, set to local mode's queue poll


class ProcrastinateStack:
    name = "procrastinate"
    settings = {
        "process": "one worker (`procrastinate worker`) and one app process that defers the jobs",
        "worker": f"concurrency {WORKER_CONCURRENCY} (sync task, run on a thread); LISTEN/NOTIFY on;"
        f" fetch polling every {POLL_SECONDS} s (default 5 s; a job deferred for later is fetched by"
        " polling, not by its insert's NOTIFY); retries: 3 attempts, 1 s apart",
        "store": "PostgreSQL (fsync on), procrastinate's schema",
        "create": "`task.configure(schedule_at=...).defer(...)`, one job a call (one INSERT each)",
    }

    def __init__(self, pg: Postgres, database: str) -> None:
        self.pg = pg
        self.database = database
        self.app: Child | None = None
        self.worker: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        from .procrastinate_app import DSN_VARIABLE

        env = environment(**{DSN_VARIABLE: self.pg.create_database(self.database)})
        self.app = Child("bench.peers.procrastinate_proc", env=env)
        self.app.ask({"op": "schema"})
        self.worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "procrastinate",
                "--app=bench.peers.procrastinate_app.app",
                "worker",
                "--concurrency",
                str(WORKER_CONCURRENCY),
                "--fetch-job-polling-interval",
                str(POLL_SECONDS),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(2.0)
        if self.worker.poll() is not None:
            raise RuntimeError("the procrastinate worker exited at start")

    def create(self, jobs: list[tuple[str, float]], url: str) -> dict[str, Any]:
        assert self.app is not None
        return self.app.ask({"op": "defer", "jobs": jobs, "url": url})

    def groups(self) -> dict[str, tuple[int, tuple[int, ...]]]:
        assert self.app and self.worker and self.pg.pid
        return {"worker": (self.worker.pid, ()), "app": (self.app.pid, ()), "PostgreSQL": (self.pg.pid, ())}

    def own_groups(self) -> tuple[str, ...]:
        return ("worker", "app", "PostgreSQL")

    def stop(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            self.worker.terminate()
            try:
                self.worker.wait(30)
            except subprocess.TimeoutExpired:
                self.worker.kill()
                self.worker.wait()
        if self.app is not None:
            self.app.stop()


class ApschedulerStack:
    name = "APScheduler 3"
    settings = {
        "process": "one process: a BackgroundScheduler that also adds the jobs (APScheduler 3 runs"
        " jobs in the process that schedules them)",
        "worker": f"ThreadPoolExecutor({WORKER_CONCURRENCY}); misfire_grace_time 60 s (with the default 1 s,"
        " a job the scheduler reaches more than 1 s late is skipped), coalesce off; the scheduler"
        " wakes at the next run time it read from the job store, no polling",
        "store": "SQLAlchemyJobStore on PostgreSQL (psycopg 3, fsync on)",
        "create": "`scheduler.add_job(..., trigger='date')`, one job a call",
    }

    def __init__(self, pg: Postgres, database: str) -> None:
        self.pg = pg
        self.database = database
        self.proc: Child | None = None

    def start(self) -> None:
        from .apscheduler_proc import DSN_VARIABLE

        env = environment(**{DSN_VARIABLE: self.pg.create_database(self.database)})
        self.proc = Child("bench.peers.apscheduler_proc", env=env)

    def create(self, jobs: list[tuple[str, float]], url: str) -> dict[str, Any]:
        assert self.proc is not None
        return self.proc.ask({"op": "add", "jobs": jobs, "url": url})

    def groups(self) -> dict[str, tuple[int, tuple[int, ...]]]:
        assert self.proc and self.pg.pid
        return {"scheduler": (self.proc.pid, ()), "PostgreSQL": (self.pg.pid, ())}

    def own_groups(self) -> tuple[str, ...]:
        return ("scheduler", "PostgreSQL")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
