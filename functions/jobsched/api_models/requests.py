"""What clients send: request bodies, checked for JSON types only; the domain models own
the rules, and their errors come back naming the field the client sent."""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import date, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    SkipValidation,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from ..domain.calendars import MAX_CALENDAR_ENTRIES, Calendar
from ..domain.errors import FieldProblem, ValidationFailed
from ..domain.instants import ClientBound, ClientInstant
from ..domain.models import (
    JOB_TYPE_PATTERN,
    MAX_EXCLUSIONS,
    MAX_SCHEDULE_SPECS,
    WRITE,
    DeliveryGuarantee,
    DstPolicy,
    Job,
    JobSpec,
    Misfire,
    Notification,
    Overlap,
    Priority,
    RunFix,
    ScheduleKind,
    Target,
    rule_on,
)
from .base import ApiModel, Seconds, StrictBool, StrictInt
from .problems import validation_failed
from .views import REDACTED, JobFieldsView

# --- durations: an ISO 8601 string or a number of seconds, and nothing else ---

MAX_DURATION_SECONDS = 10**10  # far beyond any bound a duration field has; keeps timedelta in range
DURATION_RULE = (
    "must be an ISO 8601 duration in weeks, days, hours, minutes and seconds (PT15M, P1DT12H) "
    "or a number of seconds"
)
_ISO_DURATION = re.compile(
    r"P(?:(\d{1,9})W)?(?:(\d{1,9})D)?(?:T(?:(\d{1,9})H)?(?:(\d{1,9})M)?(?:(\d{1,9})(?:[.,](\d{1,9}))?S)?)?",
    re.ASCII,
)


def parse_duration(value: Any) -> timedelta:
    """The two documented forms of a duration, and nothing else."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(DURATION_RULE)
    if isinstance(value, int | float):
        if not math.isfinite(value) or abs(value) > MAX_DURATION_SECONDS:
            raise ValueError(f"must be at most {MAX_DURATION_SECONDS} seconds")
        return timedelta(seconds=value)
    match = _ISO_DURATION.fullmatch(value) if len(value) <= 64 else None
    if match is None or value.endswith(("P", "T")):
        raise ValueError(DURATION_RULE)
    weeks, days, hours, minutes, seconds = (int(g or 0) for g in match.groups()[:5])
    whole = (((weeks * 7 + days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if whole > MAX_DURATION_SECONDS:
        raise ValueError(f"must be at most {MAX_DURATION_SECONDS} seconds")
    fraction = match.group(6) or ""
    return timedelta(seconds=whole, microseconds=int(fraction[:6].ljust(6, "0")))


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "format": "duration", "maxLength": 64},
                {"type": "number"},
            ]
        }
    ),
]

MAX_CRON_CHARS = 1024


def one_to(most: int, noun: str, items: Any) -> Any:
    """`items` as given, unless it is a list of fewer than 1 or more than `most` items:
    ValueError naming the bound. Run before the items are read (a `before` validator), so a
    list of thousands costs no more than one just over the bound."""
    if isinstance(items, list) and not 1 <= len(items) <= most:
        raise ValueError(f"must hold 1 to {most} {noun}; got {len(items)}")
    return items


# --- jobs ---


class SpecBody(ApiModel):
    """One spec of a union schedule (`specs`): `cron` or `monthly` + `at` (in `timeZone`,
    else the job's `timeZone`, else UTC), or `every`, counted from `startAt` or the creation
    of the job."""

    cron: str | None = Field(default=None, max_length=MAX_CRON_CHARS)
    time_zone: str | None = Field(default=None, max_length=64)
    every: Duration | None = Field(default=None, description="ISO 8601 duration (PT15M) or seconds")
    monthly: str | None = Field(
        default=None,
        max_length=32,
        description="a day of each month: last-day, last-weekday, 'last FRI', '2nd TUE', "
        "first-business-day, last-business-day, 'nearest-business-day 15' (with `at`)",
    )
    at: str | None = Field(default=None, max_length=8, description="the time of day of `monthly`: HH:MM[:SS]")
    holidays: str | None = Field(
        default=None,
        max_length=64,
        description="a business-day rule's holidays: the name of one of the tenant's calendars",
    )


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)


def parse_date(value: Any) -> date:
    """A calendar date written as `YYYY-MM-DD`, and nothing else (no number, no instant)."""
    if not isinstance(value, str) or not _DATE.fullmatch(value):
        raise ValueError("must be a date written YYYY-MM-DD")
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise ValueError("must be a date written YYYY-MM-DD") from None


ClientDate = Annotated[
    date, BeforeValidator(parse_date), WithJsonSchema({"type": "string", "format": "date", "maxLength": 10})
]


class ExclusionBody(ApiModel):
    """Occurrences a job does not fire at (`exclude`): exactly one of `cron` (its wall-clock
    matches in `timeZone`), `startDate`..`endDate` (local dates in `timeZone`, both included),
    `start`..`end` (instants, `end` excluded) or `calendar` (what the tenant's calendar of
    that name covers, its days read in `timeZone`). `timeZone` defaults to the job's, else UTC."""

    cron: str | None = Field(default=None, max_length=MAX_CRON_CHARS)
    calendar: str | None = Field(default=None, max_length=64)
    time_zone: str | None = Field(default=None, max_length=64)
    start_date: ClientDate | None = None
    end_date: ClientDate | None = None
    start: ClientInstant | None = None
    end: ClientInstant | None = None

    def to_domain(self, default_zone: str | None) -> dict[str, Any]:
        """The domain Exclusion's fields: a cron or dates in its zone, the job's, or UTC."""
        fields = self.model_dump(exclude_none=True)
        zoned = (self.cron, self.start_date, self.end_date, self.calendar)
        if any(value is not None for value in zoned):
            fields["time_zone"] = self.time_zone or default_zone or "UTC"
        return fields


class RetryBody(ApiModel):
    base_seconds: Seconds | None = None
    cap_seconds: Seconds | None = None
    max_age_seconds: StrictInt | None = None


class BoundedScheduleLists(ApiModel):
    """A body's `specs` and `exclude` counted before any item is read (`one_to`)."""

    @field_validator("specs", mode="before", check_fields=False)
    @classmethod
    def _few_specs(cls, specs: Any) -> Any:
        return one_to(MAX_SCHEDULE_SPECS, "specs", specs)

    @field_validator("exclude", mode="before", check_fields=False)
    @classmethod
    def _few_exclusions(cls, exclude: Any) -> Any:
        return one_to(MAX_EXCLUSIONS, "exclusions", exclude)


class JobBody(BoundedScheduleLists):
    """A job as the client writes it (POST body; a PATCH is merged into this shape)."""

    name: str = Field(min_length=1, max_length=256)
    type: str = Field(max_length=128)
    target: Target | None = None
    payload: Any = None
    run_at: ClientInstant | None = None
    cron: str | None = Field(default=None, max_length=MAX_CRON_CHARS)
    time_zone: str | None = Field(default=None, max_length=64)
    every: Duration | None = Field(default=None, description="ISO 8601 duration (PT15M) or seconds")
    specs: list[SpecBody] | None = Field(
        default=None,
        description=f"a union of 1 to {MAX_SCHEDULE_SPECS} cron and rate specs: the job fires once at"
        " each instant any of them fires",
        json_schema_extra={"minItems": 1, "maxItems": MAX_SCHEDULE_SPECS},
    )
    exclude: list[ExclusionBody] | None = Field(
        default=None,
        description=f"1 to {MAX_EXCLUSIONS} exclusions: occurrences they cover do not fire",
        json_schema_extra={"minItems": 1, "maxItems": MAX_EXCLUSIONS},
    )
    start_at: ClientInstant | None = None
    end_at: ClientInstant | None = None
    max_runs: StrictInt | None = None
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=255)
    priority: Priority = Priority.DEFAULT
    missed_runs: Misfire | None = None
    catch_up_window: Duration | None = Field(default=None, description="ISO 8601 duration or seconds")
    overlap: Overlap | None = None
    dst: DstPolicy | None = None
    max_attempts: StrictInt | None = None
    retry: RetryBody | None = None
    delivery: DeliveryGuarantee | None = None
    jitter_seconds: StrictInt | None = None
    timeout_seconds: StrictInt | None = None
    pause_on_failure: StrictBool | None = None
    notify: list[Notification] | None = Field(
        default=None,
        description="where the tenant is told of its runs: dead, late or skipped (at most 5)",
    )

    def to_spec(self, anchor: datetime | None = None) -> JobSpec:
        """Build the domain spec; every rule it breaks comes back as a ValidationFailed."""
        candidates = (
            ("runAt", self.run_at),
            ("cron", self.cron),
            ("every", self.every),
            ("specs", self.specs),
        )
        given = [name for name, value in candidates if value is not None]
        if len(given) != 1:
            raise ValidationFailed(
                "schedule",
                f"exactly one of runAt, cron, every or specs is required; got {len(given) or 'none'}",
            )
        problems: list[FieldProblem] = []
        every = _whole_seconds("every", self.every, problems, minimum=1)
        window = _whole_seconds("catchUpWindow", self.catch_up_window, problems, minimum=0)
        specs = [
            {
                "cron": spec.cron,
                "monthly": spec.monthly,
                "at": spec.at,
                "holidays": spec.holidays,
                "time_zone": (spec.time_zone or self.time_zone or "UTC")
                if spec.cron is not None or spec.monthly is not None
                else spec.time_zone,
                "every_seconds": _whole_seconds(f"specs.{index}.every", spec.every, problems, minimum=1),
            }
            for index, spec in enumerate(self.specs or ())
        ]
        if self.time_zone and not (self.cron or self.specs or self.exclude):
            problems.append(FieldProblem("timeZone", "only applies to a cron schedule, specs or exclude"))
        if problems:
            raise ValidationFailed(problems[0].field, problems[0].rule, *problems[1:])
        kind = {
            "runAt": ScheduleKind.ONCE,
            "cron": ScheduleKind.CRON,
            "every": ScheduleKind.RATE,
            "specs": ScheduleKind.UNION,
        }[given[0]]
        schedule: dict[str, Any] = {
            "kind": kind,
            "at": self.run_at,
            "cron": self.cron,
            "time_zone": (self.time_zone or "UTC") if self.cron else None,
            "every_seconds": every,
            "specs": specs if kind is ScheduleKind.UNION else None,
            "exclude": None
            if self.exclude is None
            else [exclusion.to_domain(self.time_zone) for exclusion in self.exclude],
            "anchor": anchor if kind in (ScheduleKind.RATE, ScheduleKind.UNION) else None,
            "start_at": self.start_at,
            "end_at": self.end_at,
            "max_runs": self.max_runs,
        }
        if self.dst is not None:
            schedule["dst"] = self.dst
        retry: dict[str, Any] = {}
        if self.max_attempts is not None:
            retry["max_attempts"] = self.max_attempts
        if self.retry is not None:
            retry.update(self.retry.model_dump(exclude_none=True))
        policies: dict[str, Any] = {
            "misfire": self.missed_runs,
            "catch_up_window_seconds": window,
            "overlap": self.overlap,
            "delivery": self.delivery,
            "jitter_seconds": self.jitter_seconds,
            "timeout_seconds": self.timeout_seconds,
            "pause_on_failure": self.pause_on_failure,
        }
        policies = {k: v for k, v in policies.items() if v is not None}
        if retry:
            policies["retry"] = retry
        try:
            # Validated afresh (the target too) under the rules of a write.
            return JobSpec.model_validate(
                {
                    "name": self.name,
                    "type": self.type,
                    "target": self.target.model_dump() if self.target else None,
                    "payload": self.payload,
                    "schedule": schedule,
                    "priority": self.priority,
                    "policies": policies,
                    "notify": [n.model_dump() for n in self.notify or ()],
                },
                context=WRITE,
            )
        except ValidationError as exc:
            raise validation_failed(exc, domain=True) from None

    def body_hash(self) -> str:
        """Fingerprint of the request for idempotent create (the key itself excluded)."""
        data = self.model_dump(mode="json", by_alias=True, exclude={"idempotency_key"}, exclude_none=True)
        return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


MAX_BATCH_JOBS = 100  # jobs per batch create: four or more DynamoDB transactions of them


class JobBatchBody(ApiModel):
    """Jobs to create in one request (`POST /v1/jobs/batch`). Each is checked on its own, as
    the body of a single create is, so one job's mistake refuses that job alone."""

    jobs: list[SkipValidation[JobBody]] = Field(
        description=f"1 to {MAX_BATCH_JOBS} jobs, each as the body of POST /v1/jobs",
        json_schema_extra={"minItems": 1, "maxItems": MAX_BATCH_JOBS},
    )

    @field_validator("jobs", mode="before")
    @classmethod
    def _bounded(cls, jobs: Any) -> Any:
        return one_to(MAX_BATCH_JOBS, "jobs", jobs)


def _whole_seconds(
    field: str, value: timedelta | None, problems: list[FieldProblem], minimum: int
) -> int | None:
    if value is None:
        return None
    seconds = value.total_seconds()
    if seconds != int(seconds) or seconds < minimum:
        problems.append(FieldProblem(field, f"must be a whole number of seconds >= {minimum}"))
        return None
    return int(seconds)


_SCHEDULE_FIELDS = ("runAt", "cron", "timeZone", "every", "specs")


def merge_patch(job: Job, patch: dict[str, Any]) -> tuple[JobBody, bool]:
    """Apply an RFC 7396 merge patch to the job's body. Returns the body and whether the
    rate anchor must be reset (a new `every` or `startAt`)."""
    if "idempotencyKey" in patch:
        raise ValidationFailed("idempotencyKey", "only applies to create")
    merged = JobFieldsView.from_job(job).model_dump(mode="json", by_alias=True, exclude_none=True)
    if any(name in patch for name in ("runAt", "cron", "every", "specs")):
        # A new schedule replaces the old one, but a new cron (or specs) keeps the zone it had.
        keep_zone = ("cron" in patch or "specs" in patch) and "timeZone" in merged
        for name in _SCHEDULE_FIELDS:
            if not (name == "timeZone" and keep_zone):
                merged.pop(name, None)
    current_target = merged.get("target")
    new_target = patch.get("target")
    if (
        isinstance(new_target, dict)
        and isinstance(current_target, dict)
        and new_target.get("kind", current_target.get("kind")) != current_target.get("kind")
    ):
        merged.pop("target")  # another kind of target replaces the old one whole
    merged = _merge(merged, patch)
    if "payload" in patch:
        merged["payload"] = patch["payload"]  # replaced whole, as documented: null sets null
    target = merged.get("target")
    headers = target.get("headers") if isinstance(target, dict) else None
    for name, value in (headers or {}).items() if isinstance(headers, dict) else ():
        if value == REDACTED:  # the base's redaction, never to be written back as a value
            raise ValidationFailed(
                f"target.http.headers.{name}",
                "holds a credential stored as a literal before literals were refused; "
                'replace it with a secret reference {"valueFrom": "<ARN>"} (or null to remove it)',
            )
    try:
        body = JobBody.model_validate(merged)
    except ValidationError as exc:
        raise validation_failed(exc) from None
    return body, "every" in patch or "specs" in patch or "startAt" in patch


def _merge(base: Any, patch: Any) -> Any:
    """RFC 7396: objects merge recursively, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(base) if isinstance(base, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = _merge(result.get(name), value)
    return result


# --- routes that take no body ---


class EmptyBody(ApiModel):
    """The body of a route that takes none: absent, empty, or `{}`. A member in it is refused
    as an unknown member is anywhere else (400 naming it), never ignored."""


# --- runs and leases ---

JobType = Annotated[str, Field(pattern=JOB_TYPE_PATTERN)]


class BackfillBody(ApiModel):
    """The past window to backfill, half-open: a run for each occurrence t with
    start <= t < end (at most 1,000 of them; end not after now, start before end)."""

    start: ClientBound = Field(
        description="RFC 3339 instant, included: an occurrence at start is run (a fraction of a"
        " second is rounded up: occurrences are whole seconds)"
    )
    end: ClientBound = Field(
        description="RFC 3339 instant, excluded: an occurrence at end is not run (a fraction of a"
        " second is rounded up: one at 05:00:00 is inside an end of 05:00:00.5)"
    )


class FixFields(ApiModel):
    """A redrive's fix: the target and/or payload the run runs with from now on (its job is
    left as it is). Absent: kept; `"payload": null` sets null."""

    target: Target | None = Field(
        default=None, description="replaces the run's target (the rules of a job's target)"
    )
    payload: Any = Field(default=None, description="replaces the run's payload (given: even null)")

    def fix(self) -> RunFix | None:
        """The fix checked under the rules of a job write; None when nothing is replaced.
        Raises ValidationFailed naming the field (target.url, payload...)."""
        replaces_payload = "payload" in self.model_fields_set
        if self.target is None and not replaces_payload:
            return None
        try:
            return RunFix.model_validate(
                {
                    "target": self.target.model_dump() if self.target else None,
                    "payload": self.payload,
                    "replaces_payload": replaces_payload,
                },
                context=WRITE,
            )
        except ValidationError as exc:
            raise validation_failed(exc, domain=True) from None


class RedriveBody(FixFields):
    reason: str | None = Field(default=None, max_length=500)
    # An at-most-once run that died because its effect may have started runs that effect
    # again when redriven: the caller must say so (recorded in the run's history).
    accept_repeated_effect: StrictBool = Field(default=False, alias="acceptRepeatedEffect")


class BulkDeadLettersBody(FixFields):
    """Which dead letters a bulk redrive or discard changes: `runKeys`, or one page of those
    the filters keep (`since`/`until` bound when each died), from `cursor`. A redrive of one
    job's dead letters (`jobId`) may carry a fix (`target`, `payload`) for each of them."""

    reason: str = Field(min_length=1, max_length=500)
    dry_run: StrictBool = Field(default=False, alias="dryRun")
    run_keys: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = Field(
        default=None, alias="runKeys", min_length=1, max_length=100
    )
    job_id: str | None = Field(default=None, alias="jobId", pattern=r"^j_[0-9a-z]{1,64}$")
    error_class: str | None = Field(default=None, alias="errorClass", min_length=1, max_length=128)
    since: ClientInstant | None = None
    until: ClientInstant | None = None
    limit: StrictInt = Field(default=100, ge=1, le=100)
    cursor: str | None = Field(default=None, max_length=4096)
    accept_repeated_effect: StrictBool = Field(default=False, alias="acceptRepeatedEffect")


class ClaimBody(ApiModel):
    types: list[JobType] = Field(min_length=1, max_length=10)
    max_runs: StrictInt = Field(default=1, ge=1, le=10, alias="max")
    lease_seconds: StrictInt = Field(default=60, ge=10, le=900)
    worker_id: str = Field(min_length=1, max_length=128)


MAX_FENCE = 10**18  # far beyond any lease count; keeps the number exact in DynamoDB


class HeartbeatBody(ApiModel):
    fence: StrictInt = Field(ge=0, le=MAX_FENCE)
    lease_seconds: StrictInt = Field(default=60, ge=10, le=900)


class ReportedError(ApiModel):
    error_class: str = Field(alias="class", min_length=1, max_length=128)
    message: str = Field(max_length=4000)
    retryable: StrictBool = True


class CompleteBody(ApiModel):
    fence: StrictInt = Field(ge=0, le=MAX_FENCE)
    outcome: Literal["succeeded", "failed"]
    result: Any = None
    error: ReportedError | None = None

    @model_validator(mode="after")
    def _error_only_on_failure(self) -> CompleteBody:
        if self.error is not None and self.outcome == "succeeded":
            raise rule_on("error", "only applies when outcome is failed")
        return self


# --- schedules ---

MAX_PREVIEW = 100  # fire times one preview lists


class SchedulePreviewBody(BoundedScheduleLists):
    """A schedule not saved (`POST /v1/schedules/preview`): the schedule members of a job's
    body, checked by the same rules, and how many fire times to list from `after` (default
    now)."""

    run_at: ClientInstant | None = None
    cron: str | None = Field(default=None, max_length=MAX_CRON_CHARS)
    time_zone: str | None = Field(default=None, max_length=64)
    every: Duration | None = Field(default=None, description="ISO 8601 duration (PT15M) or seconds")
    specs: list[SpecBody] | None = Field(
        default=None, json_schema_extra={"minItems": 1, "maxItems": MAX_SCHEDULE_SPECS}
    )
    exclude: list[ExclusionBody] | None = Field(
        default=None, json_schema_extra={"minItems": 1, "maxItems": MAX_EXCLUSIONS}
    )
    start_at: ClientInstant | None = None
    end_at: ClientInstant | None = None
    max_runs: StrictInt | None = None
    dst: DstPolicy | None = None
    catch_up_window: Duration | None = Field(
        default=None, description="as a job's: bounds a runAt in the past"
    )
    count: StrictInt = Field(
        default=10, ge=1, le=MAX_PREVIEW, description=f"fire times to list, 1 to {MAX_PREVIEW}"
    )
    after: ClientInstant | None = Field(
        default=None, description="list fire times after this instant (default now)"
    )

    def to_spec(self, anchor: datetime) -> JobSpec:
        """The spec a job of this schedule would have (rates counted from `startAt`, else
        `anchor`); every rule it breaks comes back as a ValidationFailed naming the field."""
        members = {
            name: getattr(self, name)
            for name in SchedulePreviewBody.model_fields
            if name in JobBody.model_fields
        }
        # Checked already, member by member, as a job's body is: only the spec is built here.
        body = JobBody.model_construct(name="preview", type="preview", **members)
        return body.to_spec(self.start_at or anchor)


# --- calendars ---


class CalendarEntryBody(ApiModel):
    """One entry of a calendar: exactly one of `date` (a local day), `startDate`..`endDate`
    (local days, both included) or `start`..`end` (instants, `end` excluded). Local days are
    read in the zone of the job that references the calendar."""

    date: ClientDate | None = None
    start_date: ClientDate | None = None
    end_date: ClientDate | None = None
    start: ClientInstant | None = None
    end: ClientInstant | None = None


class CalendarBody(ApiModel):
    """A calendar's entries (`PUT /v1/calendars/{name}`): all of them, replacing any before."""

    entries: list[CalendarEntryBody] = Field(
        description=f"0 to {MAX_CALENDAR_ENTRIES} dates, date ranges and instant ranges",
        json_schema_extra={"maxItems": MAX_CALENDAR_ENTRIES},
    )

    @field_validator("entries", mode="before")
    @classmethod
    def _few_entries(cls, entries: Any) -> Any:
        if isinstance(entries, list) and len(entries) > MAX_CALENDAR_ENTRIES:
            raise ValueError(f"holds at most {MAX_CALENDAR_ENTRIES} entries; got {len(entries)}")
        return entries

    def to_calendar(self, name: str) -> Calendar:
        """The domain calendar; every rule it breaks comes back as a ValidationFailed naming
        the field (`entries.<i>.<member>`)."""
        try:
            return Calendar.model_validate(
                {"name": name, "entries": [e.model_dump(exclude_none=True) for e in self.entries]},
                context=WRITE,
            )
        except ValidationError as exc:
            raise validation_failed(exc, domain=True) from None
