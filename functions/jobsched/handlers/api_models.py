"""The HTTP shapes of the API (camelCase JSON) and their mapping to and from the domain.

Request models check types only; the domain models own the rules, and their errors are
mapped back to the API's field names here, so every 400 names the field the client sent."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from ..domain.errors import FieldProblem, ValidationFailed
from ..domain.instants import Instant
from ..domain.models import (
    Delivery,
    DstPolicy,
    Job,
    JobSpec,
    JobState,
    Misfire,
    Overlap,
    Priority,
    ScheduleKind,
    Target,
)


class ApiModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class RetryBody(ApiModel):
    base_seconds: float | None = None
    cap_seconds: float | None = None
    max_age_seconds: int | None = None


class JobBody(ApiModel):
    """A job as the client writes it (POST body; a PATCH is merged into this shape)."""

    name: str
    type: str
    target: Target | None = None
    payload: Any = None
    run_at: Instant | None = None
    cron: str | None = None
    time_zone: str | None = None
    every: timedelta | None = Field(default=None, description="ISO 8601 duration (PT15M) or seconds")
    start_at: Instant | None = None
    end_at: Instant | None = None
    max_runs: int | None = None
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=255)
    priority: Priority = Priority.DEFAULT
    missed_runs: Misfire | None = None
    catch_up_window: timedelta | None = Field(default=None, description="ISO 8601 duration or seconds")
    overlap: Overlap | None = None
    dst: DstPolicy | None = None
    max_attempts: int | None = None
    retry: RetryBody | None = None
    delivery: Delivery | None = None
    jitter_seconds: int | None = None
    timeout_seconds: int | None = None
    pause_on_failure: bool | None = None

    def to_spec(self, anchor: datetime | None = None) -> JobSpec:
        """Build the domain spec; every rule it breaks comes back as a ValidationFailed."""
        candidates = (("runAt", self.run_at), ("cron", self.cron), ("every", self.every))
        given = [name for name, value in candidates if value is not None]
        if len(given) != 1:
            raise ValidationFailed(
                "schedule", f"exactly one of runAt, cron or every is required; got {len(given) or 'none'}"
            )
        problems: list[FieldProblem] = []
        every = _whole_seconds("every", self.every, problems, minimum=1)
        window = _whole_seconds("catchUpWindow", self.catch_up_window, problems, minimum=0)
        if self.time_zone and not self.cron:
            problems.append(FieldProblem("timeZone", "only applies to a cron schedule"))
        if problems:
            raise ValidationFailed(problems[0].field, problems[0].rule, *problems[1:])
        kind = {"runAt": ScheduleKind.ONCE, "cron": ScheduleKind.CRON, "every": ScheduleKind.RATE}[given[0]]
        schedule: dict[str, Any] = {
            "kind": kind,
            "at": self.run_at,
            "cron": self.cron,
            "time_zone": (self.time_zone or "UTC") if self.cron else None,
            "every_seconds": every,
            "anchor": anchor if kind is ScheduleKind.RATE else None,
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
            return JobSpec.model_validate(
                {
                    "name": self.name,
                    "type": self.type,
                    "target": self.target,
                    "payload": self.payload,
                    "schedule": schedule,
                    "priority": self.priority,
                    "policies": policies,
                }
            )
        except ValidationError as exc:
            raise validation_failed(exc, domain=True) from None

    def body_hash(self) -> str:
        """Fingerprint of the request for idempotent create (the key itself excluded)."""
        data = self.model_dump(mode="json", by_alias=True, exclude={"idempotency_key"}, exclude_none=True)
        return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


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


def body_of(job: Job) -> dict[str, Any]:
    """The job in the shape a client writes it (the base a PATCH is merged into)."""
    spec = job.spec
    schedule = spec.schedule
    policies = spec.policies
    body: dict[str, Any] = {
        "name": spec.name,
        "type": spec.type,
        "target": spec.target.model_dump(mode="json", by_alias=True) if spec.target else None,
        "payload": spec.payload,
        "runAt": _iso(schedule.at),
        "cron": schedule.cron,
        "timeZone": schedule.time_zone,
        "every": schedule.every_seconds,
        "startAt": _iso(schedule.start_at),
        "endAt": _iso(schedule.end_at),
        "maxRuns": schedule.max_runs,
        "priority": spec.priority.value,
        "missedRuns": policies.misfire.value,
        "catchUpWindow": policies.catch_up_window_seconds,
        "overlap": policies.overlap.value,
        "dst": schedule.dst.model_dump(mode="json", by_alias=True),
        "maxAttempts": policies.retry.max_attempts,
        "retry": {
            "baseSeconds": policies.retry.base_seconds,
            "capSeconds": policies.retry.cap_seconds,
            "maxAgeSeconds": policies.retry.max_age_seconds,
        },
        "delivery": policies.delivery.value,
        "jitterSeconds": policies.jitter_seconds,
        "timeoutSeconds": policies.timeout_seconds,
        "pauseOnFailure": policies.pause_on_failure,
    }
    return {k: v for k, v in body.items() if v is not None}


_SCHEDULE_FIELDS = ("runAt", "cron", "timeZone", "every")


def merge_patch(job: Job, patch: dict[str, Any]) -> tuple[JobBody, bool]:
    """Apply an RFC 7396 merge patch to the job's body. Returns the body and whether the
    rate anchor must be reset (a new `every` or `startAt`)."""
    if "idempotencyKey" in patch:
        raise ValidationFailed("idempotencyKey", "only applies to create")
    merged = body_of(job)
    if any(name in patch for name in ("runAt", "cron", "every")):
        # A new schedule replaces the old one, but a new cron keeps the zone it had.
        keep_zone = "cron" in patch and "timeZone" in merged
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
    try:
        body = JobBody.model_validate(merged)
    except ValidationError as exc:
        raise validation_failed(exc) from None
    return body, "every" in patch or "startAt" in patch


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


class RetryView(ApiModel):
    base_seconds: float
    cap_seconds: float
    max_age_seconds: int | None = None


class JobView(ApiModel):
    """A job as the API returns it: the written shape plus identity and lifecycle."""

    job_id: str
    name: str
    type: str
    target: Target | None = None
    payload: Any = None
    run_at: str | None = None
    cron: str | None = None
    time_zone: str | None = None
    every: int | None = Field(default=None, description="seconds")
    start_at: str | None = None
    end_at: str | None = None
    max_runs: int | None = None
    priority: Priority
    missed_runs: Misfire
    catch_up_window: int = Field(description="seconds")
    overlap: Overlap
    dst: DstPolicy
    max_attempts: int
    retry: RetryView
    delivery: Delivery
    jitter_seconds: int
    timeout_seconds: int
    pause_on_failure: bool
    version: int
    state: JobState
    next_run_at: str | None = None
    runs_created: int
    created_at: str
    updated_at: str
    next_fire_times: list[str] | None = None


def job_view(job: Job, upcoming: list[datetime], *, with_fire_times: bool = False) -> dict[str, Any]:
    """`upcoming` are the job's next fire times from now; nextRunAt is the first of them."""
    view = {
        "jobId": job.job_id,
        **body_of(job),
        "version": job.version,
        "state": job.state.value,
        "nextRunAt": _iso(upcoming[0]) if upcoming else None,
        "runsCreated": job.runs_created,
        "createdAt": _iso(job.created_at),
        "updatedAt": _iso(job.updated_at),
    }
    if with_fire_times:
        view["nextFireTimes"] = [_iso(t) for t in upcoming]
    return {k: v for k, v in view.items() if v is not None}


class JobList(ApiModel):
    items: list[JobView]
    next_cursor: str | None = None


class ErrorItem(ApiModel):
    field: str
    rule: str


class ErrorBody(ApiModel):
    """Errors may carry details beside code and message (e.g. currentVersion, state)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    code: str
    message: str
    errors: list[ErrorItem] | None = None


def _iso(value: datetime | None) -> str | None:
    from ..domain.instants import format_instant

    return format_instant(value) if value is not None else None


# --- mapping pydantic errors to the API's field names ---

# Domain paths that the API spells differently (after the camelCase alias).
_RENAMES = {
    "at": "runAt",
    "everySeconds": "every",
    "misfire": "missedRuns",
    "catchUpWindowSeconds": "catchUpWindow",
    "retry.maxAttempts": "maxAttempts",
}
_FIELD_IN_MESSAGE = re.compile(r"^(?:Value error, )?([A-Za-z][\w.]*): (.+)$", re.S)


def field_name(loc: tuple[Any, ...], *, domain: bool = False) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "header", "path"):
        parts = parts[1:]
    if domain and parts and parts[0] in ("schedule", "policies"):
        parts = parts[1:]
    parts = [to_camel(p) if "_" in p else p for p in parts]
    path = ".".join(parts)
    for old, new in _RENAMES.items():
        if path == old or path.startswith(old + "."):
            return new + path[len(old) :]
    return path


def problems_of(errors: list[Any], *, domain: bool = False) -> list[FieldProblem]:
    problems = []
    for error in errors:
        message = str(error.get("msg", "is invalid"))
        field = field_name(tuple(error.get("loc", ())), domain=domain)
        named = _FIELD_IN_MESSAGE.match(message)
        if named and (not field or field in ("schedule", "policies", "retry")):
            field, message = named.group(1), named.group(2)
        elif message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        if error.get("type") == "extra_forbidden":
            message = "is not a known field"
        if error.get("type") == "json_invalid":
            field, message = "body", f"is not valid JSON ({message})"
        problems.append(FieldProblem(field or "body", message))
    return problems


def validation_failed(exc: ValidationError, *, domain: bool = False) -> ValidationFailed:
    problems = problems_of(exc.errors(), domain=domain)
    return ValidationFailed(problems[0].field, problems[0].rule, *problems[1:])
