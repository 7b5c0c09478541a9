"""What the API answers: view models made from domain objects, serialised by alias.

Each view is built by one constructor from the domain object it shows, and revalidated when
the resolver serialises it (`revalidate_instances`), so a response that breaks its own
schema is caught as a server error, never sent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from ..domain.calendars import Calendar
from ..domain.instants import Instant
from ..domain.models import (
    DeliveryGuarantee,
    DstPolicy,
    ForwardCompatible,
    HttpTarget,
    Job,
    JobState,
    Misfire,
    Notification,
    Overlap,
    Priority,
    Target,
    credential_reason,
)
from ..domain.run_status import current_error
from ..domain.runs import Run, RunState, Transition, Trigger
from ..domain.tracing import console_url
from .base import ApiModel

if TYPE_CHECKING:  # only the server builds views from these: the client never imports them
    from ..domain.run_listing import RunSummary
    from ..domain.schedule import Previewed
    from ..domain.signing import SigningSecrets
    from ..services.runs import BulkOutcome


class View(ApiModel, ForwardCompatible):
    """An answer's shape. The server builds views (unknown members refused); a client
    validates them with `context=TOLERANT` (domain.models), and members this version does
    not know are dropped, in the view and in the domain models it holds (ForwardCompatible),
    so an older client reads a newer server's answers."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", revalidate_instances="always"
    )


# --- jobs ---

# Shown instead of a literal header value that looks like a credential: jobs written before
# such literals were refused keep theirs, but no answer shows it.
REDACTED = "[redacted]"


def shown_target(target: Target | None) -> Target | None:
    """The target as answers show it: every credential-looking literal header redacted
    (secret references are shown as they are: an ARN, never a value)."""
    if not isinstance(target, HttpTarget):
        return target
    headers = {
        name: REDACTED if isinstance(value, str) and credential_reason(name, value) else value
        for name, value in target.headers.items()
    }
    return target if headers == target.headers else target.model_copy(update={"headers": headers})


class RetryView(View):
    base_seconds: float
    cap_seconds: float
    max_age_seconds: int | None = None


class SpecView(View):
    """One spec of a union schedule, as written back: `cron` or `monthly` + `at` with its
    zone, or `every`."""

    cron: str | None = None
    time_zone: str | None = None
    every: int | None = Field(default=None, description="seconds")
    monthly: str | None = None
    at: str | None = None
    holidays: str | None = Field(default=None, description="a business-day rule's holiday calendar")


class ExclusionView(View):
    """One exclusion, as written back: a cron, dates or a calendar with their zone, or instants."""

    cron: str | None = None
    calendar: str | None = Field(default=None, description="the name of one of the tenant's calendars")
    time_zone: str | None = None
    start_date: date | None = None
    end_date: date | None = None
    start: Instant | None = None
    end: Instant | None = None


class JobFieldsView(View):
    """A job in the shape a client writes it: the base a PATCH is merged into."""

    name: str
    type: str
    target: Target | None = None
    payload: Any = None
    run_at: Instant | None = None
    cron: str | None = None
    time_zone: str | None = None
    every: int | None = Field(default=None, description="seconds")
    specs: list[SpecView] | None = Field(default=None, description="a union schedule's specs")
    exclude: list[ExclusionView] | None = Field(default=None, description="occurrences that do not fire")
    start_at: Instant | None = None
    end_at: Instant | None = None
    max_runs: int | None = None
    priority: Priority
    missed_runs: Misfire
    catch_up_window: int = Field(description="seconds")
    overlap: Overlap
    dst: DstPolicy
    max_attempts: int
    retry: RetryView
    delivery: DeliveryGuarantee
    jitter_seconds: int
    timeout_seconds: int
    pause_on_failure: bool
    notify: list[Notification] = Field(default_factory=list)

    @staticmethod
    def fields_of(job: Job) -> dict[str, Any]:
        spec, schedule, policies = job.spec, job.spec.schedule, job.spec.policies
        return {
            "name": spec.name,
            "type": spec.type,
            "target": shown_target(spec.target),
            "payload": spec.payload,
            "run_at": schedule.at,
            "cron": schedule.cron,
            "time_zone": schedule.time_zone,
            "every": schedule.every_seconds,
            "specs": None
            if schedule.specs is None
            else [
                SpecView(
                    cron=s.cron,
                    time_zone=s.time_zone,
                    every=s.every_seconds,
                    monthly=s.monthly,
                    at=s.at,
                    holidays=s.holidays,
                )
                for s in schedule.specs
            ],
            "exclude": None
            if schedule.exclude is None
            else [ExclusionView.model_validate(e, from_attributes=True) for e in schedule.exclude],
            "start_at": schedule.start_at,
            "end_at": schedule.end_at,
            "max_runs": schedule.max_runs,
            "priority": spec.priority,
            "missed_runs": policies.misfire,
            "catch_up_window": policies.catch_up_window_seconds,
            "overlap": policies.overlap,
            "dst": schedule.dst,
            "max_attempts": policies.retry.max_attempts,
            "retry": RetryView.model_validate(policies.retry, from_attributes=True),
            "delivery": policies.delivery,
            "jitter_seconds": policies.jitter_seconds,
            "timeout_seconds": policies.timeout_seconds,
            "pause_on_failure": policies.pause_on_failure,
            "notify": [
                n.model_copy(update={"target": shown_target(n.target)})
                if isinstance(n.target, HttpTarget)
                else n
                for n in spec.notify
            ],
        }

    @classmethod
    def from_job(cls, job: Job) -> JobFieldsView:
        return cls(**cls.fields_of(job))


class PreviewLineView(View):
    """An instant a previewed schedule fires at (`fires`), or one its exclusions take off."""

    at: Instant
    fires: bool
    reason: str | None = Field(
        default=None, description="why it does not fire (an exclusion), or how a DST rule placed it"
    )
    specs: list[int] | None = Field(default=None, description="a union's specs that fire then, by index")

    @classmethod
    def of(cls, line: Previewed) -> PreviewLineView:
        return cls(
            at=line.at,
            fires=line.fires,
            reason=line.reason,
            specs=None if line.specs is None else list(line.specs),
        )


class JobView(JobFieldsView):
    """A job as the API returns it: the written shape plus identity and lifecycle."""

    job_id: str
    version: int
    state: JobState
    next_run_at: Instant | None = None
    runs_created: int
    created_at: Instant
    updated_at: Instant
    next_fire_times: list[Instant] | None = Field(
        default=None, description="the next five fire times; on a single job's answer only"
    )
    upcoming_fire_times: list[PreviewLineView] | None = Field(
        default=None,
        description="the schedule's next five fire times from now, with the occurrences its exclusions"
        " take off among them (`fires` false), each with why, as POST /v1/schedules/preview lists"
        " them; on GET /v1/jobs/{id} only, [] unless the job is ACTIVE",
    )
    missing_calendars: list[str] | None = Field(
        default=None,
        description="the calendars the job references that its tenant no longer has: the sweeper"
        " holds the job, firing nothing, until they are back; on GET /v1/jobs/{id} only",
    )
    expires_at: Instant | None = Field(
        default=None,
        description="once the job has ended (CANCELLED or COMPLETED): when it is deleted, its"
        " runs' retention (`retentionDays`) and a margin after it ended; null while it is live",
    )
    archived_at: Instant | None = Field(
        default=None, description="when the job was archived (POST /v1/jobs/{id}/archive); null if not"
    )

    @classmethod
    def of(
        cls,
        job: Job,
        upcoming: Sequence[datetime],
        *,
        with_fire_times: bool = False,
        lines: Sequence[Previewed] | None = None,
        missing_calendars: Sequence[str] | None = None,
    ) -> JobView:
        """`upcoming` are the job's next fire times from now; nextRunAt is the first of them.
        `lines`, when given, are its schedule's preview from now (`upcomingFireTimes`);
        `missing_calendars`, the calendars it references that are gone (`missingCalendars`)."""
        return cls(
            **cls.fields_of(job),
            job_id=job.job_id,
            version=job.version,
            state=job.state,
            next_run_at=upcoming[0] if upcoming else None,
            runs_created=job.runs_created,
            created_at=job.created_at,
            updated_at=job.updated_at,
            next_fire_times=list(upcoming) if with_fire_times else None,
            upcoming_fire_times=None if lines is None else [PreviewLineView.of(line) for line in lines],
            missing_calendars=None if missing_calendars is None else list(missing_calendars),
            expires_at=job.expires_at,
            archived_at=job.archived_at,
        )


class CreatedJobView(JobView):
    """The answer that creates a job: the job, and its webhook signing secret, shown this once."""

    signing_secret: str = Field(
        description="the job's Standard Webhooks signing secret (whsec_...); no other answer shows it"
    )

    @classmethod
    def created(cls, job: Job, upcoming: Sequence[datetime], signing_secret: str) -> CreatedJobView:
        shown = JobView.of(job, upcoming)
        return cls(
            **{name: getattr(shown, name) for name in JobView.model_fields}, signing_secret=signing_secret
        )


class SigningSecretView(View):
    """A new signing secret, shown this once, and until when the ones before it keep signing."""

    job_id: str
    signing_secret: str = Field(description="the new Standard Webhooks signing secret (whsec_...)")
    created_at: Instant
    previous_secrets_retire_at: list[Instant] = Field(
        description="when each secret it replaces stops signing (until then, each signs every delivery)"
    )

    @classmethod
    def of(cls, signing: SigningSecrets) -> SigningSecretView:
        *previous, current = signing.secrets
        return cls(
            job_id=signing.job_id,
            signing_secret=current.secret,
            created_at=current.created_at,
            previous_secrets_retire_at=[s.retires_at for s in previous if s.retires_at is not None],
        )


class JobList(View):
    items: list[JobView]
    next_cursor: str | None = None


# --- runs ---


class RunView(View):
    run_key: str
    job_id: str
    state: RunState
    trigger: Trigger
    scheduled_for: Instant
    due_at: Instant
    attempt: int
    fence: int
    redrives: int
    definition_version: int
    priority: Priority
    reason: str | None = None
    last_error_class: str | None = None
    last_error_message: str | None = None
    result: Any = None
    created_at: Instant
    updated_at: Instant
    finished_at: Instant | None = None
    lease_expires_at: Instant | None = None
    skipped_through: Instant | None = None
    skipped_count: int | None = None
    blocked_by: str | None = None
    waiting_for: str | None = Field(
        default=None,
        description="why an open run is not running now (e.g. waiting for an external worker, tenant"
        " at its concurrency limit, buffered behind <runKey>, job paused); null when it is running,"
        " finished, or not worked out for this answer",
    )

    @staticmethod
    def fields_of(run: Run, waiting_for: str | None = None) -> dict[str, Any]:
        """The run's fields as shown: its own error only (a SUCCEEDED run shows none; its
        earlier failures are in its attempts and transitions)."""
        fields = {name: getattr(run, name) for name in RunView.model_fields if name != "waiting_for"}
        fields["last_error_class"], fields["last_error_message"] = current_error(run)
        return {**fields, "waiting_for": waiting_for}

    @classmethod
    def from_run(cls, run: Run, waiting_for: str | None = None) -> RunView:
        return cls(**cls.fields_of(run, waiting_for))


AttemptOutcome = Literal["succeeded", "failed", "dead", "cancelled", "lease_expired", "held", "skipped"]

# How the transition that ends a lease reads as the outcome of that attempt.
_ATTEMPT_OUTCOMES: dict[RunState, AttemptOutcome] = {
    RunState.SUCCEEDED: "succeeded",
    RunState.RETRY_WAIT: "failed",
    RunState.DEAD: "dead",
    RunState.CANCELLED: "cancelled",
    RunState.LEASED: "lease_expired",  # another claim took over an expired lease
    # Its job was paused before the effect: the attempt was given back, not counted (the
    # next claim has the same attempt number), and the run waits for the resume.
    RunState.PENDING: "held",
    RunState.SKIPPED: "skipped",  # the resume decided this occurrence of the pause does not run
}


class AttemptView(View):
    attempt: int
    fence: int
    started_at: Instant
    ended_at: Instant | None = None
    outcome: AttemptOutcome | None = Field(
        default=None,
        description="null while running; `held`: given back before the effect (its job was paused),"
        " not counted, so the next claim has the same attempt number",
    )
    error_class: str | None = None

    @classmethod
    def attempts_of(cls, history: Sequence[Transition]) -> list[AttemptView]:
        """One per claim (a transition into LEASED), ended by the next transition out of it."""
        attempts = []
        for index, entry in enumerate(history):
            if entry.target is not RunState.LEASED:
                continue
            # Heartbeats record nothing, so the next move out of LEASED ends this lease.
            ending = next((later for later in history[index + 1 :] if later.source is RunState.LEASED), None)
            attempts.append(
                cls(
                    attempt=entry.attempt,
                    fence=entry.fence,
                    started_at=entry.at,
                    ended_at=ending.at if ending else None,
                    outcome=_ATTEMPT_OUTCOMES.get(ending.target) if ending else None,
                    error_class=ending.error_class if ending else None,
                )
            )
        return attempts


class TransitionView(View):
    at: Instant
    actor: str
    from_: RunState | None = Field(default=None, alias="from")
    to: RunState
    fence: int
    attempt: int
    error_class: str | None = None
    error_message: str | None = None
    reason: str | None = None
    trace_id: str | None = Field(
        default=None, description="the X-Ray trace id of the invocation that made the transition"
    )
    trace_url: str | None = Field(
        default=None, description="that trace in the CloudWatch console (a deployed stack's region)"
    )

    @classmethod
    def from_transition(cls, entry: Transition, region: str | None = None) -> TransitionView:
        return cls(
            at=entry.at,
            actor=entry.actor,
            from_=entry.source,
            to=entry.target,
            fence=entry.fence,
            attempt=entry.attempt,
            error_class=entry.error_class,
            error_message=entry.error_message,
            reason=entry.reason,
            trace_id=entry.trace_id,
            trace_url=console_url(region, entry.trace_id) if region and entry.trace_id else None,
        )


class RunDetailView(RunView):
    target: Target | None = Field(
        default=None,
        description="what the run calls (its job's when it was made, or a redrive's fix); null"
        " for a run its type's handler or an external worker runs, or when `definitionAvailable`"
        " is false",
    )
    payload: Any = Field(
        default=None, description="what the run is called with; null when `definitionAvailable` is false"
    )
    definition_available: bool = Field(
        default=True,
        description="false when the target and payload of the job version the run was made from"
        " are stored nowhere any more (kept `retentionDays` + 15 days after a PATCH replaced them):"
        " `target` and `payload` are then null, not the run's; an attempt of it ends it DEAD"
        " `DefinitionMissing`, and a redrive must replace its payload (and its target, if it has one)",
    )
    attempts: list[AttemptView]
    transitions: list[TransitionView]
    history_dropped: int = Field(
        default=0, description="transitions left out to keep the run in its byte budget"
    )

    @classmethod
    def from_run(
        cls,
        run: Run,
        waiting_for: str | None = None,
        region: str | None = None,
        *,
        definition_available: bool = True,
    ) -> RunDetailView:
        """`region`: the stack's, to link each transition's trace (None: no links);
        `definition_available`: False for a run whose definition is stored nowhere any more
        (services.runs.RunDetail), shown without target and payload."""
        return cls(
            **RunView.fields_of(run, waiting_for),
            target=shown_target(run.target),
            payload=run.payload,
            definition_available=definition_available,
            attempts=AttemptView.attempts_of(run.history),
            transitions=[TransitionView.from_transition(t, region) for t in run.history],
            history_dropped=run.history_dropped,
        )


class RunList(View):
    items: list[RunView]
    next_cursor: str | None = None


class RunSummaryView(View):
    """A run as a listing across jobs shows it: enough to choose which to open."""

    run_key: str
    job_id: str
    job_type: str
    state: RunState
    trigger: Trigger
    priority: Priority
    scheduled_for: Instant
    due_at: Instant
    attempts: int = Field(description="attempts started in the current series (reset by a redrive)")
    redrives: int
    started_at: Instant | None = Field(default=None, description="the current attempt series' first attempt")
    finished_at: Instant | None = None
    error_class: str | None = Field(default=None, description="the run's own current error")
    reason: str | None = None
    skipped_count: int | None = None
    updated_at: Instant

    @classmethod
    def of(cls, summary: RunSummary) -> RunSummaryView:
        return cls(**{name: getattr(summary, name) for name in cls.model_fields})


class RunSummaryList(View):
    items: list[RunSummaryView]
    next_cursor: str | None = Field(
        default=None,
        description="the next page (a page may hold fewer than `limit` runs and still name one)",
    )


class BulkRefusalView(View):
    run_key: str
    code: str
    message: str


class BulkDeadLettersView(View):
    request_id: str = Field(description="named in the history entry of every run changed")
    dry_run: bool
    count: int = Field(description="runs changed (a dry run: that would be)")
    run_keys: list[str]
    refused: list[BulkRefusalView] = Field(description="runs left as they are, each with why")
    next_cursor: str | None = Field(
        default=None, description="more dead letters match the filters: send the same body with it"
    )

    @classmethod
    def of(cls, outcome: BulkOutcome) -> BulkDeadLettersView:
        return cls(
            request_id=outcome.request_id,
            dry_run=outcome.dry_run,
            count=len(outcome.run_keys),
            run_keys=outcome.run_keys,
            refused=[BulkRefusalView(run_key=k, code=c, message=m) for k, c, m in outcome.refused],
            next_cursor=outcome.next_cursor,
        )


class BackfillView(View):
    created: list[str]
    existing: list[str]


class CountersView(View):
    missed: int = 0
    overlap_skipped: int = 0
    excluded: int = Field(default=0, description="occurrences the sweep passed over as excluded")
    succeeded: int = 0
    dead: int = 0
    cancelled: int = 0


class JobSummaryView(View):
    job_id: str
    next_fire_times: list[Instant]
    last_runs: list[RunView]
    counters: CountersView

    @classmethod
    def of(
        cls, job: Job, upcoming: Sequence[datetime], last_runs: Sequence[Run], counters: Mapping[str, int]
    ) -> JobSummaryView:
        return cls(
            job_id=job.job_id,
            next_fire_times=list(upcoming),
            last_runs=[RunView.from_run(r) for r in last_runs],
            counters=CountersView(**{name: counters.get(name, 0) for name in CountersView.model_fields}),
        )


# --- leases ---


class LeaseView(View):
    run_key: str
    job_id: str
    type: str
    scheduled_for: Instant
    attempt: int
    fence: int
    lease_expires_at: Instant
    payload: Any = None

    @classmethod
    def from_run(cls, run: Run) -> LeaseView:
        return cls(
            run_key=run.run_key,
            job_id=run.job_id,
            type=run.job_type,
            scheduled_for=run.scheduled_for,
            attempt=run.attempt,
            fence=run.fence,
            lease_expires_at=run.lease_expires_at,
            payload=run.payload,
        )


class LeaseList(View):
    leases: list[LeaseView]


class HeartbeatView(View):
    run_key: str
    fence: int
    lease_expires_at: Instant

    @classmethod
    def from_run(cls, run: Run) -> HeartbeatView:
        return cls(run_key=run.run_key, fence=run.fence, lease_expires_at=run.lease_expires_at)


# --- errors ---


class ErrorItem(ApiModel):
    field: str
    rule: str


class ErrorBody(ApiModel):
    """Errors may carry details beside code and message (e.g. currentVersion, state)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    code: str
    message: str
    errors: list[ErrorItem] | None = None


# --- batch create ---


class JobBatchItemView(View):
    """One job of a batch create, answered as a single create of it would be."""

    index: int = Field(description="the job's position in the request's `jobs`, from 0")
    status: int = Field(
        description="the status a single create of it answers: 201 created, 200 replayed (its"
        " idempotency key made the job before), or the refusal's (400, 403, 409, 429, 503)"
    )
    job: CreatedJobView | JobView | None = Field(
        default=None,
        union_mode="left_to_right",
        description="201: the job with its signing secret (shown this once); 200: the job its key made",
    )
    error: ErrorBody | None = Field(
        default=None, description="a refusal: the error body a single create gives"
    )


class JobBatchView(View):
    """A batch create's answer: one item per job, in the order sent, and their tally."""

    items: list[JobBatchItemView]
    created: int
    replayed: int
    refused: int


# --- schedules ---


class SchedulePreviewView(View):
    """A schedule's next fire times, and the occurrences its exclusions take off among them."""

    fire_times: list[PreviewLineView]

    @classmethod
    def of(cls, lines: Sequence[Previewed]) -> SchedulePreviewView:
        return cls(fire_times=[PreviewLineView.of(line) for line in lines])


# --- calendars ---


_Date = date  # the type, where a field is named `date`


class CalendarEntryView(View):
    """One entry of a calendar, as written back: a date, dates, or instants."""

    date: _Date | None = None
    start_date: _Date | None = None
    end_date: _Date | None = None
    start: Instant | None = None
    end: Instant | None = None


class CalendarSummaryView(View):
    """A calendar in a listing: its name, how many entries it holds, its version."""

    name: str
    entry_count: int
    version: int
    created_at: Instant
    updated_at: Instant

    @classmethod
    def of(cls, calendar: Calendar) -> CalendarSummaryView:
        assert calendar.created_at is not None and calendar.updated_at is not None
        return cls(
            name=calendar.name,
            entry_count=len(calendar.entries),
            version=calendar.version,
            created_at=calendar.created_at,
            updated_at=calendar.updated_at,
        )


class CalendarView(CalendarSummaryView):
    """A calendar: its entries, and how many live jobs (ACTIVE or PAUSED) reference it
    (`usedBy`; a calendar some job uses cannot be deleted)."""

    entries: list[CalendarEntryView]
    used_by: int

    @classmethod
    def with_entries(cls, calendar: Calendar, used_by: int) -> CalendarView:
        summary = CalendarSummaryView.of(calendar).model_dump()
        entries = [CalendarEntryView.model_validate(e, from_attributes=True) for e in calendar.entries]
        return cls(**summary, entries=entries, used_by=used_by)


class CalendarList(View):
    """The tenant's calendars, by name (all of them: a tenant holds at most a hundred)."""

    items: list[CalendarSummaryView]
