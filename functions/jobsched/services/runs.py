"""Run use cases: read runs and dead letters, trigger, backfill, redrive, cancel, and the lease
protocol for external workers (claim, heartbeat, complete under the fence).

Every change is a conditional write on the run as read, so a concurrent worker, outbox or
reconciler either wins cleanly or makes this call fail with 409; nothing is overwritten."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from ..domain import lifecycle
from ..domain.errors import (
    Conflict,
    DefinitionMissing,
    EffectMayRepeat,
    ExecutionError,
    FieldProblem,
    JobschedError,
    NotFound,
    PermanentError,
    RetryableError,
    StaleFence,
    TenantAtLimit,
    ValidationFailed,
)
from ..domain.instants import Clock, format_instant
from ..domain.models import Job, JobState, Overlap, RunFix, Target
from ..domain.run_listing import RunFilter
from ..domain.run_status import Surroundings, waiting_for
from ..domain.runs import CLAIMABLE_STATES, OPEN_STATES, Run, RunState, Trigger, make_run
from ..domain.schedule import fires_in, whole_second_up
from ..observability import logger
from ..store.definitions import DefinitionStore
from ..store.runs import RunChanged, RunPage, RunStore, RunsView, SummaryPage
from .attempt import Admission, Attempts
from .calendars import CalendarCache
from .completion import Completer, Ending
from .job_counts import JobCounts

# A write that lost a race with a heartbeat or the outbox is retried on a fresh read this often.
_WRITE_ATTEMPTS = 5
# Cancelling a job reads its runs newest first in pages of this many, at most this many
# pages: the runs made ahead (sweepAheadSeconds' worth) and the due ones still waiting. The
# cancel answers an API request: each run costs a conditional write and its job's counter,
# so 500 runs (about 1,000 calls) stay well inside API Gateway's 29 s; a run past them ends
# at its claim's check of the job, as before.
CANCEL_PAGE = 100
CANCEL_PAGES = 5
# A lease call reads at most this many pages of one type's claim index, each of at least
# CLAIM_PAGE_MIN entries: runs that cannot be handed out (held by an overlap policy, unreadable)
# at the head are passed over, and a call stays bounded in reads however many there are.
CLAIM_PAGES = 5
CLAIM_PAGE_MIN = 10

LeaseOutcome = Literal["succeeded", "failed"]


@dataclass(frozen=True)
class BackfillResult:
    created: list[str]
    existing: list[str]  # occurrences that already had a run (scheduled, earlier backfill...)


@dataclass(frozen=True)
class JobSummary:
    job: Job
    last_runs: list[Run]
    counters: dict[str, int]


@dataclass(frozen=True)
class RunDetail:
    """A run as its detail shows it: holding the target and payload it runs with, or, when
    `definition_available` is False, neither (the definition of the job version it was made
    from is stored nowhere any more: services.definitions)."""

    run: Run
    definition_available: bool = True


BulkAction = Literal["redrive", "discard"]


@dataclass(frozen=True)
class DeadLetterSelection:
    """Which dead letters a bulk request changes: `run_keys`, or those the filters keep (one
    page of `limit`, from `cursor`), and how."""

    reason: str
    dry_run: bool = False
    run_keys: Sequence[str] | None = None
    job_id: str | None = None
    error_class: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 100
    cursor: str | None = None
    accept_repeated_effect: bool = False
    fix: RunFix | None = None  # redrive only, with job_id: each run's target/payload replaced


@dataclass
class BulkOutcome:
    request_id: str
    dry_run: bool
    run_keys: list[str] = field(default_factory=list)  # changed (a dry run: would be)
    refused: list[tuple[str, str, str]] = field(default_factory=list)  # (run key, code, why)
    next_cursor: str | None = None


class RunService:
    def __init__(
        self,
        definitions: DefinitionStore,
        runs: RunStore,
        completer: Completer,
        clock: Clock,
        *,
        max_backfill: int = 1000,
        is_external: Callable[[Run], bool] = lambda run: False,
        authorize_target: Callable[[str, object], None] | None = None,
        calendars: Callable[[], CalendarCache] = lambda: CalendarCache(None),
    ) -> None:
        self._calendars = calendars  # a backfill's occurrences leave out what they exclude
        # (tenant, target) -> None, or raises TargetNotGranted (403) naming the field: the
        # check every job write of a target passes (services.jobs), applied to a redrive's fix
        # (its AWS target's call, or the secrets its HTTP headers reference).
        self._authorize_target = authorize_target
        self._definitions = definitions
        self._slots = completer.slots  # claimed here, released by the completer
        self._is_external = is_external
        self._runs = runs
        self._completer = completer
        self._clock = clock
        self._attempts = Attempts(definitions, runs, completer, clock)
        self._counts = JobCounts(definitions, runs, clock)
        self.max_backfill = max_backfill

    # --- reads ---

    def _job(self, tenant: str, job_id: str) -> Job:
        job = self._definitions.get(job_id)
        if job is None or job.tenant != tenant:
            raise NotFound(f"job {job_id} not found")
        return job

    def list_runs(
        self, tenant: str, job_id: str, limit: int, cursor: str | None, view: RunsView = "history"
    ) -> RunPage:
        """One page of the tenant's job's runs in `view` (store.runs.RunStore.list_for_job);
        raises NotFound for a job that is not the tenant's."""
        self._job(tenant, job_id)
        return self._runs.list_for_job(job_id, limit=limit, cursor=cursor, view=view, now=self._clock.now())

    def get_run(self, tenant: str, run_key: str) -> Run:
        # Read by the parsed instant so any RFC 3339 spelling of it finds the run.
        run = self._runs.get_by_key(run_key)
        if run is None or run.tenant != tenant:
            raise NotFound(f"run {run_key} not found")
        return run

    def run_detail(self, tenant: str, run_key: str) -> RunDetail:
        """`get_run`, holding the target and payload the run runs with (services.definitions:
        its job read for one that references the job's). One whose definition is found
        nowhere is answered without them and `definition_available` False (its next attempt
        ends it DEAD `DefinitionMissing`). Raises NotFound."""
        run = self.get_run(tenant, run_key)
        try:
            return RunDetail(self._attempts.resolver.resolved(run))
        except DefinitionMissing:
            logger.warning("run definition missing", extra={"run_key": run.run_key})
            return RunDetail(run, definition_available=False)

    def waiting(self, tenant: str, runs: Sequence[Run]) -> dict[str, str]:
        """Why each open run of `runs` (all of `tenant`) is not running now (domain.run_status),
        by run key; runs that are running or finished are left out. Reads what the runs do not
        say: each job's state (once per job), the tenant's live leases (once, when it has a
        limit and some run waits for a worker), and for a due run under `overlap: buffer-one`
        the earlier runs that may buffer it (up to the overlap walk's limit). Writes nothing."""
        now = self._clock.now()
        jobs: dict[str, Job | None] = {}
        leases: list[int] = []
        found: dict[str, str] = {}
        for run in runs:
            if not run.is_open or run.lease_live(now):
                continue
            if run.job_id not in jobs:
                jobs[run.job_id] = self._definitions.get(run.job_id)
            stored_job = jobs[run.job_id]
            limit = self._slots.limit if self._slots is not None else 0
            waits_for_worker = run.state is RunState.QUEUED and run.due_at <= now and not run.blocked_by
            if limit and waits_for_worker and not leases:
                assert self._slots is not None
                leases.append(sum(1 for h in self._slots.holders(tenant) if h.lease_until > now))
            behind = self._attempts.buffered_behind(run, now)
            around = Surroundings(
                external=self._is_external(run),
                job_state=stored_job.state if stored_job is not None else None,
                tenant_leases=leases[0] if leases else None,
                tenant_limit=limit,
                buffered_behind=behind.run_key if behind is not None else None,
            )
            sentence = waiting_for(run, now, around)
            if sentence is not None:
                found[run.run_key] = sentence
        return found

    def list_across_jobs(
        self, tenant: str, run_filter: RunFilter, limit: int, cursor: str | None
    ) -> SummaryPage:
        """One page of the tenant's runs across its jobs that `run_filter` keeps, newest
        scheduled first, those due by now unless the filter names an `until`
        (store.runs.RunStore.list_for_tenant); raises NotFound for a job filter naming a
        job that is not the tenant's."""
        if run_filter.job_id is not None:
            self._job(tenant, run_filter.job_id)
        return self._runs.list_for_tenant(
            tenant, run_filter, limit=limit, cursor=cursor, due_by=self._clock.now()
        )

    def list_dead(self, tenant: str, limit: int, cursor: str | None) -> RunPage:
        return self._runs.list_dead(tenant, limit=limit, cursor=cursor)

    def summary(self, tenant: str, job_id: str, *, last: int = 5) -> JobSummary:
        job = self._job(tenant, job_id)
        # Runs are made up to the horizon ahead; "last runs" are the ones already due.
        due = self._runs.list_for_job(job_id, limit=last, cursor=None, view="history", now=self._clock.now())
        return JobSummary(job, due.items, self._counts.counters(job))

    # --- new runs ---

    def trigger(self, tenant: str, job_id: str, actor: str) -> Run:
        """A manual run now, with a key of its own (`<jobId>@<now>~m<random>`): it never
        collides with the schedule's run of the same second, nor with another trigger."""
        job = self._active_job(tenant, job_id, "triggered")
        now = self._clock.now()
        for _ in range(_WRITE_ATTEMPTS):
            run = make_run(job, now, now=now, actor=actor, trigger=Trigger.MANUAL)
            if self._runs.insert(run):
                return run
            # Refused: the key is taken — by this very write if the SDK re-sent a request the
            # table had applied (a random key nobody else writes). Then that is the run, not
            # a reason to make a second one.
            stored = self._runs.get_by_key(run.run_key)
            if stored is not None and self._runs.written_as(stored, run):
                return stored
        raise Conflict(f"job {job_id}: could not find an unused manual run key; retry")

    def backfill(
        self, tenant: str, job_id: str, start: datetime, end: datetime, actor: str
    ) -> BackfillResult:
        """A run for every past occurrence in the half-open window [start, end) that has none
        yet: one at `start` is made, one at `end` is not (the next window starts there).
        Raises ValidationFailed naming `start` for an empty window (start >= end), `end` for
        one reaching past now, and both when it holds more than `max_backfill` occurrences.

        Without overlap ("skip"/"buffer-one") the runs are chained: each waits on the previous
        occurrence's run through `blocked_by`, and each names its successor in `blocks`. The
        outbox does not publish a blocked run and it is not claimable; when a run ends, the
        completion unblocks its successor, and the reconciler unblocks any a lost unblocking
        left behind. An occurrence that already had a run is left alone (its successor is
        then released by the reconciler once that run is terminal)."""
        now = self._clock.now()
        problems: list[FieldProblem] = []
        if start >= end:
            problems.append(FieldProblem("start", "must be before end: [start, end) is empty otherwise"))
        # Occurrences are whole seconds: an end within the current second (a client's "now"
        # with its fraction) reaches the occurrence at now at most, none in the future.
        if whole_second_up(end) > now + timedelta(seconds=1):
            problems.append(FieldProblem("end", f"must not be in the future (now is {format_instant(now)})"))
        if problems:
            raise ValidationFailed(problems[0].field, problems[0].rule, *problems[1:])
        job = self._active_job(tenant, job_id, "backfilled")
        schedule = self._calendars().checked(tenant, job.spec.schedule)
        times = fires_in(schedule, start, end, limit=self.max_backfill + 1)
        if len(times) > self.max_backfill:
            rule = f"the range holds more than {self.max_backfill} occurrences; backfill it in parts"
            raise ValidationFailed("start", rule, FieldProblem("end", rule))
        chained = job.spec.policies.overlap is not Overlap.ALLOW
        created: list[str] = []
        existing: list[str] = []
        runs = [make_run(job, at, now=now, actor=actor, trigger=Trigger.BACKFILL) for at in times]
        for index, run in enumerate(runs):
            if chained:
                # Each run names its successor so finishing it releases the next one at once.
                run = run.model_copy(
                    update={
                        "blocked_by": runs[index - 1].run_key if index else None,
                        "blocks": runs[index + 1].run_key if index + 1 < len(runs) else None,
                    }
                )
            (created if self._runs.insert(run) else existing).append(run.run_key)
        return BackfillResult(created, existing)

    def _active_job(self, tenant: str, job_id: str, verb: str) -> Job:
        job = self._job(tenant, job_id)
        if job.state is not JobState.ACTIVE:
            raise Conflict(
                f"job {job_id} is {job.state.value}; only an ACTIVE job can be {verb}",
                state=job.state.value,
            )
        return job

    # --- changes by the caller ---

    def redrive(
        self,
        tenant: str,
        run_key: str,
        actor: str,
        reason: str | None,
        *,
        accept_repeated_effect: bool = False,
        fix: RunFix | None = None,
    ) -> Run:
        """Reopen a DEAD run under the same key, with a fresh attempt series. The transition
        (actor, reason) is the audit record; the run key keeps effects idempotent.

        An at-most-once run whose effect may have started (it died `AtMostOnce`, or any
        attempt marked its effect started) would run its effect again: refused with 409
        `effect_may_repeat` unless `accept_repeated_effect`, which the history records.

        `fix` replaces the run's target and/or payload for the new series (its job is left
        as it is, so this is also how a COMPLETED one-time job's dead run gets a corrected
        target); the history entry names what was replaced. Raises ValidationFailed (400) for
        a target on a run that has none (its type runs in a handler or an external worker)
        and TargetNotGranted (403) for a target the tenant may not call or whose headers
        reference a secret it was not granted, before anything is written. A result an earlier
        attempt saved is still replayed, not sent to the new target: one effect per run."""
        if fix is not None:
            self._authorize_fix(tenant, fix)
        return self._reopen(tenant, run_key, actor, reason, accept_repeated_effect, fix)

    def _reopen(
        self,
        tenant: str,
        run_key: str,
        actor: str,
        reason: str | None,
        accept_repeated_effect: bool,
        fix: RunFix | None,
    ) -> Run:
        """`redrive` once its fix's target is authorised (by the caller, once per request)."""
        run = self.get_run(tenant, run_key)
        if run.state is not RunState.DEAD:
            raise Conflict(
                f"run {run.run_key} is {run.state.value}; only a DEAD run can be redriven",
                state=run.state.value,
            )
        if fix is not None:
            self._check_fix(run, fix)
            changed = fix.describe()
            reason = f"{changed}; {reason}" if reason else changed
        if lifecycle.effect_may_have_run(run):
            if not accept_repeated_effect:
                raise EffectMayRepeat(
                    f"run {run.run_key} is at-most-once and its effect may already have run: a redrive"
                    " runs it again; send acceptRepeatedEffect: true to redrive it anyway",
                    field="acceptRepeatedEffect",
                )
            accepted = "at-most-once effect may repeat: accepted by the caller"
            reason = f"{reason}; {accepted}" if reason else accepted
        now = self._clock.now()
        # A concurrent change is a 409 (concurrent_update).
        fixes = fix.fields() if fix is not None else None
        own = self._own_definition(run, fix) if fix is not None else None
        return self._runs.commit(
            run,
            lambda r: lifecycle.redrive(
                r.with_own_definition(*own) if own is not None else r,
                now=now,
                actor=actor,
                reason=reason,
                fixes=fixes,
            ),
        )

    def _own_definition(self, run: Run, fix: RunFix) -> tuple[Target | None, Any] | None:
        """The definition a fixed run takes as its own before `fix` applies to it: the one it
        runs with (services.definitions), for a run that references its job's (a redrive's
        fix is the run's alone; the item may grow); None for a run whose own it already is.
        Conflict (409) when it cannot be found and the fix does not replace all of it."""
        if run.definition_since is None:
            return None
        if fix.replaces_payload and (fix.target is not None or not run.has_target):
            return None, None  # everything replaced: nothing of the old definition is kept
        try:
            return self._attempts.resolver.resolve(run)
        except DefinitionMissing as exc:
            raise Conflict(
                f"{exc.message}: a redrive can fix it only by replacing its target and payload both",
                state=run.state.value,
            ) from None

    def _authorize_fix(self, tenant: str, fix: RunFix) -> None:
        """TargetNotGranted (403) for a fix's target the tenant may not call, or whose headers
        reference a secret it was not granted; nothing written."""
        if fix.target is not None and self._authorize_target is not None:
            self._authorize_target(tenant, fix.target)

    @staticmethod
    def _check_fix(run: Run, fix: RunFix) -> None:
        """ValidationFailed (400) for a fix this run cannot take (see `redrive`)."""
        if fix.target is not None and not run.has_target:
            raise ValidationFailed(
                "target",
                "this run has no target to replace: its type runs in a handler or an external worker",
            )

    def bulk_dead_letters(
        self, tenant: str, action: BulkAction, selection: DeadLetterSelection, actor: str
    ) -> BulkOutcome:
        """Redrive or discard (CANCELLED) the tenant's dead letters that `selection` names:
        its run keys, or one page (at most `limit`) of those its filters keep from the
        runs-by-tenant listing, resumable from `cursor`. Each run changed gets its own
        history entry naming the request (`request_id`); a run that is not the tenant's,
        not DEAD (any more), or at-most-once with an effect that may have run (redrive,
        without `accept_repeated_effect`) is refused on its own, never stopping the rest. A
        dry run changes nothing and answers what it would change.

        `selection.fix` (a redrive of one job's dead letters, `job_id` set) is applied to each
        run redriven; a target the tenant may not call, or whose headers reference a secret it
        was not granted, refuses the whole request (403) before any run is changed, dry run
        or not: the fix is one value for every run."""
        fix = selection.fix
        if fix is not None:
            if action != "redrive" or selection.job_id is None:
                raise ValidationFailed(
                    "target", "a fix applies only to a redrive of one job's dead letters (jobId)"
                )
            self._authorize_fix(tenant, fix)  # once for the request, not once a run
        request_id = "bulk_" + secrets.token_hex(8)
        cursor: str | None = None
        if selection.run_keys is not None:
            keys = list(dict.fromkeys(selection.run_keys))
        else:
            page = self._runs.list_for_tenant(
                tenant,
                RunFilter(
                    states=frozenset({RunState.DEAD}),
                    job_id=selection.job_id,
                    error_class=selection.error_class,
                    time_field="finished",
                    since=selection.since,
                    until=selection.until,
                ),
                limit=selection.limit,
                cursor=selection.cursor,
                due_by=None,
            )
            keys, cursor = [summary.run_key for summary in page.items], page.cursor
        outcome = BulkOutcome(request_id=request_id, dry_run=selection.dry_run, next_cursor=cursor)
        reason = f"{selection.reason} ({action} request {request_id})"
        for key in keys:
            try:
                if selection.dry_run:
                    self._bulk_check(tenant, key, action, selection.accept_repeated_effect, selection.fix)
                elif action == "redrive":
                    self._reopen(tenant, key, actor, reason, selection.accept_repeated_effect, selection.fix)
                else:
                    self._discard(tenant, key, actor, reason)
            except JobschedError as exc:  # this run's own refusal (or the store's 503)
                outcome.refused.append((key, exc.code, str(exc)))
                continue
            outcome.run_keys.append(key)
        return outcome

    def _bulk_check(
        self, tenant: str, run_key: str, action: BulkAction, accept: bool, fix: RunFix | None
    ) -> None:
        """What `bulk_dead_letters` would refuse for this run, raised; nothing written."""
        run = self.get_run(tenant, run_key)
        if run.state is not RunState.DEAD:
            raise Conflict(f"run {run.run_key} is {run.state.value}; only a DEAD run can be changed")
        if action == "redrive" and fix is not None:
            self._check_fix(run, fix)
        if action == "redrive" and lifecycle.effect_may_have_run(run) and not accept:
            raise EffectMayRepeat(
                f"run {run.run_key} is at-most-once and its effect may already have run",
                field="acceptRepeatedEffect",
            )

    def _discard(self, tenant: str, run_key: str, actor: str, reason: str) -> Run:
        run = self.get_run(tenant, run_key)
        if run.state is not RunState.DEAD:
            raise Conflict(f"run {run.run_key} is {run.state.value}; only a DEAD run can be discarded")
        now = self._clock.now()
        return self._runs.commit(run, lambda r: lifecycle.discard(r, now=now, actor=actor, reason=reason))

    def cancel_run(self, tenant: str, run_key: str, actor: str) -> Run:
        """Cancel an open run. A LEASED run's holder then fails its fenced completion."""
        for _ in range(_WRITE_ATTEMPTS):
            run = self.get_run(tenant, run_key)
            if run.state not in OPEN_STATES:
                raise Conflict(
                    f"run {run.run_key} is {run.state.value}; only an open run can be cancelled",
                    state=run.state.value,
                )
            ending = self._completer.cancel(run, "cancelled by caller", actor=actor)
            if ending.run is not None:
                return ending.run
            # A heartbeat or the outbox wrote meanwhile: look again.
        raise Conflict(f"run {run_key} is changing concurrently; retry")

    def cancel_unstarted(self, job: Job, actor: str) -> int:
        """Cancel the open runs of `job` (just cancelled) that no one holds: PENDING, QUEUED
        and RETRY_WAIT, reason "job cancelled". Returns how many were cancelled.

        Reads the job's runs newest first (the runs made ahead, then the due ones), CANCEL_PAGE
        a page, and stops at the first page holding no open run, at the last page, or after
        CANCEL_PAGES pages. Each write is conditional on the run as read (state and rev); one
        that moved meanwhile is judged again as it now stands, once. A LEASED run is never
        written: its worker's check before the effect, or its fenced completion, ends it as
        before. An occurrence a resume decided not to run is left to that decision (it ends
        SKIPPED as missed, services.missed). Raises what the store raises."""
        cancelled = 0
        cursor: str | None = None
        for _ in range(CANCEL_PAGES):
            page = self._runs.list_for_job(job.job_id, limit=CANCEL_PAGE, cursor=cursor, view="all")
            open_runs = [run for run in page.items if run.is_open]
            for run in open_runs:
                cancelled += self._cancel_unstarted_run(job, run, actor)
            cursor = page.cursor
            if not open_runs or cursor is None:
                break
        return cancelled

    def _cancel_unstarted_run(self, job: Job, run: Run, actor: str) -> int:
        for _ in range(2):
            if run.state not in CLAIMABLE_STATES:
                return 0
            if lifecycle.pause_decides(run) and job.missed_verdict(run.scheduled_for) is False:
                return 0
            ending = self._completer.cancel(run, "job cancelled", actor=actor)
            if ending.run is not None:
                return 1
            if ending.current is None:
                return 0
            run = ending.current
        return 0

    # --- the lease protocol for external workers ---

    def claim(
        self, tenant: str, types: list[str], max_runs: int, lease_seconds: int, worker: str
    ) -> list[Run]:
        """Lease up to `max_runs` due, target-less runs of the tenant's given types, within
        the tenant's live-lease limit (TENANT_CONCURRENCY, exact: each claim takes one of the
        tenant's slots first, shared with the Lambda worker): fewer, or none,
        when the tenant is at its limit."""
        now = self._clock.now()
        actor = lease_actor(worker)
        leased: list[Run] = []
        try:
            self._lease_into(leased, tenant, types, max_runs, lease_seconds, worker, actor, now)
        except TenantAtLimit:
            pass  # every slot is held: what was leased so far (an empty list at the limit)
        except JobschedError as exc:
            # Runs leased so far are handed out: failing the call would strand them LEASED
            # (an at-most-once one already marked started) until their leases expire.
            if not leased:
                raise
            logger.warning("lease call cut short", extra={"tenant": tenant, "error": str(exc)})
        return leased

    def _lease_into(
        self,
        leased: list[Run],
        tenant: str,
        types: list[str],
        max_runs: int,
        lease_seconds: int,
        worker: str,
        actor: str,
        now: datetime,
    ) -> None:
        """Append to `leased` what can be leased, oldest due first; raises TenantAtLimit at the
        tenant's limit, or what the store raises."""
        for job_type in dict.fromkeys(types):
            if len(leased) >= max_runs:
                break
            # Runs that cannot be handed out may sit at the head of the index (held behind
            # another run, unreadable, claimed a moment ago): page past them, up to a bound.
            cursor: dict[str, Any] | None = None
            for _ in range(CLAIM_PAGES):
                # Some candidates are lost to concurrent claimers: read a few more than needed.
                wanted = max_runs - len(leased)
                candidates, cursor = self._runs.claimable(
                    tenant, job_type, now, limit=max(wanted * 2, CLAIM_PAGE_MIN), cursor=cursor
                )
                for run in candidates:
                    if len(leased) >= max_runs:
                        break
                    if run.tenant != tenant or run.has_target or not lifecycle.claimable(run, now):
                        continue  # the index is eventually consistent; the run item is the truth
                    usable = self._lease_one(run, now, lease_seconds, worker, actor)
                    if usable is not None:
                        leased.append(usable)
                if len(leased) >= max_runs or cursor is None:
                    break

    def _lease_one(self, run: Run, now: datetime, lease_seconds: int, worker: str, actor: str) -> Run | None:
        """One attempt through the pipeline up to its effect (services.attempt): admitted
        (overlap policy, attempt refusal), claimed, its job checked, its effect decided; the
        leased run to hand out, or None if it is not handed out."""
        admitted = self._attempts.admit(run, now, actor=actor)
        if admitted.admission is not Admission.GO:
            return None  # not due, buffered or nothing to do: left for a later lease call; or ended
        leased = self._attempts.claim(run, now, owner=worker, actor=actor, lease_seconds=lease_seconds)
        if leased is None:
            return None
        # Read after this claim, as the Lambda worker does: a pause acknowledged before this
        # read stops the run, one acknowledged after it cannot stop an effect already handed out.
        checked = self._attempts.check_job(leased, actor=actor)
        if not isinstance(checked, Run):
            return None
        try:
            handed = self._attempts.hand_out(checked, actor=actor)
        except RunChanged:
            return None
        # An Ending: replayed a saved result, or waits for an earlier attempt: not handed out.
        # Handed out with the payload it runs with (the write of a mark reads it back without).
        return handed.with_definition(checked.target, checked.payload) if isinstance(handed, Run) else None

    def heartbeat(self, tenant: str, run_key: str, fence: int, lease_seconds: int) -> Run:
        """Extend the lease while `fence` is current."""
        run = self._held(tenant, run_key, fence)
        now = self._clock.now()
        until = now + timedelta(seconds=lease_seconds)
        try:
            # An expired lease is never renewed (its tenant slot may have been taken over):
            # the worker learns it lost the lease (409 stale_fence).
            return self._runs.extend_lease(run, until, live_at=now)
        except RunChanged as exc:
            raise _stale(run_key, fence, exc.current) from None

    def complete(
        self,
        tenant: str,
        run_key: str,
        fence: int,
        outcome: LeaseOutcome,
        result: Any = None,
        error_class: str | None = None,
        error_message: str | None = None,
        retryable: bool = True,
    ) -> Run:
        """End the attempt under `fence`: succeeded, or failed (retry under the policy or dead).
        Refused (409 stale_fence) only when the fence is not current or the run is no longer
        LEASED; a concurrent heartbeat of the same lease does not refuse it."""
        run = self._held(tenant, run_key, fence)
        actor = lease_actor(run.lease_owner or "unknown")
        ending: Ending
        if outcome == "succeeded":
            ending = self._attempts.complete_success(run, result, actor=actor)
        else:
            message = error_message or "the worker reported a failure"
            kind = error_class or "WorkerError"
            error: ExecutionError = (
                RetryableError(message, error_class=kind)
                if retryable
                else PermanentError(message, error_class=kind)
            )
            ending = self._attempts.complete_failure(run, error, actor=actor)
        if ending.state is None or ending.run is None:
            raise _stale(run_key, fence, ending.current)
        return ending.run

    def _held(self, tenant: str, run_key: str, fence: int) -> Run:
        run = self.get_run(tenant, run_key)
        if not _still_held(run, fence):
            raise _stale(run_key, fence, run)
        return run


def lease_actor(worker: str) -> str:
    return f"lease:{worker}"


def _still_held(run: Run | None, fence: int) -> bool:
    return run is not None and run.state is RunState.LEASED and run.fence == fence


def _stale(run_key: str, fence: int, current: Run | None) -> StaleFence:
    logger.info("lease call with a stale fence", extra={"run_key": run_key, "fence": fence})
    if current is not None and current.fence == fence and current.state is not RunState.LEASED:
        # The caller's own lease, already ended (a second complete, a heartbeat after it).
        message = f"the lease under fence {fence} has already ended: run {run_key} is {current.state.value}"
    elif current is not None and current.fence > fence:
        message = f"fence {fence} no longer holds run {run_key}: it was claimed again (fence {current.fence})"
    else:
        message = f"fence {fence} does not hold run {run_key}"
    return StaleFence(
        message,
        currentFence=current.fence if current else None,
        state=current.state.value if current else None,
    )
