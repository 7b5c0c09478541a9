"""A sweep tick with catch-up backlogs beside on-time jobs: does a backlog delay anyone?

N backlogged jobs of one tenant (each fired every second and was paused for two days: half
`catch-up` at a rate, half `run-once` on a per-second cron, 31-day windows) sit in the
same shards as M on-time jobs of 20 other tenants. One sweep runs, as the sweeper Lambda
would, and reports how long the tick took, when the last on-time job was materialised, and
how much backlog work was done and how much deferred to the next tick by the time budget.
Planning one backlogged job (no writes) is timed apart: it must cost what a pass writes, not
what was missed (172,800 occurrences here)."""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

T0 = datetime(2026, 11, 2, 8, 0, 0, tzinfo=UTC)
PAUSED = timedelta(days=2)
ON_TIME_TENANTS = 20


def _spec(kind: str) -> Any:
    from jobsched.domain.models import JobSpec

    schedules = {
        "on-time": {"kind": "rate", "every_seconds": 60, "anchor": T0},
        "catch-up": {"kind": "rate", "every_seconds": 1, "anchor": T0 - PAUSED},
        "run-once": {"kind": "cron", "cron": "* * * * * *", "time_zone": "Europe/London"},
    }
    policies = {
        "misfire": "catch-up" if kind == "catch-up" else "run-once",
        "catch_up_window_seconds": 31 * 86400,
    }
    return JobSpec.model_validate(
        {"name": kind, "type": "bench.mark", "schedule": schedules[kind], "policies": policies}
    )


def _job(kind: str, tenant: str, next_run_at: datetime) -> Any:
    from jobsched.domain.models import Job
    from jobsched.services.jobs import new_job_id

    return Job(
        job_id=new_job_id(),
        tenant=tenant,
        spec=_spec(kind),
        next_run_at=next_run_at,
        created_at=T0 - PAUSED,
        updated_at=T0,
    )


def plan_seconds(repeats: int = 5) -> dict[str, float]:
    """CPU time to plan one pass of each backlog kind (no store calls)."""
    from jobsched.domain.instants import ManualClock
    from jobsched.services.materialize import Materializer

    materializer = Materializer(None, None, ManualClock(T0), horizon=timedelta(minutes=2))  # type: ignore[arg-type]
    out = {}
    for kind in ("catch-up", "run-once"):
        job = _job(kind, "backlog", T0 - PAUSED)
        times = []
        for _ in range(repeats):
            started = time.process_time()
            materializer.plan(job, T0)
            times.append(time.process_time() - started)
        out[kind] = statistics.median(times)
    return out


def measure(backlogged: int, on_time: int, shards: int = 4, budget: float = 30.0) -> dict[str, Any]:
    from .amplification import load_jobs, moto_container

    with moto_container(shards) as (ddb, container):
        jobs = [
            _job("catch-up" if i % 2 == 0 else "run-once", "backlog", T0 - PAUSED) for i in range(backlogged)
        ] + [
            _job("on-time", f"tenant-{i % ON_TIME_TENANTS}", T0 + timedelta(seconds=i % 60))
            for i in range(on_time)
        ]
        load_jobs(ddb, [container.definitions._job_item(job) for job in jobs])
        sweeper = container.sweeper
        sweeper.time_budget_seconds = budget
        materializer = container.materializer
        original = materializer.materialize
        finished: dict[str, float] = {}
        written: dict[str, int] = {}
        began = time.perf_counter()

        def timed(job: Any, **kw: Any) -> Any:
            outcome = original(job, **kw)
            finished[job.job_id] = time.perf_counter() - began
            written[job.job_id] = len(outcome.created) + len(outcome.skipped)
            return outcome

        materializer.materialize = timed
        report = sweeper.sweep()
        tick = time.perf_counter() - began
    on_time_ids = {j.job_id for j in jobs if j.tenant != "backlog"}
    backlog_ids = {j.job_id for j in jobs if j.tenant == "backlog"}
    on_time_done = max((finished[j] for j in on_time_ids if j in finished), default=0.0)
    return {
        "backlogged_jobs": backlogged,
        "on_time_jobs": on_time,
        "time_budget_seconds": budget,
        "tick_seconds": round(tick, 2),
        "on_time_done_seconds": round(on_time_done, 2),
        "on_time_swept": sum(1 for j in on_time_ids if j in finished),
        "backlog_swept": sum(1 for j in backlog_ids if j in finished),
        "backlog_deferred": len(report.deferred),
        "backlog_records_written": sum(written.get(j, 0) for j in backlog_ids),
        "runs_created": report.runs_created,
    }


def run(sizes: tuple[int, ...] = (0, 10, 40), on_time: int = 200, budget: float = 30.0) -> dict[str, Any]:
    return {
        "plan_cpu_seconds": plan_seconds(),
        "rows": [measure(n, on_time, budget=budget) for n in sizes],
    }
