"""Job definition use cases: create (idempotent), read, list, update, pause, resume, cancel,
archive."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..domain.calendars import UnresolvedCalendar
from ..domain.errors import (
    ConcurrentUpdate,
    Conflict,
    IdempotencyKeyReused,
    JobschedError,
    LimitExceeded,
    NotFound,
    StorageUnavailable,
    ValidationFailed,
    VersionMismatch,
)
from ..domain.grants import TargetNotGranted
from ..domain.instants import Clock, format_instant
from ..domain.models import MAX_MISSED_WINDOWS, Job, JobSpec, JobState, MissedWindow, Schedule, ScheduleKind
from ..domain.runs import Run, Trigger
from ..domain.schedule import (
    MAX_EXCLUDED_IN_A_ROW,
    Previewed,
    index_schedule,
    members,
    next_fire,
    preview,
    upcoming,
    without_exclusions,
)
from ..domain.signing import SigningSecrets
from ..observability import logger
from ..store.calendars import Reference
from ..store.definitions import (
    LIVE_STATES,
    DefinitionStore,
    Guard,
    NewJob,
    Page,
    ReferencedCalendarMissing,
    over_quota,
)
from ..store.ports import RunReads
from .calendars import CalendarCache, calendar_field, missing_calendar
from .definitions import ended_job_expiry, superseded_definition_expiry

# How often a write that lost a race with the sweeper is retried before giving up with 409.
_WRITE_ATTEMPTS = 5
_BASE32 = "0123456789abcdefghjkmnpqrstvwxyz"
# Reading the runs made ahead for nextFireTimes: a page holds this many more than asked for
# (room for runs that ended early), and at most this many pages are read.
_ENDED_SLACK = 8
_WAITING_PAGES = 4
# A new job firing inside the horizon is written with at most this many first runs in its
# creation's transaction; one that makes more (a short rate) has them made after the write.
_RUNS_WITH_CREATE = 8
# Fire times a job's answer lists with their reasons (`upcomingFireTimes`), as a preview of
# this `count` would: at most as many excluded occurrences again.
UPCOMING_FIRE_TIMES = 5


def new_job_id() -> str:
    """`j_` + 16 random Crockford base32 characters (80 bits); never contains '@' or '#'."""
    return "j_" + "".join(secrets.choice(_BASE32) for _ in range(16))


@dataclass(frozen=True)
class CreateRequest:
    """One job to create: its spec, and the idempotency key and body fingerprint, if any."""

    spec: JobSpec
    idempotency_key: str | None = None
    body_hash: str = ""


@dataclass(frozen=True)
class _Prepared:
    shown: Job  # the job as its creation answers it (before any run is made)
    entry: NewJob  # what is written
    secret: str | None
    materialize_after: bool  # its first runs are made after the write, not with it


@dataclass(frozen=True)
class CreateResult:
    job: Job
    created: bool  # False when an idempotent retry returned the original job
    # The job's webhook signing secret, on the answer that created it only (never on a replay).
    signing_secret: str | None = None


class JobService:
    def __init__(
        self,
        store: DefinitionStore,
        clock: Clock,
        *,
        guard_ttl: timedelta = timedelta(hours=24),
        materialize: Callable[[Job], object] | None = None,
        max_jobs_per_tenant: int = 0,
        requests_per_second: int = 0,
        on_resume: Callable[[Job, Job], None] | None = None,
        runs: RunReads | None = None,
        plan_missed: Callable[[Job, datetime], MissedWindow | None] | None = None,
        authorize_target: Callable[[str, object], None] | None = None,
        first_pass: Callable[..., tuple[Job, list[Run]] | None] | None = None,
        run_request: Callable[[Run], dict[str, Any]] | None = None,
        run_retention: timedelta = timedelta(days=30),
        on_cancel: Callable[[Job], object] | None = None,
        calendars: Callable[[], CalendarCache] = lambda: CalendarCache(None),
    ):
        # A fresh cache of the tenants' calendars per request (services.calendars): a job's
        # references are resolved for its own tenant only; without a store none exists.
        self._calendars = calendars
        self._store = store
        self._clock = clock
        self._guard_ttl = guard_ttl
        self._materialize = materialize
        self.max_jobs_per_tenant = max_jobs_per_tenant
        self.requests_per_second = requests_per_second
        self._on_resume = on_resume  # decides the runs made ahead for occurrences missed while paused
        self._runs = runs  # the runs made ahead, for the instants the job will fire at
        self._plan_missed = plan_missed  # decides, on resume, which occurrences of the pause run
        # (tenant, target) -> None, or raises TargetNotGranted (403) naming the field: an AWS
        # target's call, or a secret an HTTP target's headers reference (TargetAuthority.
        # check_write). Every write of a target is checked (create, batch, update, each
        # notification's); without one nothing is checked.
        self._authorize_target = authorize_target
        # The materialiser's first pass over a new job (Materializer.first_pass) and the write
        # of a run (RunStore.insert_request): a job firing inside the horizon is written with
        # its first runs in its creation's transaction; without them they are made after it.
        self._first_pass = first_pass
        self._run_request = run_request
        # How long finished runs are kept (RunStore.retention): a definition an update
        # replaces is kept for the runs made from it that long after it, and a margin more.
        self._run_retention = run_retention
        # Cancels the cancelled job's runs that have not started (RunService.cancel_unstarted).
        self._on_cancel = on_cancel

    def _authorize(self, tenant: str, spec: JobSpec) -> None:
        """The job's target and each notification's (the secrets their headers reference
        included), as the API names them (`target.…`, `notify.<i>.target.…`)."""
        if self._authorize_target is None:
            return
        if spec.target is not None:
            self._authorize_target(tenant, spec.target)
        for index, notification in enumerate(spec.notify):
            try:
                self._authorize_target(tenant, notification.target)
            except TargetNotGranted as exc:
                raise TargetNotGranted(f"notify.{index}.{exc.field}", exc.rule) from None

    def admit(self, tenant: str) -> None:
        """Count one API request against the tenant's per-second limit, or refuse it (429)."""
        if self.requests_per_second <= 0:
            return
        window = self._clock.now()  # whole seconds: one fixed window per second
        if not self._store.count_request(tenant, window, self.requests_per_second):
            raise LimitExceeded(
                f"more than {self.requests_per_second} requests per second from this tenant; retry shortly",
                limit=self.requests_per_second,
            )

    def _materialize_soon(self, job: Job) -> None:
        """A job that fires inside the horizon gets its first run now rather than at the next
        sweep. Best effort: the job is committed either way, and the sweeper finds it."""
        if self._materialize is None or not job.is_due_indexed:
            return
        try:
            self._materialize(job)
        except Exception:
            logger.exception(
                "materialising at write time failed; the sweeper will", extra={"job_id": job.job_id}
            )

    # --- create ---

    def create(
        self, tenant: str, spec: JobSpec, *, idempotency_key: str | None = None, body_hash: str = ""
    ) -> CreateResult:
        """Create one job (`create_many` of one), raising its refusal."""
        (result,) = self.create_many(tenant, [CreateRequest(spec, idempotency_key, body_hash)])
        if isinstance(result, JobschedError):
            raise result
        return result

    def create_many(
        self, tenant: str, requests: Sequence[CreateRequest]
    ) -> list[CreateResult | JobschedError]:
        """Create each job as `create` would one after another, in order, answering each: its
        CreateResult, or the error a single create would raise (a target not granted, a
        schedule with no occurrence, the quota, a key reused for another body...).

        Each job is written whole in one transaction with its signing secrets, its guard and,
        when it fires inside the horizon, its first runs (the job advanced past them, as the
        materialiser's first pass leaves it); jobs share transactions. A key's first request
        in the list goes first; a later one with the same key is then answered from its guard:
        the same job (not created, as a replay) or idempotency_key_reused."""
        now = self._clock.now()
        results: list[CreateResult | JobschedError | None] = [None] * len(requests)
        prepared: dict[int, _Prepared] = {}
        calendars = self._calendars()
        for index, request in enumerate(requests):
            try:
                prepared[index] = self._prepare(tenant, request, now, calendars)
            except JobschedError as exc:
                results[index] = exc
        tries: dict[int, int] = {}
        pending = sorted(prepared)
        while pending:
            this_round: list[int] = []
            later: list[int] = []
            keys: set[str] = set()
            for index in pending:
                key = requests[index].idempotency_key
                if key is not None and key in keys:
                    later.append(index)
                    continue
                if key is not None:
                    keys.add(key)
                this_round.append(index)
            again = self._write(tenant, requests, prepared, this_round, now, results)
            for index in again:
                tries[index] = tries.get(index, 0) + 1
                if tries[index] >= _WRITE_ATTEMPTS:
                    results[index] = ConcurrentUpdate(
                        "idempotencyKey: concurrent requests with this key; retry"
                    )
            pending = sorted([i for i in again if results[i] is None] + later)
        # One job's runs beyond those written with it are made now, as a single create's
        # always were; a batch's are left to the sweeper's next pass (within a minute): a
        # hundred every-second jobs would otherwise write thousands of runs in one request.
        for index in sorted(prepared) if len(requests) == 1 else ():
            result = results[index]
            if isinstance(result, CreateResult) and result.created and prepared[index].materialize_after:
                self._materialize_soon(result.job)
        return [r if r is not None else ConcurrentUpdate("retry") for r in results]

    def _prepare(
        self, tenant: str, request: CreateRequest, now: datetime, calendars: CalendarCache
    ) -> _Prepared:
        self._authorize(tenant, request.spec)
        spec = with_anchor(request.spec, now)
        resolved = calendars.checked(tenant, spec.schedule)
        job = Job(
            job_id=new_job_id(),
            tenant=tenant,
            spec=spec,
            next_run_at=first_occurrence(spec, now, previous=None, resolved=resolved),
            created_at=now,
            updated_at=now,
            definition_since=1,
            counts_folded_at=now,
        )
        signing = SigningSecrets.first(job.job_id, tenant, now)
        key = request.idempotency_key
        guard = (
            Guard(tenant, key, job.job_id, request.body_hash, now + self._guard_ttl)
            if key is not None
            else None
        )
        written: Job = job
        runs: list[Run] = []
        materialize_after = False
        if self._materialize is not None and job.is_due_indexed:
            first = (
                self._first_pass(job, now, most=_RUNS_WITH_CREATE, calendars=calendars)
                if self._first_pass
                else None
            )
            if first is None:
                materialize_after = True  # after the write, as the sweeper would (best effort)
            else:
                written, runs = first
        run_writes = tuple(self._run_request(run) for run in runs) if runs and self._run_request else ()
        if runs and not run_writes:
            written, materialize_after = job, True
        entry = NewJob(written, signing, guard, run_writes)
        return _Prepared(job, entry, signing.current, materialize_after)

    def _write(
        self,
        tenant: str,
        requests: Sequence[CreateRequest],
        prepared: dict[int, _Prepared],
        indexes: list[int],
        now: datetime,
        results: list[CreateResult | JobschedError | None],
    ) -> list[int]:
        """Write the prepared jobs at `indexes` and answer them; returns those to try again (a
        guard that expired or lost its job meanwhile, a write that kept conflicting)."""
        outcomes = self._store.create_many(
            [prepared[i].entry for i in indexes], now, max_live=self.max_jobs_per_tenant
        )
        again: list[int] = []
        replays: dict[int, str] = {}
        for index, outcome in zip(indexes, outcomes, strict=True):
            request = requests[index]
            if outcome.kind == "created":
                ready = prepared[index]
                results[index] = CreateResult(ready.shown, True, ready.secret)
            elif outcome.kind == "over_quota":
                results[index] = over_quota(self.max_jobs_per_tenant)
            elif outcome.kind == "calendar_missing":
                # Deleted between the check and the write: the write's condition caught it.
                name = outcome.calendar or ""
                results[index] = missing_calendar(calendar_field(requests[index].spec.schedule, name), name)
            elif outcome.kind == "unavailable":
                results[index] = StorageUnavailable("the store is throttling; retry with backoff")
            elif outcome.kind == "conflict":
                if request.idempotency_key is None:
                    results[index] = ConcurrentUpdate("a concurrent request is creating this job; retry")
                else:
                    again.append(index)
            else:
                assert request.idempotency_key is not None
                try:
                    existing = outcome.guard or self._store.get_guard(tenant, request.idempotency_key)
                except StorageUnavailable as exc:
                    results[index] = exc  # others of the batch were written: answer them all the same
                    continue
                if existing is None or existing.expires_at < now:
                    again.append(index)  # the holder was rolled back or expired meanwhile
                elif existing.body_hash != request.body_hash:
                    results[index] = IdempotencyKeyReused(
                        "idempotencyKey: already used for a different request body", jobId=existing.job_id
                    )
                else:
                    replays[index] = existing.job_id
        if replays:
            try:
                originals = {job.job_id: job for job in self._store.get_many(list(replays.values()))}
            except StorageUnavailable as exc:
                for index in replays:
                    results[index] = exc
                return again
            for index, job_id in replays.items():
                original = originals.get(job_id)
                if original is None or original.tenant != tenant:
                    again.append(index)
                else:
                    results[index] = CreateResult(original, False)
        return again

    # --- webhook signing ---

    def rotate_signing_secret(self, tenant: str, job_id: str) -> SigningSecrets:
        """A new signing secret for the job: the last of the secrets returned, shown this once.
        The ones before it keep signing beside it for 24 hours (domain.signing.ROTATION_OVERLAP);
        a job created before jobs had secrets gets its first. Raises NotFound (not this
        tenant's job) or LimitExceeded (too many secrets signing at once)."""
        self.get(tenant, job_id)
        for _ in range(_WRITE_ATTEMPTS):
            now = self._clock.now()
            previous = self._store.signing_secrets(job_id)
            rotated = previous.rotated(now) if previous else SigningSecrets.first(job_id, tenant, now)
            try:
                self._store.save_signing_secrets(rotated, previous=previous)
            except ConcurrentUpdate:
                continue
            logger.info("signing secret rotated", extra={"job_id": job_id})
            return rotated
        raise ConcurrentUpdate(f"the signing secret of job {job_id} is being rotated concurrently; retry")

    # --- reads ---

    def get(self, tenant: str, job_id: str) -> Job:
        job = self._store.get(job_id)
        if job is None or job.tenant != tenant:
            raise NotFound(f"job {job_id} not found")
        return job

    def list_jobs(
        self,
        tenant: str,
        *,
        state: JobState | None,
        limit: int,
        cursor: str | None,
        archived: bool | None = False,
    ) -> Page:
        """One page of the tenant's jobs, newest first, in `state` when given; archived jobs
        are left out (`archived` False, the default), listed alone (True) or with the others
        (None)."""
        return self._store.list_for_tenant(tenant, state=state, limit=limit, cursor=cursor, archived=archived)

    def preview(self, tenant: str, spec: JobSpec, *, after: datetime | None, count: int) -> list[Previewed]:
        """What a job of `spec` would fire at for `tenant`, not saved: its next `count` fire
        times after `after` (default: from now on), with the occurrences its exclusions (the
        tenant's calendars it references included, as they stand) take off among them, each
        with its reason; at most `maxRuns` fire times. Raises ValidationFailed as creating
        such a job would (a schedule that never fires, a dead spec, a missing calendar...)."""
        now = self._clock.now()
        resolved = self._calendars().checked(tenant, spec.schedule)
        first_occurrence(spec, now, previous=None, resolved=resolved)
        limit = spec.schedule.max_runs
        lines = preview(
            resolved,
            after if after is not None else now - timedelta(seconds=1),
            min(count, limit or count),
        )
        return lines

    def calendar_cache(self) -> CalendarCache:
        """A fresh cache of the tenants' calendars: one request's reads of them, shared by
        the answers it computes (`next_fire_times`, `upcoming_fire_times`)."""
        return self._calendars()

    def next_fire_times(
        self, job: Job, count: int = 5, *, calendars: CalendarCache | None = None
    ) -> list[datetime]:
        """The next `count` instants at which the job will fire, ascending (`nextFireTimes`;
        the first is `nextRunAt`): scheduled occurrences at or after now that are going to run.

        - Never in the past: an occurrence the job runs late (the one `run-once` runs after a
          resume, a backlog after downtime) is not one it will fire at, however soon it runs.
        - An occurrence made ahead as a run (the horizon, `sweepAheadSeconds`) counts while
          its run is still waiting; once that run has ended (cancelled, skipped) it does not.
        - None while the job is paused (nothing fires until it is resumed) or cancelled; a
          completed job lists only the runs it made ahead that are still to fire.
        - `maxRuns` and `endAt` are honoured: a run made ahead is one of the runs counted."""
        if count <= 0 or job.state not in (JobState.ACTIVE, JobState.COMPLETED):
            return []
        now = self._clock.now()
        cursor = job.next_run_at if job.state is JobState.ACTIVE else None
        # Runs are made in order, so every one made so far is before the cursor (the first
        # occurrence not made yet); the ones at or after now are the runs made ahead.
        made = self._waiting_runs(job, now, count)
        later: list[datetime] = []
        if cursor is not None:
            left = count
            limit = job.spec.schedule.max_runs
            if limit is not None:
                left = min(left, max(0, limit - job.runs_created))
            schedule = self._resolved(job, calendars or self._calendars())
            if schedule is not None:
                later = upcoming(schedule, max(now, cursor) - timedelta(seconds=1), left)
        return sorted({*made, *later})[:count]

    def upcoming_fire_times(
        self, job: Job, count: int = UPCOMING_FIRE_TIMES, *, calendars: CalendarCache | None = None
    ) -> list[Previewed]:
        """The job's schedule from now on as `POST /v1/schedules/preview` lists a schedule
        (`upcomingFireTimes`), by the same function (domain.schedule.preview) and so at the
        same cost: its next `count` fire times at or after now, with the occurrences its
        exclusions take off among them (at most `count` of those, the earliest), each with
        its reason; the calendars it references are its tenant's, as they stand.

        - Only for an ACTIVE job: [] while it is paused (nothing fires until it is resumed),
          once it is cancelled or completed, and while a calendar it references is missing
          (the sweeper holds such a job).
        - `maxRuns`: the lines end at the job's last fire time. Fire times before `nextRunAt`
          are runs made ahead (counted in `runsCreated`); from it on at most the runs the job
          has left are listed, and the exclusions after the last of them are not.
        - The lines are the schedule's occurrences: a run made ahead that has ended without
          firing (cancelled, skipped) is still listed here; `next_fire_times` leaves it out."""
        if count <= 0 or job.state is not JobState.ACTIVE or job.next_run_at is None:
            return []
        schedule = self._resolved(job, calendars or self._calendars())
        if schedule is None:
            return []
        lines = preview(schedule, self._clock.now() - timedelta(seconds=1), count)
        limit = job.spec.schedule.max_runs
        if limit is None:
            return lines
        left = max(0, limit - job.runs_created)
        last = -1  # the index of the last fire time listed
        for index, line in enumerate(lines):
            if line.fires and line.at >= job.next_run_at:
                if left == 0:
                    break
                left -= 1
            if line.fires:
                last = index
        return lines[: last + 1]

    def _resolved(self, job: Job, calendars: CalendarCache) -> Schedule | None:
        """The job's schedule with its tenant's calendars resolved, or None (logged) when one
        it references is missing."""
        try:
            return calendars.resolved(job.tenant, job.spec.schedule)
        except UnresolvedCalendar as exc:
            # The sweeper holds such a job (services.materialize): it fires at nothing yet.
            logger.warning("a calendar the job references is missing", extra={"calendar": exc.name})
            return None

    def _waiting_runs(self, job: Job, now: datetime, count: int) -> list[datetime]:
        """Instants >= now of the job's scheduled runs made ahead and still open (at most
        `count`, a few small pages read at most; none read when nothing was made ahead)."""
        if self._runs is None or job.last_run_at is None or job.last_run_at < now:
            return []
        end = job.last_run_at + timedelta(seconds=1)
        found: list[datetime] = []
        start = now
        page = count + _ENDED_SLACK
        for _ in range(_WAITING_PAGES):
            runs = self._runs.scheduled_between(job.job_id, start, end, limit=page)
            found += [r.scheduled_for for r in runs if r.trigger is Trigger.SCHEDULE and r.is_open]
            if len(found) >= count or len(runs) < page:
                break
            start = runs[-1].scheduled_for + timedelta(seconds=1)
        return found[:count]

    # --- changes ---

    def update(self, tenant: str, job_id: str, if_match: int, build: Callable[[Job], JobSpec]) -> Job:
        """Replace the spec built from the current job. A schedule change recomputes next_run_at;
        a change of the target or payload makes the new version the job's `definition_since`
        (the definition the runs made before it had is kept for them: `_change`)."""

        def change(job: Job, now: datetime) -> Job:
            if job.state in (JobState.CANCELLED, JobState.COMPLETED):
                hint = (
                    "; to run one of its dead runs with another target or payload, redrive that run"
                    ' with them (POST /v1/runs/{runKey}/redrive {"target": ...})'
                    if job.state is JobState.COMPLETED
                    else ""
                )
                raise Conflict(f"job {job_id} is {job.state.value} and can no longer change{hint}")
            spec = build(job)
            self._authorize(tenant, spec)  # the target as it now stands, changed or not
            updates: dict[str, object] = {"spec": spec}
            if spec.schedule != job.spec.schedule:
                spec = with_anchor(spec, now)
                updates["spec"] = spec
                resolved = self._calendars().checked(tenant, spec.schedule)
                updates["next_run_at"] = first_occurrence(
                    spec, now, previous=job.last_scheduled_for, resolved=resolved
                )
            if _definition_json(spec) != _definition_json(job.spec):
                updates["definition_since"] = job.version + 1
            return _bump(job, now, **updates)

        return self._change(tenant, job_id, if_match, change)

    def pause(self, tenant: str, job_id: str, if_match: int | None = None) -> Job:
        def change(job: Job, now: datetime) -> Job:
            if job.state is JobState.PAUSED:
                return job
            if job.state is not JobState.ACTIVE:
                raise Conflict(f"job {job_id} is {job.state.value}; only an ACTIVE job can be paused")
            return job.paused(now)

        return self._change(tenant, job_id, if_match, change)

    def resume(self, tenant: str, job_id: str, if_match: int | None = None) -> Job:
        """Every occurrence that fell while paused is missed: `missed_until` tells the sweeper
        (next_run_at is kept, so it applies `missedRuns` to them whatever their lateness). Which
        of them run is decided before the write and written with it (`missed_windows`), and
        the runs already made for them are then decided by it (see services/missed.py)."""

        def change(job: Job, now: datetime) -> Job:
            if job.state is JobState.ACTIVE:
                return job
            if job.state is not JobState.PAUSED:
                raise Conflict(f"job {job_id} is {job.state.value}; only a PAUSED job can be resumed")
            window = self._plan_missed(job, now) if self._plan_missed is not None else None
            windows = [*job.missed_windows, window][-MAX_MISSED_WINDOWS:] if window else job.missed_windows
            return _bump(
                job, now, state=JobState.ACTIVE, paused_at=None, missed_until=now, missed_windows=windows
            )

        return self._change(tenant, job_id, if_match, change, after=self._decide_missed)

    def _decide_missed(self, paused: Job, resumed: Job) -> None:
        if self._on_resume is None:
            return
        try:
            self._on_resume(paused, resumed)
        except Exception:
            # The reconciler decides held runs the resume did not get to (settle_held).
            logger.exception("deciding missed runs on resume failed", extra={"job_id": resumed.job_id})

    def cancel(self, tenant: str, job_id: str, if_match: int | None = None) -> Job:
        """CANCELLED, nextRunAt None, and `expires_at` (the table deletes it then:
        ended_job_expiry from now); then its runs that have not started are cancelled at
        once (`on_cancel`, best effort: a run it does not reach is cancelled by the worker's
        or the lease API's check of the job before its effect). A LEASED run is left to its
        holder. Cancelling a cancelled job returns it unchanged."""

        def change(job: Job, now: datetime) -> Job:
            if job.state is JobState.CANCELLED:
                return job
            # A COMPLETED job may still have runs made ahead of time and not yet executed:
            # cancelling it stops them.
            expires_at = ended_job_expiry(now, self._run_retention)
            if job.expires_at is not None:
                expires_at = max(expires_at, job.expires_at)
            return _bump(job, now, state=JobState.CANCELLED, next_run_at=None, expires_at=expires_at)

        return self._change(tenant, job_id, if_match, change, after=self._cancel_runs)

    def archive(self, tenant: str, job_id: str, if_match: int | None = None) -> Job:
        """Archive an ended job (CANCELLED or COMPLETED): `archived_at` now, so listings leave
        it out by default (`list_jobs`); it stays readable by id until its `expires_at`, which
        a job ended before jobs had one gets now (ended_job_expiry from now). Its runs keep
        their own retention. Not a new version: nothing the job does changes (no job event).
        Archiving an archived job returns it unchanged. Raises Conflict (409) for a live job
        (ACTIVE or PAUSED), NotFound, VersionMismatch."""

        def change(job: Job, now: datetime) -> Job:
            if job.archived_at is not None:
                return job
            if job.state in LIVE_STATES:
                raise Conflict(
                    f"job {job_id} is {job.state.value}; only an ended job (CANCELLED or COMPLETED)"
                    " can be archived: cancel it first (DELETE /v1/jobs/{id})"
                )
            expires_at = job.expires_at or ended_job_expiry(now, self._run_retention)
            return job.model_copy(update={"archived_at": now, "expires_at": expires_at})

        return self._change(tenant, job_id, if_match, change)

    def _cancel_runs(self, before: Job, cancelled: Job) -> None:
        if self._on_cancel is None:
            return
        try:
            self._on_cancel(cancelled)
        except Exception:
            # The job is cancelled either way; each run left open ends at its next check.
            logger.exception(
                "cancelling the runs of a cancelled job failed", extra={"job_id": cancelled.job_id}
            )

    def _change(
        self,
        tenant: str,
        job_id: str,
        if_match: int | None,
        change: Callable[[Job, datetime], Job],
        after: Callable[[Job, Job], None] | None = None,
    ) -> Job:
        """Read, check If-Match, apply, write conditioned on rev; re-read when the sweeper got in between.

        A job written without `definition_since` (stored before jobs had it) gets its new
        version as one. When the change moves `definition_since` on, the definition the job
        had from the old one is stored first (DefinitionStore.save_definition), so a run made
        from it finds it whatever it reads after; a job write refused after it leaves an
        unreferenced copy, harmless. The stored definition expires with its own write
        (superseded_definition_expiry from the time of the change): no later write deletes
        it, whatever becomes of the job."""
        for _ in range(_WRITE_ATTEMPTS):
            job = self.get(tenant, job_id)
            if if_match is not None and if_match != job.version:
                raise VersionMismatch(
                    f"If-Match: version {if_match} is not current", currentVersion=job.version
                )
            now = self._clock.now()
            changed = change(job, now)
            if changed is job:
                return job
            expires_at = superseded_definition_expiry(now, self._run_retention)
            if job.definition_since is None and _definition_json(changed.spec) != _definition_json(job.spec):
                # Since when the job has its definition is unknown (stored before jobs had
                # one, or rewritten by an earlier release, which drops the attribute): the
                # one it had is kept under its current version, which runs made from that
                # version find (services.definitions).
                self._store.save_definition(
                    job.job_id, job.version, job.spec.target, job.spec.payload, expires_at=expires_at
                )
            if changed.definition_since is None:
                changed = changed.model_copy(update={"definition_since": changed.version})
            if job.definition_since is not None and changed.definition_since != job.definition_since:
                self._store.save_definition(
                    job.job_id, job.definition_since, job.spec.target, job.spec.payload, expires_at=expires_at
                )
            try:
                saved = self._store.save(
                    changed, previous_state=job.state, references=_references(job, changed)
                )
            except ConcurrentUpdate:
                continue
            except ReferencedCalendarMissing as exc:
                raise missing_calendar(calendar_field(changed.spec.schedule, exc.name), exc.name) from None
            if after is not None:
                after(job, saved)
            if saved.next_run_at != job.next_run_at or saved.state is not job.state:
                self._materialize_soon(saved)
            return saved
        raise ConcurrentUpdate(f"job {job_id} is changing concurrently; retry")


def _references(before: Job, after: Job) -> tuple[Reference, ...]:
    """The calendars a live job starts (1) or stops (-1) referencing as it changes from
    `before` to `after` (one that ends stops referencing all: store.definitions' save)."""
    if before.state not in LIVE_STATES or after.state not in LIVE_STATES:
        return ()
    old, new = before.spec.schedule.calendar_names, after.spec.schedule.calendar_names
    added = [Reference(after.tenant, name, 1) for name in new if name not in old]
    return (*added, *(Reference(after.tenant, name, -1) for name in old if name not in new))


def _definition_json(spec: JobSpec) -> str:
    """The spec's target and payload as compared across an update (JSON: `1` and `true` differ)."""
    return spec.definition.model_dump_json(exclude_none=True)


def _bump(job: Job, now: datetime, **updates: object) -> Job:
    return job.model_copy(update={**updates, "version": job.version + 1, "updated_at": now})


def with_anchor(spec: JobSpec, now: datetime) -> JobSpec:
    """A rate schedule counts from startAt, else from when it was created or changed."""
    schedule = spec.schedule
    if not schedule.counts_from_anchor or schedule.anchor is not None:
        return spec
    anchored = schedule.model_copy(update={"anchor": schedule.start_at or now})
    return spec.model_copy(update={"schedule": anchored})


def first_occurrence(
    spec: JobSpec, now: datetime, *, previous: datetime | None, resolved: Schedule | None = None
) -> datetime:
    """The job's `next_run_at` for a new or changed schedule, or a ValidationFailed naming the
    field. `resolved` is the schedule with the calendars it references resolved (default: the
    spec's, which then references none): it must fire. The instant returned is its first
    occurrence, or for a schedule referencing calendars, the first its index fires at
    (`index_schedule`: never later, so a calendar change reaches every occurrence)."""
    schedule = resolved or spec.schedule
    window = timedelta(seconds=spec.policies.catch_up_window_seconds)
    if schedule.end_at is not None and schedule.end_at <= now:
        raise ValidationFailed("endAt", f"must be in the future (now is {format_instant(now)})")
    if schedule.kind is ScheduleKind.ONCE:
        assert schedule.at is not None
        if schedule.at < now - window:
            raise ValidationFailed(
                "runAt",
                f"is in the past beyond the catch-up window of {int(window.total_seconds())} s "
                f"(now is {format_instant(now)})",
            )
        after = min(schedule.at, now) - timedelta(seconds=1)
    else:
        after = now - timedelta(seconds=1)
    if previous is not None and previous > after:
        after = previous  # never re-fire an instant that already has a run
    raw = without_exclusions(schedule)
    for index, member in enumerate(members(raw) if raw.kind is ScheduleKind.UNION else ()):
        # A spec that never fires again is dead weight in every sweep of the job: refused.
        if next_fire(member, after) is None:
            raise ValidationFailed(f"specs.{index}", "has no occurrence within startAt/endAt from now on")
    found = next_fire(schedule, after)
    if found is None and schedule.exclude and next_fire(raw, after) is not None:
        raise ValidationFailed(
            "exclude",
            f"covers every occurrence within startAt/endAt from now on (or more than "
            f"{MAX_EXCLUDED_IN_A_ROW} in a row, or eight years of them)",
        )
    if found is None:
        field = {
            ScheduleKind.ONCE: "runAt",
            ScheduleKind.CRON: "cron",
            ScheduleKind.RATE: "every",
            ScheduleKind.UNION: "specs",
        }
        raise ValidationFailed(field[schedule.kind], "has no occurrence within startAt/endAt from now on")
    if schedule is spec.schedule:
        return found
    return next_fire(index_schedule(spec.schedule), after) or found
