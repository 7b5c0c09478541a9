"""Run and job events: what the events consumer publishes for each change the tables' streams
carry, as CloudEvents 1.0. Pure: a change (the item before and after) in, events out.

A run's history is append-only (its byte budget drops the oldest entries but the creation,
and counts them in `historyDropped`), so every transition has a fixed ordinal, its
`sequence`: the creation is 0, and entry `i > 0` of the stored history is `i +
historyDropped`. A change's events are the transitions whose sequence the item before it
did not reach, in order. An event's `id` is `<runKey>#<sequence>`, the same however often
the stream delivers the record, so a consumer dedupes on it and orders one run's events by
`data.sequence`.

A job's events come from its control-plane changes: each API change bumps the job's
`version`, and completion (a one-time job's last occurrence made) changes its state alone.
A job write that changes neither (the sweeper advancing its cursor) is no event. The id is
`<jobId>#v<version>#<state>`.

What is published is the operator's choice (`RunEventsLevel`): nothing, the failures (a run
dead or skipped, and every job change: those are few and are the control-plane audit), or
every transition.

A run is late when no attempt has claimed it `lateSeconds` after it was due (its job's late
notifications, domain.models.Notification): the reconciler notes it late with a recorded
touch (reason `late`), and a first claim that comes after that instant without the note is
late too. Either way its event is `jobsched.run.late` with the id `<runKey>#late`: one per
run, whichever saw it."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from .instants import Instant
from .models import Job, JobState, ScheduleKind
from .runs import LATE_REASON, Run, RunState, Transition
from .schedule import index_schedule, next_fire

SPEC_VERSION = "1.0"
# The longest error message an event carries (a run's own may be longer; the run keeps it).
EVENT_MESSAGE_CHARS = 1024


class RunEventsLevel(StrEnum):
    """Which events are published (the `runEvents` setting)."""

    NONE = "none"
    FAILURES = "failures"  # run.dead, run.skipped, run.late, and every job.* event
    ALL = "all"  # every run transition and every job event


class EventType(StrEnum):
    RUN_CREATED = "jobsched.run.created"  # made PENDING (scheduled, triggered, backfilled)
    RUN_QUEUED = "jobsched.run.queued"  # on its queue (or claimable by external workers)
    RUN_STARTED = "jobsched.run.started"  # an attempt claimed it (LEASED)
    RUN_PENDING = "jobsched.run.pending"  # back to PENDING: a failed publish, a held or expired claim
    RUN_RETRYING = "jobsched.run.retrying"  # an attempt failed; the next one waits (RETRY_WAIT)
    RUN_SUCCEEDED = "jobsched.run.succeeded"  # its effect happened (or an earlier attempt's result replayed)
    RUN_DEAD = "jobsched.run.dead"  # dead-lettered: `data.errorClass` says why (RetriesExhausted, ...)
    RUN_SKIPPED = "jobsched.run.skipped"  # never executed: missed while paused, overlap, misfire
    RUN_CANCELLED = "jobsched.run.cancelled"  # by a caller, or its job paused or cancelled before the effect
    RUN_REDRIVEN = "jobsched.run.redriven"  # a DEAD run reopened (`data.reason` names the request)
    RUN_LATE = "jobsched.run.late"  # not started `lateSeconds` after it was due (once per run)
    JOB_CREATED = "jobsched.job.created"  # POST /v1/jobs
    JOB_UPDATED = "jobsched.job.updated"  # PATCH: a new version (`data.version`)
    JOB_PAUSED = "jobsched.job.paused"
    JOB_RESUMED = "jobsched.job.resumed"  # its missed runs decided by `missedRuns`
    JOB_CANCELLED = "jobsched.job.cancelled"  # DELETE /v1/jobs/{id}: no more runs
    JOB_COMPLETED = "jobsched.job.completed"  # its last run made (one-time, maxRuns, endAt)


FAILURE_TYPES = frozenset({EventType.RUN_DEAD, EventType.RUN_SKIPPED, EventType.RUN_LATE})
_BY_TARGET = {
    RunState.QUEUED: EventType.RUN_QUEUED,
    RunState.LEASED: EventType.RUN_STARTED,
    RunState.PENDING: EventType.RUN_PENDING,
    RunState.RETRY_WAIT: EventType.RUN_RETRYING,
    RunState.SUCCEEDED: EventType.RUN_SUCCEEDED,
    RunState.DEAD: EventType.RUN_DEAD,
    RunState.SKIPPED: EventType.RUN_SKIPPED,
    RunState.CANCELLED: EventType.RUN_CANCELLED,
}
_JOB_STATE_TYPES = {
    JobState.PAUSED: EventType.JOB_PAUSED,
    JobState.ACTIVE: EventType.JOB_RESUMED,
    JobState.CANCELLED: EventType.JOB_CANCELLED,
    JobState.COMPLETED: EventType.JOB_COMPLETED,
}


def published(level: RunEventsLevel, event_type: EventType) -> bool:
    """Whether `level` publishes events of `event_type`."""
    if level is RunEventsLevel.NONE:
        return False
    if level is RunEventsLevel.ALL:
        return True
    return event_type in FAILURE_TYPES or event_type.value.startswith("jobsched.job.")


class EventData(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class RunEventData(EventData):
    """`data` of a `jobsched.run.*` event: one transition of one run."""

    run_key: str = Field(alias="runKey")
    job_id: str = Field(alias="jobId")
    tenant: str
    job_type: str = Field(alias="jobType")
    scheduled_for: Instant = Field(alias="scheduledFor")
    trigger: str
    sequence: int = Field(ge=0, description="the transition's ordinal in the run's history (0: creation)")
    state: RunState = Field(description="the state the transition entered")
    from_state: RunState | None = Field(alias="from", description="the state it left (null: creation)")
    actor: str
    fence: int
    attempt: int
    redrives: int
    error_class: str | None = Field(None, alias="errorClass")
    error_message: str | None = Field(None, alias="errorMessage", max_length=EVENT_MESSAGE_CHARS)
    reason: str | None = None
    trace_id: str | None = Field(
        None, alias="traceId", description="the X-Ray trace id of the invocation that made the transition"
    )


class JobEventData(EventData):
    """`data` of a `jobsched.job.*` event: one control-plane change of a job."""

    job_id: str = Field(alias="jobId")
    tenant: str
    name: str
    job_type: str = Field(alias="jobType")
    version: int
    state: JobState
    from_state: JobState | None = Field(alias="from", description="the state before (null: created)")
    actor: str
    next_run_at: Instant | None = Field(None, alias="nextRunAt")
    trace_id: str | None = Field(
        None, alias="traceId", description="the X-Ray trace id of the invocation that made the change"
    )


class CloudEvent(BaseModel):
    """A CloudEvents 1.0 event in its JSON form (attribute names as the spec spells them).
    `tenant` is an extension attribute: the tenant whose job or run it is."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    specversion: Literal["1.0"] = "1.0"
    id: str = Field(min_length=1, description="unique and stable across redelivery: dedupe on it")
    source: str = Field(min_length=1, description="the stack and the tenant: `jobsched/<stack>/<tenant>`")
    type: EventType
    subject: str = Field(description="the run key, or the job id")
    time: Instant = Field(description="when the change happened (the transition's instant)")
    datacontenttype: Literal["application/json"] = "application/json"
    tenant: str
    data: RunEventData | JobEventData

    def document(self) -> dict[str, Any]:
        """The event as JSON-ready values (what the bus's `detail` holds)."""
        return self.model_dump(mode="json", by_alias=True)


MAX_SOURCE_CHARS = 256  # EventBridge's limit on an entry's Source
# Every event's source starts with it: rules and the archive select the scheduler's events by
# it, and no tenant's event may carry it (targets.authority), whatever its grants.
SOURCE_PREFIX = "jobsched/"


def event_source(stack: str, tenant: str) -> str:
    """`jobsched/<stack>/<tenant>`, the tenant percent-encoded (IAM tenant ids hold `/`); a
    tenant too long for EventBridge's 256 characters appears as `sha256:<32 hex>` of its id
    (the event's `tenant` attribute still names it whole). Percent-encoding never leaves a
    `:`, so no tenant id, however chosen, spells another tenant's digest form."""
    source = f"{SOURCE_PREFIX}{stack}/{quote(tenant, safe='')}"
    if len(source) <= MAX_SOURCE_CHARS:
        return source
    return f"{SOURCE_PREFIX}{stack}/sha256:{hashlib.sha256(tenant.encode()).hexdigest()[:32]}"


def sequence_of(run: Run, index: int) -> int:
    """The ordinal of `run.history[index]` in the run's whole history."""
    return index if index == 0 else index + run.history_dropped


def last_sequence(run: Run | None) -> int:
    """The ordinal of the run's latest transition; -1 for no run (an INSERT's before)."""
    if run is None or not run.history:
        return -1
    return sequence_of(run, len(run.history) - 1)


def run_events(stack: str, before: Run | None, after: Run, level: RunEventsLevel) -> list[CloudEvent]:
    """The events of one run change, oldest first: a transition of `after` whose sequence
    `before` had not reached, kept when `level` publishes its type."""
    reached = last_sequence(before)
    events = []
    for index, entry in enumerate(after.history):
        sequence = sequence_of(after, index)
        if sequence <= reached:
            continue
        event_type = run_event_type(entry)
        if published(level, event_type):
            events.append(_run_event(stack, after, entry, sequence, event_type))
        if started_late(after, entry) and published(level, EventType.RUN_LATE):
            events.append(_run_event(stack, after, entry, sequence, EventType.RUN_LATE))
    return events


def started_late(run: Run, entry: Transition) -> bool:
    """Whether `entry` is the run's first claim, made after its `late_at` with no late note
    before it (the reconciler did not get to it in time)."""
    return (
        run.late_at is not None
        and run.late_noticed_at is None
        and entry.target is RunState.LEASED
        and entry.fence == 1
        and entry.at > run.late_at
    )


def run_event_type(entry: Transition) -> EventType:
    if entry.source is entry.target and entry.reason == LATE_REASON:
        return EventType.RUN_LATE
    if entry.source is None:
        return EventType.RUN_SKIPPED if entry.target is RunState.SKIPPED else EventType.RUN_CREATED
    if entry.source is RunState.DEAD and entry.target is RunState.PENDING:
        return EventType.RUN_REDRIVEN
    return _BY_TARGET[entry.target]


def _run_event(stack: str, run: Run, entry: Transition, sequence: int, event_type: EventType) -> CloudEvent:
    message = entry.error_message
    data = RunEventData(
        run_key=run.run_key,
        job_id=run.job_id,
        tenant=run.tenant,
        job_type=run.job_type,
        scheduled_for=run.scheduled_for,
        trigger=run.trigger.value,
        sequence=sequence,
        state=entry.target,
        from_state=entry.source,
        actor=entry.actor,
        fence=entry.fence,
        attempt=entry.attempt,
        redrives=run.redrives,
        error_class=entry.error_class,
        error_message=message[:EVENT_MESSAGE_CHARS] if message is not None else None,
        reason=entry.reason,
        trace_id=entry.trace_id,
    )
    late = event_type is EventType.RUN_LATE
    return CloudEvent(
        id=f"{run.run_key}#late" if late else f"{run.run_key}#{sequence}",
        source=event_source(stack, run.tenant),
        type=event_type,
        subject=run.run_key,
        time=entry.at,
        tenant=run.tenant,
        data=data,
    )


def job_event_type(before: Job | None, after: Job) -> EventType | None:
    """The control-plane change from `before` to `after`, or None (a sweeper's advance)."""
    if before is None:
        return EventType.JOB_CREATED
    if after.state is not before.state:
        return _JOB_STATE_TYPES[after.state]
    if after.version != before.version:
        return EventType.JOB_UPDATED
    return None


def as_created(job: Job) -> Job:
    """`job`, written with its first runs, as it was before they were made: ACTIVE, its next
    run at its first occurrence (as services.jobs.first_occurrence found it then: for a job
    referencing calendars, the first instant its schedule without them fires at)."""
    schedule = index_schedule(job.spec.schedule)
    start = (
        min(schedule.at, job.created_at)
        if schedule.kind is ScheduleKind.ONCE and schedule.at
        else job.created_at
    )
    first = next_fire(schedule, start - timedelta(seconds=1))
    return job.model_copy(
        update={
            "state": JobState.ACTIVE,
            "next_run_at": first if first is not None else job.next_run_at,
            "runs_created": 0,
            "last_scheduled_for": None,
            "last_run_at": None,
        }
    )


def job_events(
    stack: str, before: Job | None, after: Job, level: RunEventsLevel, changed_at: datetime
) -> list[CloudEvent]:
    """The event of one job change (none, or one), when `level` publishes it. `changed_at`:
    when the write happened (the stream record's), the time of a completion, which the
    sweeper's write does not record; an API change has its own (`updatedAt`).

    A job written with its first runs (one that fired inside the horizon when it was created:
    services.jobs) is one record for two changes, its creation and the materialiser's first
    pass over it: it has the events of both, the creation's showing the job as created."""
    if before is None and after.runs_created > 0:
        created = as_created(after)
        events = job_events(stack, None, created, level, changed_at)
        return events + job_events(stack, created, after, level, changed_at)
    event_type = job_event_type(before, after)
    if event_type is None or not published(level, event_type):
        return []
    # Completion is the sweeper's (the last occurrence made); every other change is the API's.
    actor = "sweeper" if event_type is EventType.JOB_COMPLETED else f"api:{after.tenant}"
    at = changed_at if event_type is EventType.JOB_COMPLETED else after.updated_at
    data = JobEventData(
        job_id=after.job_id,
        tenant=after.tenant,
        name=after.spec.name,
        job_type=after.spec.type,
        version=after.version,
        state=after.state,
        from_state=before.state if before is not None else None,
        actor=actor,
        next_run_at=after.next_run_at,
        trace_id=after.trace_id,
    )
    return [
        CloudEvent(
            id=f"{after.job_id}#v{after.version}#{after.state.value}",
            source=event_source(stack, after.tenant),
            type=event_type,
            subject=after.job_id,
            time=at,
            tenant=after.tenant,
            data=data,
        )
    ]
