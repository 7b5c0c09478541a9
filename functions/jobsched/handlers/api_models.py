"""The HTTP shapes of the API (camelCase JSON) and their mapping to and from the domain.

Request models check types only; the domain models own the rules, and their errors are
mapped back to the API's field names here, so every 400 names the field the client sent."""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime, timedelta
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, ValidationError, WithJsonSchema
from pydantic.alias_generators import to_camel

from ..domain.errors import FieldProblem, ValidationFailed
from ..domain.instants import ClientInstant
from ..domain.models import (
    WRITE,
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

# --- request bodies are JSON, decoded strictly ---

MAX_JSON_DEPTH = 32  # arrays and objects nested in one body
MAX_NUMBER_CHARS = 64  # characters of one JSON number
_SURROGATE = re.compile("[\ud800-\udfff]")
_PATH_SHOWN = 8  # segments of a field path named in an error


class _Refused:
    """What the decoder leaves where a value breaks a rule, so the walk can name its field."""

    __slots__ = ("rule",)

    def __init__(self, rule: str) -> None:
        self.rule = rule


def _number(text: str, kind: type[int] | type[float]) -> Any:
    if len(text) > MAX_NUMBER_CHARS:
        return _Refused(f"is a number of {len(text)} characters; at most {MAX_NUMBER_CHARS}")
    value = kind(text)
    if isinstance(value, float) and not math.isfinite(value):
        return _Refused("is a number beyond the range of a 64-bit float")
    return value


def _constant(text: str) -> Any:
    return _Refused(f"{text} is not JSON; numbers are finite")


def decode_json(text: str | bytes) -> Any:
    """The body's JSON, or a 400 naming the field: no NaN or Infinity, no number longer than
    MAX_NUMBER_CHARS, no nesting deeper than MAX_JSON_DEPTH, no lone UTF-16 surrogate in a
    string (it is not Unicode text and cannot be stored or echoed)."""
    try:
        data = json.loads(
            text,
            parse_int=lambda t: _number(t, int),
            parse_float=lambda t: _number(t, float),
            parse_constant=_constant,
        )
    except RecursionError:
        raise _invalid_body(
            _too_deep_at(text), f"nests deeper than {MAX_JSON_DEPTH} arrays or objects"
        ) from None
    problem = _first_problem(data)
    if problem is not None:
        raise _invalid_body(*problem)
    return data


def _first_problem(data: Any) -> tuple[tuple[str | int, ...], str] | None:
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, _Refused):
            return path, value.rule
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return path, "contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not Unicode text"
            continue
        if not isinstance(value, dict | list):
            continue
        if len(path) >= MAX_JSON_DEPTH:
            return path, f"nests deeper than {MAX_JSON_DEPTH} arrays or objects"
        if isinstance(value, dict):
            for key, item in value.items():
                if _SURROGATE.search(key):
                    return path, "has a member name with a lone UTF-16 surrogate, which is not Unicode text"
                stack.append((item, (*path, key)))
        else:
            stack.extend((item, (*path, index)) for index, item in enumerate(value))
    return None


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},:]')


def _too_deep_at(text: str | bytes) -> tuple[str | int, ...]:
    """Where a body too deep for the parser first nests too deep (a scan of its brackets)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    frames: list[list[Any]] = []  # [bracket, member name or index]
    last_string = ""
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token[0] == '"':
            last_string = token
        elif token in "[{":
            if len(frames) >= MAX_JSON_DEPTH:
                break
            frames.append([token, 0 if token == "[" else ""])
        elif token in "]}":
            if frames:
                frames.pop()
        elif frames and token == ",":
            if frames[-1][0] == "[":
                frames[-1][1] += 1
        elif frames and token == ":":
            try:
                frames[-1][1] = str(json.loads(last_string))
            except ValueError:
                frames[-1][1] = last_string.strip('"')
    return tuple(frame[1] for frame in frames)


def _invalid_body(path: tuple[str | int, ...], rule: str) -> RequestValidationError:
    if path and isinstance(path[0], int):
        path = ()  # the body itself is an array: it is the body that is wrong
    shown = tuple(p[:64] if isinstance(p, str) else p for p in path[:_PATH_SHOWN])
    return RequestValidationError([{"type": "json_refused", "loc": ("body", *shown), "msg": rule}])


# --- strict field types: JSON types are never coerced (no "3" for 3, no true for 1) ---

StrictInt = Annotated[int, Strict()]
StrictBool = Annotated[bool, Strict()]
Seconds = Annotated[float, Strict(), Field(allow_inf_nan=False)]
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


class ApiModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class RetryBody(ApiModel):
    base_seconds: Seconds | None = None
    cap_seconds: Seconds | None = None
    max_age_seconds: StrictInt | None = None


class JobBody(ApiModel):
    """A job as the client writes it (POST body; a PATCH is merged into this shape)."""

    name: str = Field(min_length=1, max_length=256)
    type: str = Field(max_length=128)
    target: Target | None = None
    payload: Any = None
    run_at: ClientInstant | None = None
    cron: str | None = Field(default=None, max_length=MAX_CRON_CHARS)
    time_zone: str | None = Field(default=None, max_length=64)
    every: Duration | None = Field(default=None, description="ISO 8601 duration (PT15M) or seconds")
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
    delivery: Delivery | None = None
    jitter_seconds: StrictInt | None = None
    timeout_seconds: StrictInt | None = None
    pause_on_failure: StrictBool | None = None

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
                },
                context=WRITE,
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
