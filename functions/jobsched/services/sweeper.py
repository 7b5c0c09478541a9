"""The sweeper: per shard, read only the jobs due within the horizon and materialise them."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from ..domain.instants import Clock
from ..domain.models import Job
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


T = TypeVar("T")


def round_robin(items: Iterable[T], *, key: Callable[[T], Hashable]) -> Iterator[T]:
    """Items one per key in turn (keys in order of first appearance, each key's items in
    their own order): a, a, a, b becomes a, b, a, a."""
    queues: dict[Hashable, list[T]] = defaultdict(list)
    for item in items:
        queues[key(item)].append(item)
    depth = 0
    while queues:
        for lane in list(queues):
            yield queues[lane][depth]
            if depth + 1 == len(queues[lane]):
                del queues[lane]
        depth += 1


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
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self._definitions = definitions
        self._materializer = materializer
        self._clock = clock
        self.page_size = page_size
        self.max_jobs_per_shard = max_jobs_per_shard
        # Past this, a shard's backlog work waits for the next tick (the sweeper's timeout is 50 s).
        self.time_budget_seconds = time_budget_seconds
        self._timer = timer

    def sweep(self, shards: list[int] | None = None) -> SweepReport:
        """Every due job of the shards is read first; on-time jobs are materialised first, in
        each shard's due order; then backlogs (catch-up after a pause, late jobs), one job per
        tenant in turn, while the invocation's time budget lasts. A tenant's thousand
        backlogged jobs therefore delay neither another tenant's on-time runs nor its one
        backlogged job, and never push the invocation past its timeout."""
        began = self._timer()
        shards = list(shards if shards is not None else range(self._definitions.shard_count))
        report = SweepReport(shards=shards)
        now = self._clock.now()
        late = now - self._materializer.misfire_grace
        on_time: list[Job] = []
        backlog: list[Job] = []
        for shard in shards:
            try:
                due = self._due(shard, now + self._materializer.horizon)
            except Exception:
                # A shard whose index cannot be read (throttled, say) waits for the next tick;
                # the other shards of the group are still swept.
                logger.exception("reading due jobs failed", extra={"shard": shard})
                report.failures.append(f"shard:{shard}")
                due = []
            for job in due:
                (backlog if job.next_run_at is not None and job.next_run_at < late else on_time).append(job)
        for job in on_time:
            self._materialize(job, report)
        for job in round_robin(backlog, key=lambda job: job.tenant):
            if self._timer() - began > self.time_budget_seconds:
                report.deferred.append(job.job_id)
                continue
            self._materialize(job, report)
        return report

    def _due(self, shard: int, until: datetime) -> list[Job]:
        found: list[Job] = []
        start: dict[str, Any] | None = None
        while len(found) < self.max_jobs_per_shard:
            jobs, start = self._definitions.due_jobs(shard, until, limit=self.page_size, start=start)
            found += jobs
            if not start:
                break
        return found

    def _materialize(self, job: Job, report: SweepReport) -> None:
        report.jobs_read += 1
        try:
            outcome = self._materializer.materialize(job, ahead=self._materializer.ahead)
        except Exception:
            # One bad job must not hold up its shard; it stays due and is retried next tick.
            logger.exception("materialisation failed", extra={"job_id": job.job_id})
            report.failures.append(job.job_id)
            return
        report.runs_created += len(outcome.created)
        report.skipped_records += len(outcome.skipped)
        report.conflicts += outcome.conflicts
        report.jobs_completed += outcome.advanced and outcome.job.next_run_at is None
