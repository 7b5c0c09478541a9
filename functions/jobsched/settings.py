"""Runtime settings: one pydantic model, read from the environment once at cold start.

Each field's alias is the environment variable that carries it, and its default is the value
the stack deploys (jobsched.cdk.config takes its defaults from here), so the two cannot drift. The
stack's Lambda environment is generated from the model (`lambda_environment`), never listed
by hand. Only handlers and wiring read this; the domain and services receive plain values.

A bad value fails with the variable's name and the rule it breaks (`InvalidSettings`). Outside
Lambda (tests, local mode) a missing variable falls back to its default. In Lambda a missing
variable is a broken deployment, never a reason to talk to a table named `jobsched-runs` in
someone else's stack: importing this module there fails at once and names every variable
that is missing (`MissingSettings`)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import lru_cache
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from .domain.events import RunEventsLevel
from .domain.grants import GrantsDocument, OwnNames
from .store.schema import DEFINITIONS, EVENT_BUS_NAME, QUEUES, RUNS

IN_LAMBDA = "AWS_LAMBDA_FUNCTION_NAME"  # set by the Lambda runtime in every function
ENDPOINT_URL = "JOBSCHED_AWS_ENDPOINT_URL"  # local mode only: the moto server
# Powertools' own variables: the CloudWatch namespace of the functions' metrics, and the
# service their logs, traces and metrics (its `service` dimension) name. The stack sets both
# to its own (jobsched.cdk.config.Config.metric_names); "jobsched" outside it.
METRICS_NAMESPACE_ENV = "POWERTOOLS_METRICS_NAMESPACE"
SERVICE_NAME_ENV = "POWERTOOLS_SERVICE_NAME"
DEFAULT_SERVICE_NAME = "jobsched"
# CloudWatch's rules for a namespace: 1..255 of these characters, not starting with a colon,
# not all blank, and not starting with "AWS/" (AWS's own; the validator checks the last two).
METRICS_NAMESPACE_PATTERN = r"^[A-Za-z0-9._/#\- ][A-Za-z0-9._/#:\- ]{0,254}$"
SERVICE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/#:\-]{0,254}$"


def _csv(value: Any) -> Any:
    """`a,b` in the environment; a list or tuple from Python."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


Names = Annotated[tuple[str, ...], BeforeValidator(_csv)]


class SettingsError(RuntimeError):
    """The environment cannot configure this function."""


class MissingSettings(SettingsError):
    """Running in Lambda without variables the stack always sets."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        super().__init__(
            "jobsched: environment variable(s) not set in this Lambda function: "
            + ", ".join(names)
            + " (the stack sets them; redeploy it rather than relying on local defaults)"
        )


class InvalidSettings(SettingsError):
    """A variable is set to a value its rule refuses; the message names both."""

    def __init__(self, error: ValidationError) -> None:
        self.problems = [problem(e) for e in error.errors()]
        super().__init__("jobsched: invalid environment: " + "; ".join(self.problems))


def env_name(loc: tuple[Any, ...]) -> str:
    """The variable (or, for a value given by field name, the variable of that field) at `loc`."""
    if not loc:
        return "environment"
    name = str(loc[0])
    field = Settings.model_fields.get(name)
    return field.alias if field is not None and field.alias else name


def problem(error: Any) -> str:
    value = error.get("input")
    shown = f" (got {value!r})" if isinstance(value, str | int | float) else ""
    return f"{env_name(tuple(error['loc']))}: {error['msg']}{shown}"


class Settings(BaseModel):
    """What every function reads from its environment. The defaults are the deployed values."""

    model_config = ConfigDict(frozen=True, validate_by_alias=True, validate_by_name=True, extra="ignore")

    definitions_table: str = Field(DEFINITIONS.default_name, alias=DEFINITIONS.env_var, min_length=3)
    runs_table: str = Field(RUNS.default_name, alias=RUNS.env_var, min_length=3)
    # Due/open index shards. 32: the sweepers then make ~147,000 runs/min (bench/report.md,
    # capacity); more shards cost only empty ticks. Only ever increase it: items keep the shard
    # they were written with.
    shard_count: int = Field(32, alias="SHARD_COUNT", ge=1, le=256)
    # How far ahead runs are materialised. The sweeper ticks every 60 s; a shorter horizon
    # would make runs late.
    horizon_seconds: int = Field(120, alias="HORIZON_SECONDS", ge=1, le=3600)
    # A job due within the horizon gets its runs this far ahead in one sweep (horizon..3600).
    sweep_ahead_seconds: int = Field(300, alias="SWEEP_AHEAD_SECONDS", le=3600, validate_default=True)
    # Finished runs expire (TTL) this long after they end; the target and payload a job update
    # replaced, this long and 15 days more after the update (services.definitions).
    retention_days: int = Field(30, alias="RETENTION_DAYS", ge=1, le=3650)
    max_jobs_per_tenant: int = Field(
        10_000, alias="MAX_JOBS_PER_TENANT", ge=0
    )  # ACTIVE or PAUSED; 0: no quota
    tenant_requests_per_second: int = Field(50, alias="TENANT_REQUESTS_PER_SECOND", ge=0)  # API; 0: no limit
    fair_queues: bool = Field(True, alias="FAIR_QUEUES")  # MessageGroupId = tenant on the standard queues
    # Leased runs per tenant; 0: no limit. At most 1,000: a claim reads the tenant's slots
    # (~190 bytes each; 47 read units at 1,000), and a lowered limit's claims judge the
    # holders past it.
    tenant_concurrency: int = Field(50, alias="TENANT_CONCURRENCY", ge=0, le=1000)
    lease_seconds: int = Field(60, alias="LEASE_SECONDS", ge=10, le=900)  # renewed by the heartbeat
    http_allow_destinations: Names = Field((), alias="HTTP_ALLOW_DESTINATIONS")  # CIDRs or host names
    handler_modules: Names = Field((), alias="HANDLER_MODULES")  # modules that register Python job handlers
    # What the operator granted each tenant (jobsched.domain.grants): the AWS targets its jobs
    # may call and the secrets their HTTP headers may reference. In the stack an SSM
    # parameter's name (Lambda's environment holds 4 KB in all), in local mode and tests the
    # document itself as JSON. Neither: nothing is granted.
    target_grants_parameter: str | None = Field(None, alias="TARGET_GRANTS_PARAMETER", min_length=1)
    target_grants: GrantsDocument = Field(default_factory=GrantsDocument, alias="TARGET_GRANTS")
    # How long the worker reuses a secret's value before reading it again (Powertools Parameters).
    secret_cache_seconds: int = Field(300, alias="SECRET_CACHE_SECONDS", ge=0, le=3600)
    # Run and job events (domain.events): which are published, to which bus, and the stack
    # name their `source` carries. Read by the events consumer only.
    run_events: RunEventsLevel = Field(RunEventsLevel.FAILURES, alias="RUN_EVENTS")
    event_bus_name: str = Field(EVENT_BUS_NAME, alias="EVENT_BUS_NAME", min_length=1, max_length=256)
    event_source_name: str = Field(
        "jobsched", alias="EVENT_SOURCE_NAME", pattern=r"^[A-Za-z][A-Za-z0-9-]{0,127}$"
    )
    # Where the events consumer queues notification deliveries, and the notifier takes them
    # from (services.notifications). None: deliveries are counted (NotificationsDropped) and dropped.
    notifications_queue_url: str | None = Field(None, alias="NOTIFICATIONS_QUEUE_URL", min_length=1)
    # Where the events consumer keeps a stream record it could not deliver for minutes (its
    # events and deliveries, to replay; services.record_delivery), beside the batches the
    # events mappings give up on. None: such a record is retried until the mapping gives up.
    events_failures_queue_url: str | None = Field(None, alias="EVENTS_FAILURES_QUEUE_URL", min_length=1)
    # Where a rule's reconciler pass sends its shard's second tick of the minute
    # (store.second_ticks). None: no second tick (local mode ticks every 30 s itself).
    second_tick_queue_url: str | None = Field(None, alias="SECOND_TICK_QUEUE_URL", min_length=1)
    # The scheduler's queues that no other setting names, as no function sends to or takes
    # from them: the dead letters and failure destinations of its other paths (the
    # notifications DLQ, the outbox's and events consumer's failed stream batches, the ticks
    # EventBridge could not deliver) and local mode's events tail. Read by own_names only.
    own_queue_urls: Names = Field((), alias="OWN_QUEUE_URLS")
    # Where the functions' metrics go and the service they report as (Powertools reads these
    # variables itself; jobsched.observability resolves them per invocation). Each stack has its
    # own, so two schedulers in one account and region never count in each other's alarms.
    metrics_namespace: str = Field(
        DEFAULT_SERVICE_NAME, alias=METRICS_NAMESPACE_ENV, pattern=METRICS_NAMESPACE_PATTERN
    )
    service_name: str = Field(DEFAULT_SERVICE_NAME, alias=SERVICE_NAME_ENV, pattern=SERVICE_NAME_PATTERN)
    # Set by Lambda itself (SET_BY_LAMBDA: a reserved name no stack may set): the API links
    # each transition's X-Ray trace to this region's console.
    aws_region: str | None = Field(None, alias="AWS_REGION")
    # Queue key -> URL, from <KEY>_QUEUE_URL and <KEY>_DLQ_URL (store.schema.QUEUES).
    queue_urls: dict[str, str] = Field(default_factory=dict)
    dlq_urls: dict[str, str] = Field(default_factory=dict)
    endpoint_url: str | None = Field(None, alias=ENDPOINT_URL)
    # botocore's client-side check of each DynamoDB and SQS request before it is sent. Our
    # stores build every one of them and the service checks each again; the check is about a
    # tenth of the worker's CPU. Off where it runs; the test suite turns it on (moto checks
    # less than DynamoDB does). Requests to a run's target are always checked.
    validate_store_requests: bool = Field(False, alias="VALIDATE_STORE_REQUESTS")

    @model_validator(mode="before")
    @classmethod
    def _read_environment(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        # An empty variable is an unset one (the template cannot leave one out conditionally).
        values = {k: v for k, v in data.items() if not (isinstance(v, str) and v == "")}
        if "queue_urls" not in values:
            values["queue_urls"] = {q.key: values[q.env_var] for q in QUEUES if q.env_var in values}
        if "dlq_urls" not in values:
            values["dlq_urls"] = {q.key: values[q.dlq_env_var] for q in QUEUES if q.dlq_env_var in values}
        return values

    @field_validator("target_grants", mode="before")
    @classmethod
    def _grants_json(cls, value: Any) -> Any:
        return GrantsDocument.model_validate_json(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_source_of_grants(self) -> Settings:
        if self.target_grants_parameter and self.target_grants != GrantsDocument():
            raise PydanticCustomError(
                "two_grant_sources",
                "set TARGET_GRANTS_PARAMETER or TARGET_GRANTS, not both",
            )
        return self

    @field_validator("metrics_namespace")
    @classmethod
    def _a_namespace_of_our_own(cls, value: str) -> str:
        if not value.strip() or value.upper().startswith("AWS/"):
            raise PydanticCustomError(
                "reserved_namespace", "must name a namespace of its own: not blank, not under AWS/"
            )
        return value

    @field_validator("sweep_ahead_seconds")
    @classmethod
    def _not_shorter_than_the_horizon(cls, value: int, info: Any) -> int:
        horizon = info.data.get("horizon_seconds")
        if horizon is not None and value < horizon:
            raise PydanticCustomError(
                "sweep_ahead_below_horizon",
                "must be at least HORIZON_SECONDS ({horizon})",
                {"horizon": horizon},
            )
        return value

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        if env.get(IN_LAMBDA):
            missing = [name for name in required_in_lambda() if not env.get(name)]
            if missing:
                raise MissingSettings(missing)
        try:
            return cls.model_validate(env)
        except ValidationError as exc:
            raise InvalidSettings(exc) from None

    def own_names(self) -> OwnNames:
        """The scheduler's own resources, which no grant reaches (domain.grants.OwnNames): the
        stack's names beside its grants parameter, and the bus and every queue these settings
        name (the run queues, their DLQs, the notifications and second-tick queues and
        `own_queue_urls`), so a scheduler's queues are protected whatever they are called
        (local mode's, or those of a scheduler inside another stack, which are not
        `<name>-…`)."""
        queues = (
            *self.queue_urls.values(),
            *self.dlq_urls.values(),
            *(
                url
                for url in (
                    self.notifications_queue_url,
                    self.second_tick_queue_url,
                    self.events_failures_queue_url,
                )
                if url
            ),
            *self.own_queue_urls,
        )
        return OwnNames.beside(self.target_grants_parameter, buses=(self.event_bus_name,), queues=queues)

    def lambda_environment(self) -> dict[str, str]:
        """Every variable `from_env` reads that the stack sets, as strings: what the stack
        sets on each function (and local mode in its own process). `from_env` of the result
        equals this model but for SET_BY_LAMBDA's, which Lambda sets itself."""
        env: dict[str, str] = {}
        for name, field in type(self).model_fields.items():
            value = getattr(self, name)
            if field.alias in SET_BY_LAMBDA:
                continue  # Lambda refuses a function whose environment names a reserved key
            if name == "queue_urls":
                env.update({q.env_var: value[q.key] for q in QUEUES if q.key in value})
            elif name == "dlq_urls":
                env.update({q.dlq_env_var: value[q.key] for q in QUEUES if q.key in value})
            elif value is None:
                continue  # endpoint_url outside local mode
            elif isinstance(value, GrantsDocument):
                if value != GrantsDocument():
                    env[str(field.alias)] = value.model_dump_json(by_alias=True, exclude_defaults=True)
            elif isinstance(value, bool):
                env[str(field.alias)] = "true" if value else "false"
            elif isinstance(value, tuple):
                env[str(field.alias)] = ",".join(value)
            elif isinstance(value, dict):
                env[str(field.alias)] = json.dumps(value, separators=(",", ":"), sort_keys=True)
            else:
                env[str(field.alias)] = str(value)
        return env


# Read from the environment Lambda gives every function; reserved, so never set by the stack.
SET_BY_LAMBDA = frozenset({"AWS_REGION"})


def environment_names() -> tuple[str, ...]:
    """Every variable the model reads that the stack sets (not SET_BY_LAMBDA's)."""
    names = [
        str(f.alias) for n, f in Settings.model_fields.items() if f.alias and f.alias not in SET_BY_LAMBDA
    ]
    return (*names, *(q.env_var for q in QUEUES), *(q.dlq_env_var for q in QUEUES))


# May legitimately be empty: the allow-list, the handler modules; local mode's endpoint; the
# grants (the stack sets the parameter, local mode the document).
OPTIONAL = frozenset(
    {"HTTP_ALLOW_DESTINATIONS", "HANDLER_MODULES", ENDPOINT_URL, "TARGET_GRANTS_PARAMETER", "TARGET_GRANTS"}
)


def required_in_lambda() -> tuple[str, ...]:
    """What the stack sets on every function and the code cannot do without."""
    return tuple(name for name in environment_names() if name not in OPTIONAL)


REQUIRED_IN_LAMBDA = required_in_lambda()


@lru_cache(maxsize=1)
def settings() -> Settings:
    return Settings.from_env()


if os.environ.get(IN_LAMBDA):
    settings()  # at import, so a misconfigured function fails its cold start, not a request
