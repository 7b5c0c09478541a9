"""Runs: one immutable occurrence of a job, its state machine and its recorded history."""

from __future__ import annotations

import re
import secrets
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import Field, PrivateAttr

from .instants import Instant, parse_instant
from .jitter import start_jitter_seconds
from .models import (
    MANUAL_SEPARATOR,
    Job,
    Model,
    Notification,
    Policies,
    Priority,
    Target,
    late_seconds,
    run_key,
)

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
_SUFFIX = re.compile(r"m[0-9a-z]{10}")


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

# The reason of the recorded touch that notes a run late (domain.events: `jobsched.run.late`).
LATE_REASON = "late"

# `blocked_by` of a run held because its job is paused: not a run key (no "@"), so nothing
# mistakes it for a predecessor. Resume decides each held run under `missedRuns`.
PAUSED_HOLD = "job-paused"


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
    # The X-Ray trace id of the invocation that wrote the entry (domain.tracing; stamped by
    # the store), None outside a traced invocation.
    trace_id: str | None = None


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
    # Whether the run's success is counted by its completion (one ADD to the job's counters)
    # rather than by a fold of the job's runs (domain.run_counts): set at creation for a run
    # a fold might not meet (`made_counted_at_end`).
    counted_at_end: bool = False
    definition_version: int
    priority: Priority = Priority.DEFAULT
    # What the run calls and with what. A run made from a job that has `definition_since`
    # references that definition of its job instead of holding it: `definition_since` names
    # it, `target_kind` tells whether (and what) it calls, and `target`/`payload` are not
    # stored (None once read back; services.definitions resolves them). Otherwise (a run
    # made before jobs had it, or given its own by a redrive's fix) they are the run's own.
    definition_since: int | None = None
    target_kind: str | None = None
    target: Target | None = None
    payload: Any = None
    policies: Policies = Policies()
    notify: list[Notification] = Field(default_factory=list)  # the job's, when the run was made
    # Late notifications: the run is late if no attempt has claimed it by `late_at` (its due
    # instant plus the shortest lateSeconds); `late_noticed_at` records that it was found so.
    late_at: Instant | None = None
    late_noticed_at: Instant | None = None
    lease_owner: str | None = None
    claim_token: str | None = None  # random per claim: tells two claims of one owner apart
    lease_expires_at: Instant | None = None
    # The tenant slot (store.tenant_slots) the run's latest claim took: held while that
    # claim's fence is current and its lease live, released when the run leaves LEASED.
    tenant_slot: int | None = None
    effect_started_at: Instant | None = None  # at-most-once: set before the effect
    first_attempt_at: Instant | None = None  # start of the current attempt series (max age)
    blocked_by: str | None = None  # waits for this run key to finish before it is published
    blocks: str | None = None  # the run waiting on this one: released when this one ends
    previous_run_key: str | None = None  # the job's preceding scheduled run (overlap policy)
    overlapped_by: str | None = None  # SKIPPED by overlap: the open run it was skipped behind
    # Deferred by a worker (tenant at its limit, buffered, not due): published again no
    # earlier than this (the outbox's delay), without moving `due_at` (start lag counts from it).
    deferred_until: Instant | None = None
    skipped_through: Instant | None = None  # a SKIPPED record may stand for a range of occurrences
    skipped_count: int | None = None
    reason: str | None = None  # why SKIPPED/CANCELLED
    last_error_class: str | None = None
    last_error_message: str | None = None
    result: Any = None
    # The run's Powertools idempotency records (store.run_idempotency), kept on the run itself
    # (domain.effects reads them): in progress: the attempt with fence `effect_fence` may be
    # executing the effect until `effect_until`, its invocation's deadline (written just
    # before the effect; it outlives the lease); completed: an attempt's effect returned
    # `saved_result`, kept when its completion could not record it (`result` is only ever
    # the completed run's).
    effect_fence: int | None = None
    effect_until: Instant | None = None
    saved_result: Any = None
    result_saved_at: Instant | None = None
    created_at: Instant
    updated_at: Instant
    finished_at: Instant | None = None
    history: list[Transition] = Field(default_factory=list)
    history_dropped: int = 0  # entries left out of `history` to keep the run in its byte budget
    # The domain.transitions row that produced this run (stamped by lifecycle; not stored,
    # and not part of its value: two runs are equal when their fields are).
    _rule: Any = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Run):
            return NotImplemented
        return self.__dict__ == other.__dict__

    @property
    def counted_by_fold(self) -> bool:
        """Whether a fold of the job's runs counts this run's success (domain.run_counts):
        made ahead by a recurring schedule and never redriven. Else its completion does."""
        return not self.counted_at_end and self.redrives == 0

    @property
    def is_open(self) -> bool:
        return self.state in OPEN_STATES

    @property
    def has_target(self) -> bool:
        """Whether the run calls a target (else its type runs in a handler or an external
        worker), whether its definition is its own or its job's."""
        return self.target is not None or self.target_kind is not None

    def with_definition(self, target: Target | None, payload: Any) -> Run:
        """This run holding `target` and `payload` in memory (a resolved definition, for the
        effect or a view), still referencing its job's definition as stored."""
        return self.model_copy(update={"target": target, "payload": payload})

    def with_own_definition(self, target: Target | None, payload: Any) -> Run:
        """This run with `target` and `payload` as its own definition, stored with it (a
        redrive's fix): it no longer references its job's."""
        return self.model_copy(
            update={"target": target, "payload": payload, "definition_since": None, "target_kind": None}
        )

    @property
    def late_watch(self) -> datetime | None:
        """When the run becomes late while nothing has noticed it yet: `late_at` while it is
        open, never claimed (fence 0), not held for a paused job and not yet noted late; else
        None."""
        if (
            self.late_at is None
            or self.late_noticed_at is not None
            or self.fence != 0
            or self.state not in OPEN_STATES
            or self.blocked_by == PAUSED_HOLD
        ):
            return None
        return self.late_at

    def late_unnoticed(self, now: datetime) -> bool:
        """Whether the run is late at `now` and nothing has noted it yet."""
        watch = self.late_watch
        return watch is not None and watch <= now

    def lease_live(self, now: datetime) -> bool:
        return (
            self.state is RunState.LEASED
            and self.lease_expires_at is not None
            and self.lease_expires_at > now
        )


def split_run_key(run_key: str) -> tuple[str, str]:
    """`j_x@2026-11-02T09:00:00Z` → (`j_x`, `2026-11-02T09:00:00Z`); a manual run's key keeps
    its suffix in the second part (`2026-11-02T09:00:00Z~m3k9q2`). ValueError when malformed."""
    job_id, sep, slot = run_key.partition("@")
    if not sep or not job_id or not slot:
        raise ValueError("must look like <jobId>@<RFC 3339 instant>")
    return job_id, slot


def parse_run_key(run_key: str) -> tuple[str, datetime, str | None]:
    """(job id, scheduled instant, manual suffix or None); ValueError when malformed.

    Any RFC 3339 spelling of the instant is accepted; `run_key(*parse_run_key(k))` is canonical."""
    job_id, slot = split_run_key(run_key)
    instant, _, suffix = slot.partition(MANUAL_SEPARATOR)
    if _ and not _SUFFIX.fullmatch(suffix):
        raise ValueError("a manual run key ends in ~m and 10 lowercase letters or digits")
    return job_id, parse_instant(instant), suffix or None


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
    """A new run of `job` at `scheduled_for`, with the definition it was made from: a job
    with `definition_since` is referenced (the run holds its target and payload in memory
    only; the store leaves them out), one without it is copied.

    Start jitter is derived from the run key, so a repeated sweep computes the same due time.
    A manual run gets a key of its own (`<jobId>@<instant>~m<10 random>`): it never collides
    with the scheduled occurrence of the same second, nor with another manual run."""
    from .run_counts import made_counted_at_end  # run_counts reads runs

    suffix = (
        "m" + "".join(secrets.choice(_ALPHABET) for _ in range(10)) if trigger is Trigger.MANUAL else None
    )
    key = run_key(job.job_id, scheduled_for, suffix)
    spec = job.spec
    jitter = start_jitter_seconds(key, spec.policies.jitter_seconds) if trigger is Trigger.SCHEDULE else 0
    due_at = scheduled_for + timedelta(seconds=jitter)
    # A backfilled occurrence is due in the past by design: it is never late.
    watched = state not in TERMINAL_STATES and trigger is not Trigger.BACKFILL
    late = late_seconds(spec.notify) if watched else None
    run = Run(
        run_key=key,
        job_id=job.job_id,
        tenant=job.tenant,
        job_type=spec.type,
        scheduled_for=scheduled_for,
        due_at=due_at,
        trigger=trigger,
        state=state,
        definition_version=job.version,
        priority=spec.priority,
        definition_since=job.definition_since,
        target_kind=spec.target.kind
        if spec.target is not None and job.definition_since is not None
        else None,
        target=spec.target,
        payload=spec.payload,
        policies=spec.policies,
        notify=spec.notify,
        late_at=due_at + timedelta(seconds=late) if late is not None else None,
        previous_run_key=previous_run_key,
        skipped_through=skipped_through,
        skipped_count=skipped_count,
        counted_at_end=made_counted_at_end(job, scheduled_for, now, trigger),
        created_at=now,
        updated_at=now,
        finished_at=now if state in TERMINAL_STATES else None,
    )
    return created(run, actor=actor, reason=reason)
