"""The job definition and its policies.

Field names are snake_case in Python and camelCase on the wire (the alias), so the API
reuses these models for nested objects instead of keeping a second copy."""

from __future__ import annotations

import json
import re
from datetime import date, datetime
from enum import StrEnum
from functools import cache
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from .cron import (
    check_cron_expression,
    check_monthly,
    check_time_of_day,
    check_time_zone_name,
    has_seconds_field,
    is_business_day_rule,
    shown,
    zone,
)
from .instants import Instant

MAX_PAYLOAD_BYTES = 64 * 1024
MAX_SPEC_BYTES = 100 * 1024  # the whole job as stored (compact JSON): payload, target, schedule...
MAX_HEADER_NAME_CHARS = 128
MAX_HEADER_VALUE_CHARS = 4096
JOB_TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"

# Validation context of a write (create, patch). Rules added after jobs were first stored
# hold for every write but not when a stored job is read back, so older jobs stay readable.
WRITE: dict[str, Any] = {"write": True}


def writing(info: ValidationInfo) -> bool:
    return isinstance(info.context, dict) and info.context.get("write") is True


# Validation context of a read of what another release may have written: a stored item read
# back (store.definitions, store.runs), or an answer of a newer server (the client). Members
# the model does not know are ignored instead of refused, so a rollback past a release that
# added a field leaves every item it wrote readable. Requests and writes are validated
# without it, and an unknown member there stays a 400 naming it.
TOLERATE_UNKNOWN = "tolerate_unknown"
TOLERANT: dict[str, Any] = {TOLERATE_UNKNOWN: True}


@cache
def _member_names(model: type[BaseModel]) -> frozenset[str]:
    """What `model` takes as a member: each field's name and its alias."""
    fields = model.model_fields.values()
    return frozenset(model.model_fields) | {field.alias for field in fields if field.alias}


def known_members(model: type[BaseModel], data: Any, info: ValidationInfo) -> Any:
    """`data` without the members `model` does not know when validated under TOLERANT; else
    `data` as given (the model's `extra="forbid"` refuses them)."""
    if not (isinstance(data, dict) and isinstance(info.context, dict) and info.context.get(TOLERATE_UNKNOWN)):
        return data
    names = _member_names(model)
    return {key: value for key, value in data.items() if key in names}


class ForwardCompatible(BaseModel):
    """A model that refuses members it does not know, except under TOLERANT: there they are
    dropped (`known_members`), in it and in every model it holds."""

    @model_validator(mode="before")
    @classmethod
    def _known_members(cls, data: Any, info: ValidationInfo) -> Any:
        return known_members(cls, data, info)


RULE_ON_FIELD = "rule_on_field"


def rule_on(field: str | tuple[str, ...], rule: str) -> PydanticCustomError:
    """A rule a model-level check found broken, raised on the field it concerns: `field` is
    that field's path below the model (Python names; `()` for the model as a whole), carried
    in the error's context so the API names it without reading the message."""
    loc = (field,) if isinstance(field, str) else field
    return PydanticCustomError(RULE_ON_FIELD, "{rule}", {"loc": loc, "rule": rule})


class Model(ForwardCompatible):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, use_enum_values=False
    )


class JobState(StrEnum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    CANCELLED = "CANCELLED"
    COMPLETED = "COMPLETED"


class Priority(StrEnum):
    HIGH = "high"
    DEFAULT = "default"
    LOW = "low"


class Misfire(StrEnum):
    """What to do with occurrences missed while the system was down or the job paused."""

    SKIP = "skip"
    RUN_ONCE = "run-once"
    CATCH_UP = "catch-up"


class Overlap(StrEnum):
    """What to do when an occurrence comes due while the previous run is still open."""

    ALLOW = "allow"
    SKIP = "skip"
    BUFFER_ONE = "buffer-one"


class DstGap(StrEnum):
    SHIFT = "shift"  # run at the first instant after the gap
    SKIP = "skip"


class DstFold(StrEnum):
    """Which reading of a repeated wall time (clocks going back) an occurrence runs at."""

    FIRST = "first"
    LAST = "last"
    BOTH = "both"  # two runs, one at each reading (two instants: two run keys)
    NONE = "none"  # no run for that occurrence


class DeliveryGuarantee(StrEnum):
    """How often a run's effect may happen: at least once (retried), or at most once."""

    AT_LEAST_ONCE = "at-least-once"
    AT_MOST_ONCE = "at-most-once"


class ScheduleKind(StrEnum):
    ONCE = "once"
    CRON = "cron"
    RATE = "rate"
    UNION = "union"  # several cron and rate specs: one occurrence per instant any of them fires


# The most specs one union schedule holds: the sweep evaluates every one of them for each
# occurrence it looks for, so the bound keeps a job's cost per run near a single cron's.
MAX_SCHEDULE_SPECS = 10


class DstPolicy(Model):
    gap: DstGap = DstGap.SHIFT
    fold: DstFold = DstFold.FIRST


def checked_cron(cron: str, time_zone: str | None, info: ValidationInfo) -> str:
    """`cron` normalised, once it and `time_zone` hold the rules of a cron schedule (the
    zone's name checked against the database on a write); else the rule broken, raised on
    `cron` or `time_zone`."""
    if not time_zone:
        raise rule_on("time_zone", "required with cron (an IANA name such as Europe/London)")
    try:
        normalised = check_cron_expression(cron)
    except ValueError as exc:
        raise rule_on("cron", str(exc)) from None
    checked_zone(time_zone, info, "cron")
    return normalised


def checked_zone(time_zone: str | None, info: ValidationInfo, needed_by: str) -> None:
    """Nothing, once `time_zone` is a zone (its name checked against the database on a
    write); else the rule broken, raised on `time_zone`, naming what needs it."""
    if not time_zone:
        raise rule_on("time_zone", f"required with {needed_by} (an IANA name such as Europe/London)")
    try:
        if writing(info):
            check_time_zone_name(time_zone)
        zone(time_zone)
    except ValueError as exc:
        raise rule_on("time_zone", str(exc)) from None


class ScheduleSpec(Model):
    """One member of a union schedule: `cron` in `time_zone`; a rate of `every_seconds`
    counted from its schedule's anchor; or a day of each month (`monthly`, a calendar rule
    such as `last-weekday` or `2nd TUE`) at a time of day (`at`) in `time_zone`. The
    union's bounds and DST policy hold for it."""

    cron: str | None = None
    time_zone: str | None = None
    every_seconds: int | None = Field(default=None, ge=1, le=366 * 24 * 3600)
    monthly: str | None = None
    at: str | None = None
    # A business-day rule's holidays: the name of a calendar of the tenant's (its local days).
    holidays: str | None = None

    @model_validator(mode="after")
    def _one_form(self, info: ValidationInfo) -> ScheduleSpec:
        given = [v for v in (self.cron, self.every_seconds, self.monthly) if v is not None]
        if len(given) != 1:
            raise rule_on((), "exactly one of cron, every or monthly is required")
        if (self.at is not None) != (self.monthly is not None):
            raise rule_on("at", "is required with monthly, and applies only to it")
        if self.holidays is not None and self.monthly is None:
            raise rule_on("holidays", "applies only to a business-day rule of monthly")
        if self.every_seconds is not None:
            if self.time_zone is not None:
                raise rule_on("time_zone", "only applies to a cron or monthly spec")
            return self
        if self.monthly is not None and self.at is not None:
            try:
                object.__setattr__(self, "monthly", check_monthly(self.monthly))
            except ValueError as exc:
                raise rule_on("monthly", str(exc)) from None
            try:
                check_time_of_day(self.at)
            except ValueError as exc:
                raise rule_on("at", str(exc)) from None
            checked_zone(self.time_zone, info, "monthly")
            if self.holidays is not None:
                if not is_business_day_rule(self.monthly):
                    raise rule_on("holidays", "applies only to a business-day rule of monthly")
                try:
                    check_calendar_name(self.holidays)
                except ValueError as exc:
                    raise rule_on("holidays", str(exc)) from None
            return self
        assert self.cron is not None
        # Frozen model: store the canonical form.
        object.__setattr__(self, "cron", checked_cron(self.cron, self.time_zone, info))
        return self


# The most exclusions one job holds: each is checked against every occurrence the sweep finds.
MAX_EXCLUSIONS = 20

# A calendar's name (domain.calendars): what a path segment and a store key carry unescaped.
CALENDAR_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
CALENDAR_NAME_RULE = "must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"
_CALENDAR_NAME = re.compile(CALENDAR_NAME_PATTERN, re.ASCII)
# The most calendar references one job holds (the same calendar twice counts twice): each is
# resolved, its entries turned into ranges in the reference's zone, whenever the job's
# occurrences are computed.
MAX_CALENDARS_PER_JOB = 5


def check_calendar_name(name: str) -> str:
    """`name`, once it follows CALENDAR_NAME_RULE; else ValueError naming the rule."""
    if not _CALENDAR_NAME.fullmatch(name):
        raise ValueError(f"{shown(name)} {CALENDAR_NAME_RULE}")
    return name


EXCLUSION_CRON_FIELDS = (
    "must have 5 fields (minute hour day-of-month month day-of-week): an exclusion cron "
    "matches whole minutes, a seconds field is not taken; got 6"
)


class Exclusion(Model):
    """Instants a job does not fire at, even when its schedule does. Exactly one form:
    - `cron` (in `time_zone`): an occurrence whose wall time there matches it, a 5-field
      expression to the minute (`* * 25 12 *` is all of 25 December); a 6-field one is
      refused on a write (a job stored with one reads back, matched to the second);
    - `start_date`..`end_date` (in `time_zone`): an occurrence whose local date lies in
      that range, both days included;
    - `start`..`end`: an occurrence at an instant t with start <= t < end;
    - `calendar` (in `time_zone`): an occurrence the tenant's calendar of that name covers
      (its days read in `time_zone`), as it stands when the occurrence is computed."""

    cron: str | None = None
    calendar: str | None = None
    time_zone: str | None = None
    start_date: date | None = None
    end_date: date | None = None
    start: Instant | None = None
    end: Instant | None = None

    @model_validator(mode="after")
    def _one_form(self, info: ValidationInfo) -> Exclusion:
        forms = [
            name
            for name, given in (
                ("cron", self.cron is not None),
                ("dates", self.start_date is not None or self.end_date is not None),
                ("instants", self.start is not None or self.end is not None),
                ("calendar", self.calendar is not None),
            )
            if given
        ]
        if len(forms) != 1:
            raise rule_on((), "exactly one of cron, startDate/endDate, start/end or calendar is required")
        if self.calendar is not None:
            try:
                check_calendar_name(self.calendar)
            except ValueError as exc:
                raise rule_on("calendar", str(exc)) from None
            checked_zone(self.time_zone, info, "calendar")
        elif self.cron is not None:
            # Frozen model: store the canonical form.
            object.__setattr__(self, "cron", checked_cron(self.cron, self.time_zone, info))
            if writing(info) and has_seconds_field(self.cron):
                # Stepping through excluded seconds one by one costs a search a step each.
                raise rule_on("cron", EXCLUSION_CRON_FIELDS)
        elif forms == ["dates"]:
            if self.start_date is None or self.end_date is None:
                missing = "end_date" if self.end_date is None else "start_date"
                raise rule_on(missing, "is required with its pair")
            if self.end_date < self.start_date:
                raise rule_on("end_date", "must not be before startDate")
            if self.start_date.year < 1970:
                raise rule_on("start_date", "must be in 1970 or after")
            if self.end_date.year > 9998:
                raise rule_on("end_date", "must be in 9998 or before")
            checked_zone(self.time_zone, info, "startDate/endDate")
        else:
            if self.start is None or self.end is None:
                raise rule_on("end" if self.end is None else "start", "is required with its pair")
            if self.end <= self.start:
                raise rule_on("end", "must be after start")
            if self.time_zone is not None:
                raise rule_on("time_zone", "only applies to a cron or dates")
        return self


class Schedule(Model):
    """When a job fires. Exactly one of: `at` (once), `cron` + `time_zone`, `every_seconds`
    (+ anchor), or `specs` (a union of crons and rates; rates count from `anchor`)."""

    kind: ScheduleKind
    at: Instant | None = None
    cron: str | None = None
    time_zone: str | None = None
    every_seconds: int | None = Field(default=None, ge=1, le=366 * 24 * 3600)
    anchor: Instant | None = None  # rate origin; the service sets startAt or the time of creation
    start_at: Instant | None = None
    end_at: Instant | None = None
    max_runs: int | None = Field(default=None, ge=1)
    dst: DstPolicy = DstPolicy()
    specs: list[ScheduleSpec] | None = None
    exclude: list[Exclusion] | None = None  # occurrences it does not fire at after all
    # A cron whose occurrences fall only on the day of each month this calendar rule names
    # (domain.cron.monthly_day): set on the member a union's `monthly` spec becomes.
    monthly: str | None = None

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Schedule:
        kind = self.kind
        if kind is not ScheduleKind.UNION and self.specs is not None:
            raise rule_on("specs", f"applies only to a {ScheduleKind.UNION.value} schedule")
        if kind is ScheduleKind.UNION:
            if not self.specs:
                raise rule_on("specs", "required for a union schedule (at least one spec)")
            if writing(info) and len(self.specs) > MAX_SCHEDULE_SPECS:
                raise rule_on("specs", f"holds at most {MAX_SCHEDULE_SPECS} specs; got {len(self.specs)}")
            if self.at or self.cron or self.every_seconds or self.time_zone:
                raise rule_on("specs", "cannot be combined with runAt, cron, timeZone or every")
        elif kind is ScheduleKind.ONCE:
            if self.at is None:
                raise rule_on("at", "required for a one-time schedule")
            if self.cron or self.every_seconds:
                raise rule_on("at", "cannot be combined with cron or every")
        elif kind is ScheduleKind.CRON:
            if not self.cron:
                raise rule_on("cron", "required for a cron schedule")
            # Frozen model: store the canonical form.
            object.__setattr__(self, "cron", checked_cron(self.cron, self.time_zone, info))
            if self.at or self.every_seconds:
                raise rule_on("cron", "cannot be combined with runAt or every")
        else:
            if not self.every_seconds:
                raise rule_on("every_seconds", "required for a rate schedule")
            if self.at or self.cron:
                raise rule_on("every_seconds", "cannot be combined with runAt or cron")
        if self.start_at and self.end_at and self.end_at <= self.start_at:
            raise rule_on("end_at", "must be after startAt")
        if self.exclude is not None:
            if kind is ScheduleKind.ONCE:
                raise rule_on("exclude", "only applies to a recurring schedule (cron, every or specs)")
            if writing(info) and len(self.exclude) > MAX_EXCLUSIONS:
                count = len(self.exclude)
                raise rule_on("exclude", f"holds at most {MAX_EXCLUSIONS} exclusions; got {count}")
        excluding = [e for e in self.exclude or () if e.calendar is not None]
        references = len(excluding) + sum(1 for spec in self.specs or () if spec.holidays is not None)
        if writing(info) and references > MAX_CALENDARS_PER_JOB:
            raise rule_on(
                "exclude" if excluding else "specs",
                f"references calendars at most {MAX_CALENDARS_PER_JOB} times in all; got {references}",
            )
        return self

    @property
    def calendar_names(self) -> tuple[str, ...]:
        """The distinct calendars it references (`exclude`'s, then the specs' `holidays`), in order."""
        named = [e.calendar for e in self.exclude or () if e.calendar is not None]
        named += [spec.holidays for spec in self.specs or () if spec.holidays is not None]
        return tuple(dict.fromkeys(named))

    @property
    def counts_from_anchor(self) -> bool:
        """Whether occurrences are counted from `anchor`: a rate, or a union holding one."""
        if self.kind is ScheduleKind.UNION:
            return any(spec.every_seconds is not None for spec in self.specs or ())
        return self.kind is ScheduleKind.RATE


# The longest `retry.maxAgeSeconds`: an attempt series lasts at most this long, so a run
# made before its job's definition changed is open at most about this long after the change
# (services.definitions.superseded_definition_expiry).
MAX_RETRY_AGE_SECONDS = 14 * 86400


class RetryPolicy(Model):
    max_attempts: int = Field(default=3, ge=1, le=100)
    base_seconds: float = Field(default=2.0, gt=0, le=3600)
    cap_seconds: float = Field(default=300.0, gt=0, le=86400)
    max_age_seconds: int | None = Field(default=86400, ge=1, le=MAX_RETRY_AGE_SECONDS)

    @model_validator(mode="after")
    def _cap_covers_base(self) -> RetryPolicy:
        if self.cap_seconds < self.base_seconds:
            raise rule_on("cap_seconds", "must be at least retry.baseSeconds")
        return self


# The longest effect a job may ask for: what the worker (a Lambda function, at most 900 s)
# can give every run in full after its own work before and after the effect
# (jobsched.services.worker.WORKER_OVERHEAD_SECONDS); the stack sizes the worker from both.
# Jobs written when the limit was 43200 still read; the worker gives them what it can.
MAX_TIMEOUT_SECONDS = 840


class Policies(Model):
    misfire: Misfire = Misfire.RUN_ONCE
    catch_up_window_seconds: int = Field(default=3600, ge=0, le=31 * 86400)
    overlap: Overlap = Overlap.ALLOW
    retry: RetryPolicy = RetryPolicy()
    delivery: DeliveryGuarantee = DeliveryGuarantee.AT_LEAST_ONCE
    jitter_seconds: int = Field(default=0, ge=0, le=3600)
    timeout_seconds: int = Field(default=300, ge=1, le=43200)
    pause_on_failure: bool = False

    @field_validator("timeout_seconds")
    @classmethod
    def _timeout_fits_the_worker(cls, value: int, info: ValidationInfo) -> int:
        if writing(info) and value > MAX_TIMEOUT_SECONDS:
            raise ValueError(f"must be at most {MAX_TIMEOUT_SECONDS} (the worker's longest effect)")
        return value


# --- Targets: what a run does. Each passes the run key as its idempotency key. ---


_REGION = r"[a-z]{2}(?:-[a-z]+)+-\d{1,2}"
_PARTITION = r"arn:aws(?:-[a-z]+)*"
_LAMBDA_NAME = r"[A-Za-z0-9_-]{1,64}(?::(?:\$LATEST|[A-Za-z0-9_-]{1,128}))?"
# What Lambda's Invoke takes: a name, a partial ARN or a full ARN, each with an optional qualifier.
LAMBDA_FUNCTION = re.compile(
    rf"(?:{_PARTITION}:lambda:{_REGION}:\d{{12}}:function:|\d{{12}}:function:)?{_LAMBDA_NAME}", re.ASCII
)
LAMBDA_QUALIFIER = re.compile(r"\$LATEST|[A-Za-z0-9_-]{1,128}", re.ASCII)
SQS_QUEUE_URL = re.compile(
    r"https://(?:[a-z0-9-]+\.)+amazonaws\.com(?:\.cn)?/\d{12}/(?=.{1,80}$)[A-Za-z0-9_-]+(?:\.fifo)?",
    re.ASCII,
)
STATE_MACHINE_ARN = re.compile(
    rf"{_PARTITION}:states:{_REGION}:\d{{12}}:stateMachine:[A-Za-z0-9_.+=@-]{{1,80}}(?::[A-Za-z0-9_-]{{1,80}})?",
    re.ASCII,
)
EVENT_BUS = re.compile(
    rf"(?:{_PARTITION}:events:{_REGION}:\d{{12}}:event-bus/)?[/.\-_A-Za-z0-9]{{1,256}}", re.ASCII
)
# IAM: a path of up to 512 characters and a name of up to 64, both of [\w+=,.@-] (and / in the path).
ROLE_ARN = re.compile(rf"{_PARTITION}:iam::\d{{12}}:role/(?:[\w+=,.@-]+/)*[\w+=,.@-]{{1,64}}", re.ASCII)
ROLE_RULE = "must be an IAM role ARN: arn:aws:iam::<account>:role/<path/><name>"


def _shaped(value: str | None, pattern: re.Pattern[str], rule: str, info: ValidationInfo) -> str | None:
    if value is not None and writing(info) and not pattern.fullmatch(value):
        raise ValueError(rule)
    return value


class RoleTarget(Model):
    """An AWS target. With `role_arn` the worker assumes that role (ExternalId = the tenant's
    external id, see jobsched.targets.roles) and calls the target with its credentials;
    without one, the target must be granted to the tenant by the operator."""

    role_arn: str | None = Field(default=None, max_length=2048)

    @field_validator("role_arn")
    @classmethod
    def _role(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _shaped(value, ROLE_ARN, ROLE_RULE, info)


class LambdaTarget(RoleTarget):
    kind: Literal["lambda"]
    function_arn: str = Field(min_length=1, max_length=256)
    qualifier: str | None = Field(default=None, max_length=128)

    @field_validator("function_arn")
    @classmethod
    def _function(cls, value: str, info: ValidationInfo) -> str:
        rule = (
            "must name a Lambda function: my-function, 123456789012:function:my-function or "
            "arn:aws:lambda:eu-west-1:123456789012:function:my-function, each optionally with :qualifier"
        )
        return _shaped(value, LAMBDA_FUNCTION, rule, info) or value

    @field_validator("qualifier")
    @classmethod
    def _qualifier(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _shaped(value, LAMBDA_QUALIFIER, "must be $LATEST, a version or an alias name", info)


# A header's value read from a secret store at delivery time (targets.secrets), by full ARN:
# the ARN is what the operator grants a tenant and what the worker's IAM policy names.
SECRET_ARN = re.compile(
    rf"{_PARTITION}:secretsmanager:{_REGION}:\d{{12}}:secret:[A-Za-z0-9/_+=.@-]{{1,512}}", re.ASCII
)
PARAMETER_ARN = re.compile(
    rf"{_PARTITION}:ssm:{_REGION}:\d{{12}}:parameter/[A-Za-z0-9_.\-/]{{1,2048}}", re.ASCII
)
_ARN_SERVICE = re.compile(r"arn:[^:]*:([^:]*):", re.ASCII)
SECRET_ARN_RULE = (
    "must be the ARN of a Secrets Manager secret (arn:aws:secretsmanager:<region>:<account>:secret:<name>) "
    "or of an SSM SecureString parameter (arn:aws:ssm:<region>:<account>:parameter/<name>)"
)
MAX_SECRET_PREFIX_CHARS = 64


class SecretRef(Model):
    """`{"valueFrom": "<ARN>"}` in place of a header's literal value: the worker reads the
    secret just before the request, and nothing stores or shows its value. `jsonKey` picks
    one field of a Secrets Manager secret holding a JSON object; `prefix` is literal text
    sent before the value (`"Bearer "`)."""

    value_from: str = Field(max_length=2048)
    json_key: str | None = Field(default=None, min_length=1, max_length=256)
    prefix: str | None = Field(default=None, max_length=MAX_SECRET_PREFIX_CHARS)

    @field_validator("value_from")
    @classmethod
    def _a_secret_store_arn(cls, value: str) -> str:
        if SECRET_ARN.fullmatch(value) or PARAMETER_ARN.fullmatch(value):
            return value
        service = _ARN_SERVICE.match(value)
        if service is not None and service.group(1) not in ("secretsmanager", "ssm"):
            raise ValueError(f"'{service.group(1)}' is not a secret store: {SECRET_ARN_RULE}")
        raise ValueError(SECRET_ARN_RULE)

    @field_validator("prefix")
    @classmethod
    def _printable_prefix(cls, value: str | None) -> str | None:
        if value is not None and not all(" " <= ch <= "~" for ch in value):
            raise ValueError("must be printable ASCII (no CR, LF or other control characters)")
        return value

    @model_validator(mode="after")
    def _json_key_needs_secrets_manager(self) -> SecretRef:
        if self.json_key is not None and not SECRET_ARN.fullmatch(self.value_from):
            raise rule_on(
                "json_key", "applies to Secrets Manager secrets only (an SSM parameter is one value)"
            )
        return self

    @property
    def store(self) -> Literal["secretsmanager", "ssm"]:
        return "secretsmanager" if SECRET_ARN.fullmatch(self.value_from) else "ssm"


def _header_value(value: Any, info: ValidationInfo) -> Any:
    """A literal string, or an object that is a SecretRef; a SecretRef's own errors come back
    on its fields (`headers.<name>.valueFrom`), not as the two branches of a union."""
    if isinstance(value, str | SecretRef):
        return value  # a string is judged by the union (strict types stay strict)
    if not isinstance(value, dict):
        raise PydanticCustomError(
            "header_value", 'must be a string or a secret reference {"valueFrom": "<ARN>"}'
        )
    try:
        return SecretRef.model_validate(value, context=info.context)
    except ValidationError as exc:
        first = exc.errors()[0]
        kind, context = first.get("type"), first.get("ctx") or {}
        loc, rule = tuple(str(part) for part in first.get("loc", ())), str(first.get("msg"))
        if kind == RULE_ON_FIELD:
            loc, rule = (*loc, *context["loc"]), context["rule"]
        elif kind == "value_error" and "error" in context:
            rule = str(context["error"])
        elif kind == "extra_forbidden":
            rule = "is not a known field (valueFrom, jsonKey, prefix)"
        raise rule_on(loc, rule) from None


HeaderValue = Annotated[str | SecretRef, BeforeValidator(_header_value)]

# Header names that carry credentials: their value must be a SecretRef, never a literal
# (stored in the table, copied onto every run, returned by GET). Refused rather than masked:
# a masked literal would still be stored, backed up and copied onto every run, and a client
# that reads the masked value back and PATCHes it would overwrite its own credential.
_CREDENTIAL_NAME = re.compile(
    r"auth|token|secret|passw|pwd|credential|cookie|session|signature|jwt|bearer|apikey|api[-_]key|key$",
    re.IGNORECASE,
)
# Literal values that are credentials whatever the header's name: an authorization scheme at
# the start, or anywhere an AWS access key id, a JWT, a signing secret, a vendor token format.
_AUTH_SCHEME = re.compile(r"\s*(?:bearer|basic|digest|negotiate|aws4-hmac-sha256)\s+\S", re.IGNORECASE)
_TOKEN_FORM = re.compile(
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|eyJ[A-Za-z0-9_-]{8,}\.eyJ"
    r"|whsec_|sk_live_|rk_live_|ghp_|gho_|github_pat_|xox[abprs]-|glpat-"
)
CREDENTIAL_RULE = (
    "looks like a credential ({why}): give it as a secret reference "
    '{{"valueFrom": "<Secrets Manager or SSM SecureString ARN>"}}, never as a literal value'
)
# Set by the scheduler on every delivery (Standard Webhooks signature).
_SIGNATURE_HEADERS = frozenset({"webhook-id", "webhook-timestamp", "webhook-signature"})
# The connection's own framing and hop-by-hop headers (RFC 9110 7.6.1), set by the transport:
# a target's `Transfer-Encoding` would have the receiver misread the body, and a `Connection`
# naming a header would have a proxy strip it (the signature, say). Dropped at send from jobs
# stored before this rule.
FRAMING_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "expect",
    }
)


def is_header_text(value: str) -> bool:
    """Visible Latin-1 text, spaces and tabs: what a header value carries unchanged (HTTP
    sends Latin-1; control characters are refused or rewritten on the way)."""
    return all(ch == "\t" or " " <= ch <= "~" or "\xa0" <= ch <= "\xff" for ch in value)


def credential_reason(name: str, value: str) -> str | None:
    """Why a literal header looks like a credential, or None. Never quotes the value."""
    if _CREDENTIAL_NAME.search(name):
        return "its name says it carries one"
    if _AUTH_SCHEME.match(value) or _TOKEN_FORM.search(value):
        return "its value has the form of a token or key"
    return None


class HttpTarget(Model):
    kind: Literal["http"]
    url: str = Field(max_length=2048)
    method: Literal["POST", "PUT", "PATCH", "GET", "DELETE"] = "POST"
    headers: dict[str, HeaderValue] = Field(default_factory=dict, max_length=32)
    timeout_seconds: Annotated[float, Strict()] = Field(default=10.0, gt=0, le=900, allow_inf_nan=False)

    @field_validator("url")
    @classmethod
    def _absolute_http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an absolute http:// or https:// URL")
        if parts.username or parts.password:
            raise ValueError("must not carry credentials; use headers")
        return value

    @field_validator("headers")
    @classmethod
    def _no_reserved_headers(
        cls, value: dict[str, str | SecretRef], info: ValidationInfo
    ) -> dict[str, str | SecretRef]:
        reserved = {"idempotency-key", "host", "content-length", "content-type", "user-agent"}
        for name, header_value in value.items():
            literal = header_value if isinstance(header_value, str) else header_value.prefix or ""
            if writing(info) and len(name) > MAX_HEADER_NAME_CHARS:
                raise ValueError(f"a header name has at most {MAX_HEADER_NAME_CHARS} characters")
            if writing(info) and len(literal) > MAX_HEADER_VALUE_CHARS:
                raise ValueError(
                    f"header '{name}' has {len(literal)} characters; at most {MAX_HEADER_VALUE_CHARS}"
                )
            lowered = name.lower()
            if lowered in reserved or lowered.startswith("x-jobsched-"):
                raise ValueError(f"header '{name}' is set by the scheduler")
            if writing(info) and lowered in _SIGNATURE_HEADERS:
                raise ValueError(f"header '{name}' is set by the scheduler (the delivery's signature)")
            if writing(info) and lowered in FRAMING_HEADERS:
                raise ValueError(f"header '{name}' is set by the transport (the connection's own framing)")
            if writing(info) and lowered == "traceparent":
                raise ValueError(f"header '{name}' is set by the scheduler (the attempt's trace)")
            if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
                raise ValueError(f"'{name}' is not a valid header name")
            if any(ch in literal for ch in "\r\n\x00"):
                raise ValueError(f"header '{name}' must not contain CR, LF or NUL")
            if writing(info) and not is_header_text(literal):
                raise ValueError(
                    f"header '{name}' must be visible Latin-1 text (no control or other characters)"
                )
        return value

    @model_validator(mode="after")
    def _credentials_by_reference(self, info: ValidationInfo) -> HttpTarget:
        # A rule of writes: jobs stored before it keep their literal (the API masks it).
        if writing(info):
            for name, value in self.headers.items():
                why = credential_reason(name, value) if isinstance(value, str) else None
                if why is not None:
                    raise rule_on(("headers", name), CREDENTIAL_RULE.format(why=why))
        return self

    @property
    def secret_headers(self) -> dict[str, SecretRef]:
        return {name: value for name, value in self.headers.items() if isinstance(value, SecretRef)}


class SqsTarget(RoleTarget):
    kind: Literal["sqs"]
    queue_url: str = Field(min_length=1, max_length=1024)
    message_group_id: str | None = Field(default=None, max_length=128)

    @field_validator("queue_url")
    @classmethod
    def _queue(cls, value: str, info: ValidationInfo) -> str:
        rule = "must be an SQS queue URL: https://sqs.<region>.amazonaws.com/<account>/<queue name>"
        return _shaped(value, SQS_QUEUE_URL, rule, info) or value


class EventBridgeTarget(RoleTarget):
    kind: Literal["eventbridge"]
    event_bus_name: str = Field(default="default", min_length=1, max_length=1600)
    # None: the tenant's own source, jobsched.<tenant digest> (jobsched.domain.grants).
    source: str | None = Field(default=None, min_length=1, max_length=256)
    detail_type: str = Field(default="jobsched.run", min_length=1, max_length=128)

    @field_validator("event_bus_name")
    @classmethod
    def _bus(cls, value: str, info: ValidationInfo) -> str:
        rule = (
            "must be an event bus name (letters, digits, . - _ /; at most 256) "
            "or arn:aws:events:<region>:<account>:event-bus/<name>"
        )
        return _shaped(value, EVENT_BUS, rule, info) or value


class StepFunctionsTarget(RoleTarget):
    kind: Literal["stepfunctions"]
    state_machine_arn: str = Field(min_length=1, max_length=256)

    @field_validator("state_machine_arn")
    @classmethod
    def _machine(cls, value: str, info: ValidationInfo) -> str:
        rule = (
            "must be arn:aws:states:<region>:<account>:stateMachine:<name>, "
            "optionally with :<version or alias>"
        )
        return _shaped(value, STATE_MACHINE_ARN, rule, info) or value


Target = Annotated[
    LambdaTarget | HttpTarget | SqsTarget | EventBridgeTarget | StepFunctionsTarget,
    Field(discriminator="kind"),
]

# SNS topics: a name of up to 256 letters, digits, - and _ (a FIFO topic's ends in .fifo).
SNS_TOPIC_ARN = re.compile(
    rf"{_PARTITION}:sns:{_REGION}:\d{{12}}:[A-Za-z0-9_-]{{1,251}}(?:\.fifo)?", re.ASCII
)


class SnsTarget(RoleTarget):
    """An SNS topic: a notification's target only (runs have no SNS target)."""

    kind: Literal["sns"]
    topic_arn: str = Field(min_length=1, max_length=300)

    @field_validator("topic_arn")
    @classmethod
    def _topic(cls, value: str, info: ValidationInfo) -> str:
        return (
            _shaped(value, SNS_TOPIC_ARN, "must be arn:aws:sns:<region>:<account>:<topic name>", info)
            or value
        )


NotifyTarget = Annotated[
    SnsTarget | SqsTarget | EventBridgeTarget | HttpTarget,
    Field(discriminator="kind"),
]


class NotifyOn(StrEnum):
    """What a notification is sent for (each one once per run)."""

    DEAD = "dead"  # the run dead-lettered
    LATE = "late"  # it had not started `lateSeconds` after it was due
    SKIPPED = "skipped"  # it never ran: missed while paused, overlap, misfire


MAX_NOTIFICATIONS = 5  # per job
MAX_LATE_SECONDS = 7 * 24 * 3600
# The notifications queue's largest message (SQS's MaximumMessageSize, which the stack leaves
# at AWS's default), and SendMessageBatch's largest request: one delivery carries one target.
MAX_DELIVERY_BYTES = 256 * 1024
# Room a delivery message keeps beside its target: its id, tenant and job id and the event
# (CloudEvents JSON, `errorMessage` at most 1,024 characters, tenant 256, `reason` 512 bytes),
# every character escaped as `queue_json` escapes it. The largest run event takes under 40 KiB.
DELIVERY_ENVELOPE_BYTES = 48 * 1024
MAX_NOTIFY_TARGET_BYTES = MAX_DELIVERY_BYTES - DELIVERY_ENVELOPE_BYTES


def queue_json(value: Any) -> str:
    """`value` as compact JSON in ASCII (every other character escaped), as the notifications
    queue carries it: SQS refuses some code points JSON allows verbatim (U+FFFE, U+FFFF, most
    control characters). Its length is its size in bytes."""
    return json.dumps(value, separators=(",", ":"))


class Notification(Model):
    """`{"on": [...], "lateSeconds": N, "target": {...}}` on a job: where its tenant is told
    about its runs. The target is authorised as a run's target is (the same grants and roles);
    an HTTP target is signed with the job's signing secret."""

    on: list[NotifyOn] = Field(min_length=1, max_length=len(NotifyOn))
    late_seconds: int | None = Field(default=None, ge=1, le=MAX_LATE_SECONDS, strict=True)
    target: NotifyTarget

    @field_validator("on")
    @classmethod
    def _each_once(cls, value: list[NotifyOn]) -> list[NotifyOn]:
        if len(set(value)) != len(value):
            raise ValueError("names each kind at most once")
        return value

    @model_validator(mode="after")
    def _webhooks_carry_the_event(self) -> Notification:
        if isinstance(self.target, HttpTarget) and self.target.method in ("GET", "DELETE"):
            raise rule_on(
                ("target", "method"), "a notification webhook is sent with a body: POST, PUT or PATCH"
            )
        return self

    @model_validator(mode="after")
    def _target_fits_a_delivery(self, info: ValidationInfo) -> Notification:
        if writing(info):
            size = len(queue_json(self.target.model_dump(mode="json", by_alias=True)))
            if size > MAX_NOTIFY_TARGET_BYTES:
                raise rule_on(
                    "target",
                    f"takes {size} bytes in a delivery message (JSON, each non-ASCII character "
                    f"escaped as \\uXXXX); at most {MAX_NOTIFY_TARGET_BYTES}",
                )
        return self

    @model_validator(mode="after")
    def _late_needs_seconds(self) -> Notification:
        if NotifyOn.LATE in self.on and self.late_seconds is None:
            raise rule_on("late_seconds", "is required when `on` names late")
        if NotifyOn.LATE not in self.on and self.late_seconds is not None:
            raise rule_on("late_seconds", "applies only when `on` names late")
        return self


def late_seconds(notify: list[Notification]) -> int | None:
    """The shortest `lateSeconds` of a job's late notifications (None: none asks for late)."""
    found = [n.late_seconds for n in notify if n.late_seconds is not None and NotifyOn.LATE in n.on]
    return min(found) if found else None


def target_address(target: Target) -> str:
    """Where a target points, for a history entry or a label: the HTTP method and URL without
    its query (which may carry tokens), or the AWS resource's ARN, URL or name."""
    if isinstance(target, HttpTarget):
        parts = urlsplit(target.url)
        return f"{target.method} {parts.scheme}://{parts.netloc}{parts.path}"
    if isinstance(target, LambdaTarget):
        return f"{target.function_arn}:{target.qualifier}" if target.qualifier else target.function_arn
    if isinstance(target, SqsTarget):
        return target.queue_url
    if isinstance(target, EventBridgeTarget):
        return target.event_bus_name
    return target.state_machine_arn


def payload_size(payload: Any) -> int:
    return len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())


def payload_within_limit(payload: Any) -> Any:
    """`payload`, if it serialises to at most MAX_PAYLOAD_BYTES; else ValueError (the rule)."""
    size = payload_size(payload)
    if size > MAX_PAYLOAD_BYTES:
        raise ValueError(f"must serialise to at most {MAX_PAYLOAD_BYTES} bytes of JSON; got {size}")
    return payload


class Definition(Model):
    """What a run calls and with what: its job's `target` and `payload` as of one version."""

    target: Target | None = None
    payload: Any = None


class JobSpec(Model):
    """Everything the client authors about a job."""

    name: str = Field(min_length=1, max_length=256)
    type: str = Field(pattern=JOB_TYPE_PATTERN)
    target: Target | None = None
    payload: Any = None
    schedule: Schedule
    priority: Priority = Priority.DEFAULT
    policies: Policies = Policies()
    notify: list[Notification] = Field(default_factory=list, max_length=MAX_NOTIFICATIONS)

    @field_validator("payload")
    @classmethod
    def _payload_fits(cls, value: Any) -> Any:
        return payload_within_limit(value)

    @property
    def definition(self) -> Definition:
        """The spec's target and payload: what its runs call and with what."""
        return Definition(target=self.target, payload=self.payload)

    @model_validator(mode="after")
    def _fits_the_budget(self, info: ValidationInfo) -> JobSpec:
        if writing(info):
            size = len(self.model_dump_json(exclude_none=True).encode())
            if size > MAX_SPEC_BYTES:
                raise rule_on(
                    (), f"the job takes {size} bytes as stored (compact JSON); at most {MAX_SPEC_BYTES}"
                )
        return self


class RunFix(Model):
    """What a redrive replaces on a dead run before it runs again: its target (None: kept)
    and, when `replaces_payload`, its payload (None then sets null). Checked as a job's
    target and payload are (validate with context=WRITE); the run's history names it."""

    target: Target | None = None
    payload: Any = None
    replaces_payload: bool = False

    @field_validator("payload")
    @classmethod
    def _payload_fits(cls, value: Any) -> Any:
        return payload_within_limit(value)

    def fields(self) -> dict[str, Any]:
        """The run fields the redrive writes."""
        fields: dict[str, Any] = {} if self.target is None else {"target": self.target}
        if self.replaces_payload:
            fields["payload"] = self.payload
        return fields

    def describe(self) -> str:
        """What the history entry records: where the new target points, the new payload's size."""
        parts = []
        if self.target is not None:
            parts.append(f"target replaced: {self.target.kind} {target_address(self.target)}")
        if self.replaces_payload:
            parts.append(f"payload replaced: {payload_size(self.payload)} bytes")
        return "; ".join(parts)


class MissedWindow(Model):
    """What a resume decided for the occurrences that fell while its job was paused, kept on
    the job so that every decider (the resume itself, and the reconciler settling a run held
    after it) decides each of them the same way, in whatever order they get to it."""

    paused_at: Instant
    resumed_at: Instant  # occurrences t with paused_at <= t < resumed_at were missed
    policy: Misfire
    run_from: Instant  # resumed_at - catchUpWindow: older ones expired
    chosen: Instant | None = None  # run-once: the one occurrence that runs

    def runs(self, scheduled_for: datetime) -> bool | None:
        """Whether the occurrence runs; None when it did not fall in this pause."""
        if not self.paused_at <= scheduled_for < self.resumed_at:
            return None
        if self.policy is Misfire.SKIP or scheduled_for < self.run_from:
            return False
        if self.policy is Misfire.RUN_ONCE:
            return scheduled_for == self.chosen
        return True


MAX_MISSED_WINDOWS = 4  # the latest pauses' decisions kept on a job


class Job(Model):
    """A stored job: the spec plus identity, lifecycle state, version and scheduling cursor."""

    job_id: str
    tenant: str
    spec: JobSpec
    state: JobState = JobState.ACTIVE
    version: int = 1  # the definition version clients see (ETag / If-Match)
    # The version at which the spec's `target` and `payload` last changed: the runs made
    # from the job reference that definition instead of copying it (domain.runs.make_run).
    # None for a job not written since jobs had it: its runs copy their definition.
    definition_since: int | None = None
    rev: int = 0  # internal write counter: every writer (API, sweeper) conditions on it
    next_run_at: Instant | None = None
    created_at: Instant
    updated_at: Instant
    runs_created: int = 0
    last_scheduled_for: Instant | None = None  # last occurrence processed (run or skipped)
    last_run_at: Instant | None = None  # last occurrence that became a run (overlap chain)
    paused_at: Instant | None = None  # while PAUSED: occurrences from here on are missed
    # After a resume: every occurrence before this instant fell while paused and is missed,
    # however late (the 60 s lateness rule is for downtime only); cleared once swept past.
    missed_until: Instant | None = None
    missed_windows: list[MissedWindow] = []  # the latest resumes' decisions, oldest first
    # When the sweeper last folded the job's runs into its counters (domain.run_counts); a
    # new job's creation. None: a job written before folds (its first fold marks the present).
    counts_folded_at: Instant | None = None
    # The X-Ray trace id of the invocation that last wrote the job (stamped by the store;
    # None outside a traced invocation): a job event's `traceId`.
    trace_id: str | None = None
    # Once the job has ended (CANCELLED or COMPLETED): when the table's TTL deletes its item,
    # after the runs it made are deleted (services.definitions.ended_job_expiry). None while live.
    expires_at: Instant | None = None
    # When the tenant archived the ended job (services.jobs.JobService.archive): left out of
    # listings by default; None when not archived.
    archived_at: Instant | None = None

    def missed_verdict(self, scheduled_for: datetime) -> bool | None:
        """Whether a scheduled occurrence runs as the job's recorded pauses decide it: the one
        rule of every decider (the resume, the worker's check, the reconciler settling a hold
        or an expired lease). One that fell in a recorded pause (paused_at <= t < resumed_at,
        whole seconds) as that pause's resume decided. One that fell while the job was active
        is no missed occurrence and runs (True): at or after the latest resume instant, its
        own second included; between two recorded pauses; before the earliest one when none
        was dropped (fewer than MAX_MISSED_WINDOWS kept). None when no record can say: it fell
        in the pause that still stands (its resume decides), the job holds no record, or it
        came before the earliest of a full list (it may have fallen in a dropped pause)."""
        if self.paused_at is not None and scheduled_for >= self.paused_at:
            return None
        for window in reversed(self.missed_windows):
            verdict = window.runs(scheduled_for)
            if verdict is not None:
                return verdict
        windows = self.missed_windows
        if windows and (scheduled_for >= windows[0].paused_at or len(windows) < MAX_MISSED_WINDOWS):
            return True
        return None

    @property
    def is_due_indexed(self) -> bool:
        """Only ACTIVE jobs with a next occurrence sit in the sparse `due` index."""
        return self.state is JobState.ACTIVE and self.next_run_at is not None

    def paused(self, now: datetime) -> Job:
        """This ACTIVE job paused at `now`, by whoever pauses it (the API, or a run's death
        under `pauseOnFailure`): a new version; occurrences from `now` on are missed until a
        resume, and the window of an earlier resume (`missed_until`) is closed. Raises
        ValueError for a job that is not ACTIVE."""
        if self.state is not JobState.ACTIVE:
            raise ValueError(f"job {self.job_id} is {self.state.value}; only an ACTIVE job can be paused")
        return self.model_copy(
            update={
                "state": JobState.PAUSED,
                "version": self.version + 1,
                "updated_at": now,
                "paused_at": now,
                "missed_until": None,
            }
        )


MANUAL_SEPARATOR = "~"


def run_key(job_id: str, scheduled_for: datetime, suffix: str | None = None) -> str:
    """The unique key of a run: `<job_id>@<scheduled_for RFC 3339 UTC>`, and for a manual run
    `~<suffix>` after it (manual runs have a key space of their own)."""
    from .instants import format_instant

    key = f"{job_id}@{format_instant(scheduled_for)}"
    return f"{key}{MANUAL_SEPARATOR}{suffix}" if suffix else key
