"""The sweeper: per shard, read only the jobs due within the horizon and materialise them."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..domain.calendars import UnresolvedCalendar
from ..domain.instants import Clock
from ..domain.metrics import NO_METRICS, Metrics
from ..domain.models import Job
from ..observability import logger
from ..store.definitions import DefinitionStore
from .calendars import CalendarCache
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
    # Due jobs whose items do not parse: left out, logged and counted by the store (UnreadableJobs).
    unreadable: list[str] = field(default_factory=list)

    def add(self, other: SweepReport) -> None:
        self.shards += other.shards
        self.jobs_read += other.jobs_read
        self.runs_created += other.runs_created
        self.skipped_records += other.skipped_records
        self.conflicts += other.conflicts
        self.jobs_completed += other.jobs_completed
        self.failures += other.failures
        self.deferred += other.deferred
        self.unreadable += other.unreadable

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


T = TypeVar("T")


def round_robin(items: Iterable[T], *, key: Callable[[T], Hashable], rotate: int = 0) -> Iterator[T]:
    """Items one per key in turn (keys in order of first appearance, started `rotate` keys
    in; each key's items in their own order): a, a, a, b becomes a, b, a, a."""
    grouped: dict[Hashable, list[T]] = defaultdict(list)
    for item in items:
        grouped[key(item)].append(item)
    order = list(grouped)
    if order:
        first = rotate % len(order)
        order = order[first:] + order[:first]
    queues = {lane: grouped[lane] for lane in order}
    depth = 0
    while queues:
        for lane in list(queues):
            yield queues[lane][depth]
            if depth + 1 == len(queues[lane]):
                del queues[lane]
        depth += 1


def shards_above(shards: Iterable[int], shard_count: int, in_use: int) -> list[int]:
    """The shards at or above `shard_count` (below `in_use`, the highest count in use) that fold
    onto `shards` (t % shard_count in shards): each invocation of a sweeper whose shardCount
    was lowered also sweeps the old shards of its own, so together they sweep every one."""
    mine = set(shards)
    return [t for t in range(shard_count, in_use) if t % shard_count in mine]


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
        max_backlog_per_shard: int = 1_000,
        timer: Callable[[], float] = time.monotonic,
        metrics: Metrics = NO_METRICS,
    ) -> None:
        self._metrics = metrics
        self._definitions = definitions
        self._materializer = materializer
        self._clock = clock
        self.page_size = page_size
        self.max_jobs_per_shard = max_jobs_per_shard
        # Past this, a shard's backlog work waits for the next tick (the sweeper's timeout is 50 s).
        self.time_budget_seconds = time_budget_seconds
        self._timer = timer
        self.max_backlog_per_shard = max_backlog_per_shard

    def sweep(self, shards: list[int] | None = None) -> SweepReport:
        """On-time jobs first, as each page of the `due` index is read; then backlogs
        (catch-up after a pause, jobs found late), one job per tenant in turn, while the
        invocation's time budget lasts. A tenant's thousand backlogged jobs therefore delay
        neither another tenant's on-time runs nor its one backlogged job, and never push the
        invocation past its timeout. At most `max_backlog_per_shard` backlogged jobs are held
        per shard (the rest wait for a later tick), so memory stays bounded.

        A due job whose item does not parse is passed over, and the rest of its shard is
        swept: it is named in the report's `unreadable` (the store logs it with its id and
        counts it, `UnreadableJobs`, which is alarmed), and stays due for the next sweep
        (DefinitionStore.due_jobs says why skipping it loses nothing).

        When the table records a higher shard count in use than this sweeper's (shardCount was
        lowered), the shards above that fold onto `shards` are swept as well, so no job is
        orphaned (each moves to its new shard when it is next written), and every such pass
        logs an error and reports the gap as `ShardCountBelowInUse` for its alarm.

        The calendars due jobs reference are read once each per sweep (one CalendarCache for
        the whole invocation), however many jobs reference them; a job none references
        reads none. A job whose calendar is missing is held: named in `failures`, logged as
        an error naming the calendar, left due, and looked at again by the next sweep."""
        began = self._timer()
        calendars = self._materializer.calendar_cache()
        own = self._definitions.shard_count
        asked = list(shards if shards is not None else range(own))
        shards = asked + shards_above(asked, own, self._shard_count_in_use(own))
        report = SweepReport(shards=shards)
        now = self._clock.now()
        late = now - self._materializer.misfire_grace
        until = now + self._materializer.horizon
        backlog: list[Job] = []
        for shard in shards:
            held = on_time = 0
            start: dict[str, Any] | None = None
            while on_time < self.max_jobs_per_shard:
                try:
                    page = self._definitions.due_jobs(shard, until, limit=self.page_size, start=start)
                except Exception:
                    # A page that cannot be read (throttled, say) ends this shard's reading
                    # until the next tick; what was read is swept, and so are the other shards.
                    logger.exception("reading due jobs failed", extra={"shard": shard})
                    report.failures.append(f"shard:{shard}")
                    break
                report.unreadable += page.unreadable
                start = page.start
                for job in page.jobs:
                    if job.next_run_at is None or job.next_run_at >= late:
                        on_time += 1
                        self._materialize(job, report, calendars)
                    elif held < self.max_backlog_per_shard:
                        held += 1
                        backlog.append(job)
                    else:
                        report.deferred.append(job.job_id)
                if not start:
                    break
        # Tenants take turns from a starting point that moves each minute, so a budget too
        # short for one full turn does not always favour the same tenants.
        for job in round_robin(backlog, key=lambda job: job.tenant, rotate=int(now.timestamp()) // 60):
            if self._timer() - began > self.time_budget_seconds:
                report.deferred.append(job.job_id)
                continue
            self._materialize(job, report, calendars)
        self._emit(report)
        return report

    def _shard_count_in_use(self, own: int) -> int:
        """The highest shard count in use (recorded in the table, raised to `own` if lower), with
        `ShardCountBelowInUse` (the number of shards above `own` still in use; 0 when none) and an
        error log when it is above `own`. When the record cannot be read, `own` (logged)."""
        try:
            in_use = self._definitions.shard_count_in_use()
        except Exception:
            logger.exception("reading the shard count in use failed; sweeping this shardCount's shards")
            return own
        self._metrics.add("ShardCountBelowInUse", max(0, in_use - own))
        if in_use > own:
            logger.error(
                "shardCount is below the highest shard count in use: sweeping the old shards too",
                extra={"shard_count": own, "in_use": in_use},
            )
        return max(own, in_use)

    def _emit(self, report: SweepReport) -> None:
        # Every pass, zeros included: a sweep that made nothing is a data point, not a gap.
        self._metrics.add("JobsSwept", report.jobs_read)
        self._metrics.add("RunsMaterialised", report.runs_created)
        self._metrics.add("OccurrencesSkipped", report.skipped_records)
        self._metrics.add("OccurrenceConflicts", report.conflicts)
        self._metrics.add("SweepFailures", len(report.failures))

    def _materialize(self, job: Job, report: SweepReport, calendars: CalendarCache) -> None:
        report.jobs_read += 1
        try:
            outcome = self._materializer.materialize(job, ahead=self._materializer.ahead, calendars=calendars)
        except UnresolvedCalendar as exc:
            # Firing without the calendar could run what it excludes: the job waits for it.
            logger.error(
                "a calendar the job references is missing: the job makes no run until it is back",
                extra={"job_id": job.job_id, "calendar": exc.name, "field": exc.field},
            )
            report.failures.append(job.job_id)
            return
        except Exception:
            # One bad job must not hold up its shard; it stays due and is retried next tick.
            logger.exception("materialisation failed", extra={"job_id": job.job_id})
            report.failures.append(job.job_id)
            return
        report.runs_created += len(outcome.created)
        report.skipped_records += len(outcome.skipped)
        report.conflicts += outcome.conflicts
        report.jobs_completed += outcome.advanced and outcome.job.next_run_at is None
