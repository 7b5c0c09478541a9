"""Turns a job's due occurrences into runs and advances the job: the heart of the sweeper,
also called by the API when a new or resumed job fires inside the horizon.

Occurrences are classed by how late they are when materialised:
- older than the catch-up window (or merely missed, under `skip`): one SKIPPED record for
  the whole range, saying why;
- missed but within the window: `run-once` runs the latest and skips the rest, `catch-up`
  runs each;
- due from now - grace up to now + horizon: run.
A SKIPPED range whose count would walk more than MAX_COUNT_WALK occurrences (a union's, or
one under an exclusion cron) is recorded in parts, one a pass (domain.schedule.
countable_through), the job staying due. Occurrences that exclusions take off make no
record: a pass counts them (`excluded`), in the same write as `missed`.
Every run is written with `attribute_not_exists` (the final duplicate defence), then the job
advances with a condition on its rev. A crash between the two only makes the next pass find
the runs already there; a SKIPPED range that meets them records the occurrences nothing
holds yet, each once (`_write_skipped`).

A job referencing calendars has them resolved once per pass (CalendarCache: one read per
calendar per invocation), so every occurrence is computed with their current entries. Its
`next_run_at` follows the schedule without them (domain.schedule.index_schedule): the
sweeper looks at it at the latest at each instant it could fire at whatever the calendars
hold, and a calendar change reaches every occurrence not yet made. A calendar it references
that is missing fails its pass (UnresolvedCalendar): it makes nothing and stays due, looked
at again by each sweep, until the calendar is back (then its misfire policy decides what
fell meanwhile)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..domain.errors import ConcurrentUpdate
from ..domain.instants import Clock
from ..domain.models import Job, JobState, Misfire, Schedule, run_key
from ..domain.run_counts import fold_due
from ..domain.runs import Run, RunState, make_run
from ..domain.schedule import (
    count_excluded,
    count_fires,
    countable_through,
    fires_between,
    index_schedule,
    latest_fire_before,
    next_fire,
    uncovered,
)
from ..observability import logger
from ..store.calendars import CalendarStore
from ..store.definitions import DefinitionStore
from ..store.ports import RunStorePort
from .calendars import CalendarCache
from .definitions import ended_job_expiry
from .job_counts import JobCounts

ONE_SECOND = timedelta(seconds=1)
ACTOR = "sweeper"
_SKIP_WRITE_ROUNDS = 3  # read what holds the range, fill what nothing holds, again if taken


class MaterializeIncomplete(Exception):
    """A range of occurrences could not be given its SKIPPED records this pass; the job is
    not advanced, and the next pass tries again."""


@dataclass
class Materialized:
    job: Job
    created: list[Run] = field(default_factory=list)
    skipped: list[Run] = field(default_factory=list)
    conflicts: int = 0
    advanced: bool = False
    conflict_keys: list[str] = field(default_factory=list)
    excluded: int = 0  # occurrences the pass went past that exclusions took off


@dataclass
class _Plan:
    runs: list[datetime] = field(default_factory=list)
    # (first, last, count, reason): one SKIPPED record stands for the whole range.
    skips: list[tuple[datetime, datetime, int, str]] = field(default_factory=list)
    next_at: datetime | None = None
    backlog: bool = False  # catch-up continues in the next pass


class Materializer:
    def __init__(
        self,
        definitions: DefinitionStore,
        runs: RunStorePort,
        clock: Clock,
        *,
        horizon: timedelta,
        ahead: timedelta | None = None,
        misfire_grace: timedelta = timedelta(seconds=60),
        max_runs_per_pass: int = 500,
        run_retention: timedelta = timedelta(days=30),
        calendars: CalendarStore | None = None,
    ) -> None:
        self._calendars = calendars  # None: a job referencing a calendar cannot be resolved
        self._definitions = definitions
        self._runs = runs
        self._clock = clock
        self.horizon = horizon
        # How far ahead a sweep makes a due job's runs: past the horizon, so a job firing
        # every minute is advanced (a Definitions write and a `due` index move) once for
        # several runs instead of once per run. The API makes runs only up to the horizon.
        self.ahead = max(horizon, ahead or horizon)
        self.misfire_grace = misfire_grace
        self.max_runs_per_pass = max_runs_per_pass
        self._counts = JobCounts(definitions, runs, clock)
        # How long finished runs are kept (RunStore.retention): a job completed by a pass
        # expires that long after its last run, and a margin more (ended_job_expiry).
        self.run_retention = run_retention

    def calendar_cache(self) -> CalendarCache:
        """A fresh cache of the calendars jobs reference: one per invocation."""
        return CalendarCache(self._calendars)

    def materialize(
        self,
        job: Job,
        *,
        actor: str = ACTOR,
        ahead: timedelta | None = None,
        calendars: CalendarCache | None = None,
    ) -> Materialized:
        """Materialise what is due; on a lost race re-read the job and go again (inserts are
        idempotent, so a second pass finds this pass's runs and only advances the job). The
        calendars the job references are read through `calendars` (default: a cache of this
        call's own). Raises UnresolvedCalendar, writing nothing, when one is missing."""
        total = Materialized(job)
        mine: set[str] = set()
        current: Job | None = job
        cache = calendars or self.calendar_cache()
        for _ in range(3):
            if current is None or not current.is_due_indexed:
                break
            schedule = cache.resolved(current.tenant, current.spec.schedule)
            outcome = self._pass(current, self._clock.now(), actor, ahead or self.horizon, schedule)
            mine.update(r.run_key for r in outcome.created + outcome.skipped)
            total.created += outcome.created
            total.skipped += outcome.skipped
            total.conflicts += sum(1 for key in outcome.conflict_keys if key not in mine)
            total.excluded += outcome.excluded
            total.job = outcome.job
            if outcome.advanced or outcome.job.next_run_at is None:
                total.advanced = outcome.advanced
                break
            current = self._definitions.get(job.job_id)
        if total.skipped or total.excluded:
            # One write a pass for both counters, however many occurrences they count.
            missed = sum(r.skipped_count or 1 for r in total.skipped)
            self._definitions.add_stats(job.job_id, missed=missed, excluded=total.excluded)
        if total.conflicts:
            logger.info(
                "occurrences already materialised", extra={"job_id": job.job_id, "count": total.conflicts}
            )
        return total

    def _pass(
        self, job: Job, now: datetime, actor: str, ahead: timedelta, schedule: Schedule | None = None
    ) -> Materialized:
        """One pass over `job`, its occurrences those of `schedule` (its own, calendars resolved)."""
        schedule = schedule or job.spec.schedule
        assert job.next_run_at is not None
        if job.next_run_at > now + self.horizon:
            return Materialized(job, advanced=True)
        plan = self.plan(job, now, ahead, schedule)
        result = Materialized(job)
        previous = run_key(job.job_id, job.last_run_at) if job.last_run_at else None
        written: list[tuple[Run, bool]] = []
        for first, last, count, reason in plan.skips:
            written += self._write_skipped(job, schedule, first, last, count, reason, now=now, actor=actor)
        for at in plan.runs:
            run = make_run(job, at, now=now, actor=actor, previous_run_key=previous)
            previous = run.run_key
            written.append((run, self._runs.insert(run)))
        for run, inserted in written:
            if not inserted:
                result.conflict_keys.append(run.run_key)
            elif run.state is RunState.SKIPPED:
                result.skipped.append(run)
            else:
                result.created.append(run)
        processed = [r.scheduled_for for r, _ in written] + [last for _, last, _, _ in plan.skips]
        advanced = self._advanced(job, plan, processed, now)
        if fold_due(job, advanced, now):
            advanced = self._folded(job, advanced)
        try:
            result.job = self._definitions.save(advanced, previous_state=job.state)
            result.advanced = True
            # The pass went past every occurrence before the job's new cursor (or its last,
            # once it completes): those its exclusions took off are counted, each once.
            end = advanced.next_run_at or max(processed, default=job.next_run_at) + ONE_SECOND
            result.excluded = count_excluded(schedule, job.next_run_at, end)
        except ConcurrentUpdate:
            pass  # another sweeper or a client edit got there first: re-read and go again
        return result

    def _folded(self, job: Job, advanced: Job) -> Job:
        """`advanced` with its counters' fold done now (services.job_counts), or as it is when
        the fold failed (logged; the next advance tries again). Never raises."""
        try:
            self._counts.fold(job)
        except Exception:
            # A fold is bookkeeping: whatever stops it must not stop the job's schedule.
            logger.warning("job counters not folded", extra={"job_id": job.job_id}, exc_info=True)
            return advanced
        return advanced.model_copy(update={"counts_folded_at": self._clock.now()})

    def _advanced(self, job: Job, plan: _Plan, processed: list[datetime], now: datetime) -> Job:
        """`job` moved past the occurrences a pass at `now` handled (`processed`: the instants
        of its runs and the last of each skipped range), as that pass writes it. A job it
        completes gets `expires_at`: ended_job_expiry from its last run's instant (made
        ahead, it may be later than now), or from now."""
        runs_made = job.runs_created + len(plan.runs)
        limit = job.spec.schedule.max_runs
        done = plan.next_at is None or (limit is not None and runs_made >= limit)
        ended_at = max([now, *processed])
        return job.model_copy(
            update={
                "next_run_at": None if done else plan.next_at,
                "state": JobState.COMPLETED if done else JobState.ACTIVE,
                "runs_created": runs_made,
                # None still when a pass found nothing to make (a calendar covers what it reached).
                "last_scheduled_for": max(
                    [*processed, *([job.last_scheduled_for] if job.last_scheduled_for else [])], default=None
                ),
                "last_run_at": plan.runs[-1] if plan.runs else job.last_run_at,
                "expires_at": ended_job_expiry(ended_at, self.run_retention) if done else None,
                "missed_until": (
                    job.missed_until
                    if job.missed_until is not None
                    and plan.next_at is not None
                    and plan.next_at < job.missed_until
                    else None
                ),
            }
        )

    def first_pass(
        self, job: Job, now: datetime, *, most: int, calendars: CalendarCache | None = None
    ) -> tuple[Job, list[Run]] | None:
        """What `materialize` would make of a job not written yet, to be written with it in
        one transaction: the job as that pass leaves it (advanced past its runs, at the rev
        that pass's save gives it) and the runs it makes. `(job, [])` when the job has nothing
        due inside the horizon. None when the pass must run after the job is written instead:
        it would make more than `most` runs, or record a SKIPPED range (whose writes read
        what the store holds)."""
        if not job.is_due_indexed:
            return job, []
        assert job.next_run_at is not None
        if job.next_run_at > now + self.horizon:
            return job, []
        schedule = (calendars or self.calendar_cache()).resolved(job.tenant, job.spec.schedule)
        plan = self.plan(job, now, self.horizon, schedule)
        if plan.skips or len(plan.runs) > most:
            return None
        runs: list[Run] = []
        previous = run_key(job.job_id, job.last_run_at) if job.last_run_at else None
        for at in plan.runs:
            run = make_run(job, at, now=now, actor=ACTOR, previous_run_key=previous)
            previous = run.run_key
            runs.append(run)
        advanced = self._advanced(job, plan, [r.scheduled_for for r in runs], now)
        return advanced.model_copy(update={"rev": job.rev + 1}), runs

    def _write_skipped(
        self,
        job: Job,
        schedule: Schedule,
        first: datetime,
        last: datetime,
        count: int,
        reason: str,
        *,
        now: datetime,
        actor: str,
    ) -> list[tuple[Run, bool]]:
        """One SKIPPED record for the occurrences [first, last] (`count` of them), as (record,
        inserted) pairs. A run already at `first` that stands for less than the range (made by
        an earlier pass whose write of the job was lost, so the job's cursor never moved past
        it; or a backfill) does not stand for the rest: each stretch no stored run holds gets
        a record of its own, so no occurrence is left without one.
        Raises MaterializeIncomplete, so the job is not advanced past the range, when the
        stored runs could not all be read, when the job was saved meanwhile (another pass
        got there: its runs may be landing inside the stretches), or when the stretches keep
        being taken (the next pass starts again from the job as stored)."""
        record = self._skipped(job, first, last, count, reason, now=now, actor=actor)
        written = [(record, self._runs.insert(record))]
        if written[0][1]:
            return written
        for _ in range(_SKIP_WRITE_ROUNDS):
            held, complete = self._runs.occurrences_held(job.job_id, first, last)
            if not complete:
                raise MaterializeIncomplete(
                    f"the runs of {job.job_id} from {first} to {last} are too many to read"
                )
            gaps = uncovered(schedule, first, last, held)
            if not gaps:
                return written
            stored = self._definitions.get(job.job_id)
            if stored is None or stored.rev != job.rev:
                raise MaterializeIncomplete(f"{job.job_id} was written meanwhile; its next pass decides")
            refused = False
            for a, b in gaps:
                stretch = self._skipped(job, a, b, count_fires(schedule, a, b), reason, now=now, actor=actor)
                inserted = self._runs.insert(stretch)
                written.append((stretch, inserted))
                refused = refused or not inserted
            if not refused:
                return written
        raise MaterializeIncomplete(f"occurrences of {job.job_id} from {first} to {last} keep changing")

    @staticmethod
    def _skipped(
        job: Job, first: datetime, last: datetime, count: int, reason: str, *, now: datetime, actor: str
    ) -> Run:
        return make_run(
            job,
            first,
            now=now,
            actor=actor,
            state=RunState.SKIPPED,
            reason=reason,
            skipped_through=last,
            skipped_count=count,
        )

    def plan(
        self, job: Job, now: datetime, ahead: timedelta | None = None, schedule: Schedule | None = None
    ) -> _Plan:
        """Decide, without writing, what each due occurrence becomes: of `schedule`, the job's
        own with the calendars it references resolved (default: the job's, which must then
        reference none). A job referencing calendars is left at the earlier of its next
        occurrence and the first instant past this pass's reach that its schedule without
        calendars fires at (`index_schedule`): never past an occurrence a calendar change
        could bring back, always past the instants this pass considered."""
        schedule = schedule or job.spec.schedule
        index = index_schedule(job.spec.schedule)
        policies = job.spec.policies
        plan = _Plan()
        cursor = job.next_run_at
        if index is not job.spec.schedule and cursor is not None:
            # The cursor follows the schedule without calendars: its first occurrence from there.
            cursor = next_fire(schedule, cursor - ONE_SECOND)
        late_edge = now - self.misfire_grace
        if job.missed_until is not None:
            # Everything before the resume fell while the job was paused: missed however late.
            late_edge = max(late_edge, job.missed_until)
        window_edge = now - timedelta(seconds=policies.catch_up_window_seconds)
        decided = job.missed_windows[-1] if job.missed_windows else None
        if job.missed_until is not None and decided is not None and decided.resumed_at == job.missed_until:
            # The resume decided its pause's occurrences (MissedWindow): its window edge holds
            # for them, whatever this sweeper's clock (skewed, or sweeping late) says.
            window_edge = decided.run_from
        skip_all_missed = policies.misfire is Misfire.SKIP
        expired_edge = late_edge if skip_all_missed else min(window_edge, late_edge)

        # Zone 1: beyond any catch-up (or simply missed, under `skip`). Found and counted
        # without walking every occurrence: a rate is counted, a cron searched backwards.
        # A union's range too long to count in one pass is recorded in parts, one a pass
        # (countable_through); the rest stays due, as a catch-up backlog does.
        if cursor is not None and cursor < expired_edge:
            last = latest_fire_before(schedule, expired_edge, not_before=cursor) or cursor
            counted = countable_through(schedule, cursor, last)
            plan.backlog = counted < last
            count = count_fires(schedule, cursor, counted)
            plan.skips.append((cursor, counted, count, "misfire" if skip_all_missed else "expired"))
            cursor = next_fire(schedule, counted)

        # Zone 2: missed, but inside the catch-up window.
        if cursor is not None and cursor < late_edge and not plan.backlog:
            if policies.misfire is Misfire.RUN_ONCE:
                latest = latest_fire_before(schedule, late_edge, not_before=cursor) or cursor
                if latest > cursor:
                    before = latest_fire_before(schedule, latest, not_before=cursor) or cursor
                    counted = countable_through(schedule, cursor, before)
                    plan.backlog = counted < before
                    count = count_fires(schedule, cursor, counted)
                    plan.skips.append((cursor, counted, count, "misfire"))
                if plan.backlog:
                    cursor = next_fire(schedule, plan.skips[-1][1])
                else:
                    plan.runs.append(latest)
                    cursor = next_fire(schedule, latest)
            else:
                # Catch-up: only as many as this pass writes; the next pass goes on from there.
                missed = [
                    cursor,
                    *fires_between(schedule, cursor, late_edge - ONE_SECOND, self.max_runs_per_pass - 1),
                ]
                plan.runs.extend(missed)
                cursor = next_fire(schedule, missed[-1])
                if cursor is not None and cursor < late_edge:
                    plan.next_at = cursor  # more to catch up: no on-time runs before those
                    plan.backlog = True

        # Zone 3: on time, up to the horizon (or further ahead, for a sweep).
        horizon_end = now + (ahead or self.horizon)
        if cursor is not None and cursor <= horizon_end and not plan.backlog:
            plan.runs.extend([cursor, *fires_between(schedule, cursor, horizon_end, self.max_runs_per_pass)])

        limit = schedule.max_runs
        budget = self.max_runs_per_pass
        if limit is not None:
            budget = min(budget, max(0, limit - job.runs_created))
        if len(plan.runs) > budget:
            plan.runs = plan.runs[:budget]
        last_handled = max([*plan.runs, *[s[1] for s in plan.skips]], default=None)
        if last_handled is None:
            plan.next_at = cursor
        else:
            plan.next_at = next_fire(schedule, last_handled)
        if index is not job.spec.schedule and (plan.next_at is None or plan.next_at > horizon_end):
            plan.next_at = next_fire(index, horizon_end)
        return plan
