"""The sweeper: per shard, read only the jobs due within the horizon and materialise them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..domain.instants import Clock
from ..observability import logger
from ..store.definitions import DefinitionStore
from .materialize import Materializer


@dataclass
class SweepReport:
    shards: list[int] = field(default_factory=list)
    jobs_read: int = 0
    runs_created: int = 0
    skipped_records: int = 0
    conflicts: int = 0
    jobs_completed: int = 0
    failures: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)  # backlog left for the next tick (time budget)

    def add(self, other: SweepReport) -> None:
        self.shards += other.shards
        self.jobs_read += other.jobs_read
        self.runs_created += other.runs_created
        self.skipped_records += other.skipped_records
        self.conflicts += other.conflicts
        self.jobs_completed += other.jobs_completed
        self.failures += other.failures
        self.deferred += other.deferred

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Sweeper:
    def __init__(
        self,
        definitions: DefinitionStore,
        materializer: Materializer,
        clock: Clock,
        *,
        page_size: int = 100,
        max_jobs_per_shard: int = 10_000,
        time_budget_seconds: float = 30.0,
    ) -> None:
        self._definitions = definitions
        self._materializer = materializer
        self._clock = clock
        self.page_size = page_size
        self.max_jobs_per_shard = max_jobs_per_shard
        # Past this, a shard's backlog work waits for the next tick (the sweeper's timeout is 50 s).
        self.time_budget_seconds = time_budget_seconds

    def sweep_shard(self, shard: int) -> SweepReport:
        began = time.monotonic()
        report = SweepReport(shards=[shard])
        until = self._clock.now() + self._materializer.horizon
        start: dict[str, Any] | None = None
        late = self._clock.now() - self._materializer.misfire_grace
        while report.jobs_read < self.max_jobs_per_shard:
            jobs, start = self._definitions.due_jobs(shard, until, limit=self.page_size, start=start)
            # On-time work first: a job with a backlog (due before the grace, e.g. a catch-up
            # after a long pause) sorts first in the index but waits behind the page's on-time
            # jobs, and past the time budget it waits for the next tick instead.
            jobs.sort(key=lambda job: job.next_run_at is not None and job.next_run_at < late)
            for job in jobs:
                backlog = job.next_run_at is not None and job.next_run_at < late
                if backlog and time.monotonic() - began > self.time_budget_seconds:
                    report.deferred.append(job.job_id)
                    continue
                report.jobs_read += 1
                try:
                    outcome = self._materializer.materialize(job, ahead=self._materializer.ahead)
                except Exception:
                    # One bad job must not hold up its shard; it stays due and is retried next tick.
                    logger.exception("materialisation failed", extra={"job_id": job.job_id})
                    report.failures.append(job.job_id)
                    continue
                report.runs_created += len(outcome.created)
                report.skipped_records += len(outcome.skipped)
                report.conflicts += outcome.conflicts
                report.jobs_completed += outcome.advanced and outcome.job.next_run_at is None
            if not start:
                break
        return report

    def sweep(self, shards: list[int] | None = None) -> SweepReport:
        report = SweepReport()
        for shard in shards if shards is not None else range(self._definitions.shard_count):
            report.add(self.sweep_shard(shard))
        return report
