"""Runs: one immutable occurrence of a job, its state machine and its recorded history."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import Field

from .instants import Instant
from .jitter import start_jitter_seconds
from .models import Job, Model, Policies, Priority, Target, run_key


class RunState(StrEnum):
    PENDING = "PENDING"  # written, not yet published to a queue
    QUEUED = "QUEUED"  # on a queue, waiting for a worker
    LEASED = "LEASED"  # a worker holds the lease (fence) and may be executing
    RETRY_WAIT = "RETRY_WAIT"  # failed, waiting for its next attempt
    SUCCEEDED = "SUCCEEDED"
    DEAD = "DEAD"  # attempts/age exhausted or a permanent error; redrive can reopen it
    SKIPPED = "SKIPPED"  # never executed: misfire, overlap, expired
    CANCELLED = "CANCELLED"  # job paused/cancelled before the effect, or cancelled by a caller


OPEN_STATES = frozenset({RunState.PENDING, RunState.QUEUED, RunState.LEASED, RunState.RETRY_WAIT})
TERMINAL_STATES = frozenset({RunState.SUCCEEDED, RunState.DEAD, RunState.SKIPPED, RunState.CANCELLED})
# States a worker may claim from (a LEASED run is claimable only once its lease expired).
CLAIMABLE_STATES = frozenset({RunState.PENDING, RunState.QUEUED, RunState.RETRY_WAIT})

# The state machine: every transition the code performs must be listed here.
ALLOWED: dict[RunState, frozenset[RunState]] = {
    # PENDING/QUEUED → DEAD: undeliverable after repeated requeues without any claim.
    RunState.PENDING: frozenset(
        {RunState.QUEUED, RunState.LEASED, RunState.SKIPPED, RunState.CANCELLED, RunState.DEAD}
    ),
    RunState.QUEUED: frozenset(
        {RunState.LEASED, RunState.PENDING, RunState.SKIPPED, RunState.CANCELLED, RunState.DEAD}
    ),
    RunState.LEASED: frozenset(
        {RunState.LEASED, RunState.SUCCEEDED, RunState.RETRY_WAIT, RunState.DEAD, RunState.CANCELLED}
    ),
    RunState.RETRY_WAIT: frozenset({RunState.QUEUED, RunState.LEASED, RunState.CANCELLED, RunState.DEAD}),
    RunState.DEAD: frozenset({RunState.PENDING}),  # audited redrive
    RunState.SUCCEEDED: frozenset(),
    RunState.SKIPPED: frozenset(),
    RunState.CANCELLED: frozenset(),
}


def can_move(source: RunState, target: RunState) -> bool:
    return target in ALLOWED[source]


class Trigger(StrEnum):
    SCHEDULE = "schedule"
    MANUAL = "manual"
    BACKFILL = "backfill"


class Transition(Model):
    """One recorded change of a run: who, under which fence, from what to what, and why."""

    at: Instant
    actor: str  # sweeper | outbox | worker:<id> | reconciler | api:<tenant> | lease:<owner>
    source: RunState | None = None  # None for the creation of the run
    target: RunState
    fence: int
    attempt: int
    error_class: str | None = None
    error_message: str | None = None
    reason: str | None = None


class Run(Model):
    run_key: str
    job_id: str
    tenant: str
    job_type: str
    scheduled_for: Instant
    due_at: Instant  # scheduled_for plus start jitter, or the time of the next retry
    trigger: Trigger = Trigger.SCHEDULE
    state: RunState
    rev: int = 0  # internal write counter; every write conditions on it
    fence: int = 0  # bumped by every claim; a completion must present the current fence
    attempt: int = 0  # attempts started in the current series (reset by a redrive)
    redrives: int = 0
    definition_version: int
    priority: Priority = Priority.DEFAULT
    target: Target | None = None
    payload: Any = None
    policies: Policies = Policies()
    lease_owner: str | None = None
    lease_expires_at: Instant | None = None
    effect_started_at: Instant | None = None  # at-most-once: set before the effect
    first_attempt_at: Instant | None = None  # start of the current attempt series (max age)
    blocked_by: str | None = None  # waits for this run key to finish before it is published
    blocks: str | None = None  # the run waiting on this one: released when this one ends
    previous_run_key: str | None = None  # the job's preceding scheduled run (overlap policy)
    skipped_through: Instant | None = None  # a SKIPPED record may stand for a range of occurrences
    skipped_count: int | None = None
    reason: str | None = None  # why SKIPPED/CANCELLED
    last_error_class: str | None = None
    last_error_message: str | None = None
    result: Any = None
    created_at: Instant
    updated_at: Instant
    finished_at: Instant | None = None
    history: list[Transition] = Field(default_factory=list)

    @property
    def is_open(self) -> bool:
        return self.state in OPEN_STATES

    def lease_live(self, now: datetime) -> bool:
        return (
            self.state is RunState.LEASED
            and self.lease_expires_at is not None
            and self.lease_expires_at > now
        )


def split_run_key(run_key: str) -> tuple[str, str]:
    """`j_x@2026-11-02T09:00:00Z` → (`j_x`, `2026-11-02T09:00:00Z`); ValueError when malformed."""
    job_id, sep, instant = run_key.partition("@")
    if not sep or not job_id or not instant:
        raise ValueError("must look like <jobId>@<RFC 3339 instant>")
    return job_id, instant


def advance(
    run: Run,
    target: RunState,
    *,
    now: datetime,
    actor: str,
    error_class: str | None = None,
    error_message: str | None = None,
    reason: str | None = None,
    **changes: Any,
) -> Run:
    """The one way a run changes state: checks the state machine and records the transition."""
    if not can_move(run.state, target):
        raise ValueError(f"run {run.run_key}: {run.state.value} → {target.value} is not a transition")
    fence = changes.get("fence", run.fence)
    attempt = changes.get("attempt", run.attempt)
    entry = Transition(
        at=now,
        actor=actor,
        source=run.state,
        target=target,
        fence=fence,
        attempt=attempt,
        error_class=error_class,
        error_message=error_message[:1000] if error_message else None,
        reason=reason,
    )
    updates: dict[str, Any] = {
        **changes,
        "state": target,
        "updated_at": now,
        "history": [*run.history, entry],
    }
    if error_class is not None:
        updates["last_error_class"] = error_class
        updates["last_error_message"] = entry.error_message
    if reason is not None and target in TERMINAL_STATES:
        updates["reason"] = reason  # the run's own `reason` says why it ended; history keeps the rest
    if target in TERMINAL_STATES:
        updates.setdefault("finished_at", now)
        updates["lease_owner"] = None
        updates["lease_expires_at"] = None
    return run.model_copy(update=updates)


def created(run: Run, *, actor: str, reason: str | None = None) -> Run:
    """Record the creation of a run as its first transition."""
    entry = Transition(
        at=run.created_at, actor=actor, source=None, target=run.state, fence=0, attempt=0, reason=reason
    )
    return run.model_copy(update={"history": [entry], "reason": reason})


def make_run(
    job: Job,
    scheduled_for: datetime,
    *,
    now: datetime,
    actor: str,
    trigger: Trigger = Trigger.SCHEDULE,
    state: RunState = RunState.PENDING,
    previous_run_key: str | None = None,
    reason: str | None = None,
    skipped_through: datetime | None = None,
    skipped_count: int | None = None,
) -> Run:
    """A new run of `job` at `scheduled_for`, snapshotting the definition it was made from.

    Start jitter is derived from the run key, so a repeated sweep computes the same due time."""
    key = run_key(job.job_id, scheduled_for)
    spec = job.spec
    jitter = start_jitter_seconds(key, spec.policies.jitter_seconds) if trigger is Trigger.SCHEDULE else 0
    run = Run(
        run_key=key,
        job_id=job.job_id,
        tenant=job.tenant,
        job_type=spec.type,
        scheduled_for=scheduled_for,
        due_at=scheduled_for + timedelta(seconds=jitter),
        trigger=trigger,
        state=state,
        definition_version=job.version,
        priority=spec.priority,
        target=spec.target,
        payload=spec.payload,
        policies=spec.policies,
        previous_run_key=previous_run_key,
        skipped_through=skipped_through,
        skipped_count=skipped_count,
        created_at=now,
        updated_at=now,
        finished_at=now if state in TERMINAL_STATES else None,
    )
    return created(run, actor=actor, reason=reason)
