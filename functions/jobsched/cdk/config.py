"""Deploy-time settings: read from CDK context by the app (cdk.json, or `-c key=value` on the
CLI), or given to the JobScheduler construct as props (JobSchedulerProps, the same fields in
Python's spelling, checked the same way).

The settings the functions read at run time (shardCount, horizonSeconds, ...) are owned by
the runtime model, jobsched.settings.Settings: their defaults and their rules come from it,
and the functions' environment is generated from it (`runtime_settings`)."""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from constructs import Node
from pydantic import ValidationError

from jobsched.domain.grants import SECRET_SERVICES, GrantsDocument, service_of
from jobsched.domain.grants import TARGET_SERVICES as GRANTED_TARGET_SERVICES
from jobsched.edge import MAX_BODY_BYTES
from jobsched.settings import Settings, env_name
from jobsched.store.schema import QUEUES

from .names import API, FUNCTIONS, QUEUE_KEYS, RECONCILER, SWEEPER, WORKER, code_asset_packages

# Lambda keeps this much of the account's concurrency unreserved; a deploy that would leave
# less fails.
UNRESERVED_MINIMUM = 100

# SQS event source provisioned mode: each event poller drives up to 10 concurrent invocations;
# minimum pollers 2..200, maximum up to 2000 (CloudFormation's ProvisionedPollerConfig range).
# https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html
INVOCATIONS_PER_POLLER = 10
POLLERS_MIN_RANGE = (2, 200)
POLLERS_MAX_LIMIT = 2000

# Targets are granted per tenant (tenantTargets, jobsched.domain.grants): the worker's role
# may reach the union of every tenant's patterns, and the code lets each tenant reach only its
# own. `targetArns`, which let every tenant reach one shared set, is gone. The same grants name
# the secrets (secretsmanager, ssm) HTTP headers may reference, and the worker's role reads
# exactly those.
TARGET_SERVICES = GRANTED_TARGET_SERVICES
# Stands in for the deployment's home while the patterns are checked at synth (placeholders
# are resolved by the functions, from the home the deploy writes into the grants parameter).
CHECK_HOME = {"partition": "aws", "region": "us-east-1", "account": "000000000000"}
# SSM parameter tiers: standard holds 4 KB, advanced 8 KB.
STANDARD_PARAMETER_BYTES = 4096
ADVANCED_PARAMETER_BYTES = 8192
# What the deploy adds to the document beyond the operator's maps: the home and the example
# machine's grant, at their longest (partition, region, account, role and machine names), and
# the ARNs of the scheduler's own functions (at most 125 bytes each, quoted) and alarm topic
# (at most 305) in `ownResources`.
GRANTS_OVERHEAD_BYTES = 600 + 150 * len(FUNCTIONS) + 340


def target_service(arn: str) -> str | None:
    """lambda | sqs | events | states | secretsmanager | ssm for a granted ARN pattern
    (placeholders allowed), else None."""
    return service_of(arn)


MIN_TENANTS_AT_LIMIT = 3  # so two tenants at their request limit leave room for the rest
MAX_API_BODY_BYTES = MAX_BODY_BYTES  # x 6 (JSON escapes) + headers and context < Lambda's 6,291,456


class ConfigError(ValueError):
    pass


# An alarm address as SNS's e-mail subscription takes one: a name, one @, a domain, no spaces.
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+")


def _runtime_default(name: str) -> Any:
    return Settings.model_fields[name].get_default(call_default_factory=True)


@dataclass(frozen=True)
class Config:
    # The functions' settings: defaults from the runtime model (see RUNTIME_FIELDS).
    shard_count: int = _runtime_default("shard_count")
    # Shards one sweeper invocation handles (one rule target per group). One each: a sweep
    # has 50 s, and at ~10 ms per run made, sweeping several shards in one caps throughput.
    shards_per_sweep: int = 1
    retention_days: int = _runtime_default("retention_days")
    horizon_seconds: int = _runtime_default("horizon_seconds")
    sweep_ahead_seconds: int = _runtime_default("sweep_ahead_seconds")
    tenant_concurrency: int = _runtime_default("tenant_concurrency")
    max_jobs_per_tenant: int = _runtime_default("max_jobs_per_tenant")
    tenant_requests_per_second: int = _runtime_default("tenant_requests_per_second")
    lease_seconds: int = _runtime_default("lease_seconds")
    fair_queues: bool = _runtime_default("fair_queues")
    # Who the alarms e-mail; None (or "", or only spaces: the same) subscribes no one.
    alarm_email: str | None = None
    # Synth warns about a stack whose alarms reach no one (no alarmEmail) unless this says the
    # operator subscribes to the topic (the AlarmTopicArn output) some other way.
    alarms_without_subscriber: bool = False
    # Tenant id -> ARN patterns it may target without a role of its own, or whose secrets its
    # HTTP headers may reference (nothing by default; the worker's policy reaches the union);
    # tenant id -> EventBridge sources beyond its own jobsched.<digest>; the roles the worker
    # may assume for tenants that name one (nothing by default).
    tenant_targets: dict[str, tuple[str, ...]] = field(default_factory=dict)
    tenant_event_sources: dict[str, tuple[str, ...]] = field(default_factory=dict)
    assumable_roles: tuple[str, ...] = ()
    http_allow_destinations: tuple[str, ...] = _runtime_default("http_allow_destinations")
    handler_modules: tuple[str, ...] = _runtime_default("handler_modules")  # modules in the asset
    # The app's directory holding the top-level packages of handler_modules (relative to where
    # the app is synthesized); None: they are in functions/ beside jobsched.
    handler_code: str | None = None
    secret_cache_seconds: int = _runtime_default("secret_cache_seconds")
    # Which run and job events go to the stack's bus (none | failures | all; domain.events),
    # and how long its archive keeps them (days; 0 = indefinitely).
    run_events: str = _runtime_default("run_events").value
    event_archive_days: int = 365
    # The CloudWatch namespace the functions' metrics go to, and the Powertools service their
    # logs and metrics name ("": the scheduler's own, `jobsched/<name>` and `<name>`, see
    # metric_names): two schedulers in one account and region never read each other's figures.
    metrics_namespace: str = ""
    service_name: str = ""
    # Pollers per priority queue: each queue has its own ceiling, so a flood of high never
    # takes the concurrency low needs.
    # Ceilings, not reservations: 175 workers run ~190,000 runs/min (bench/report.md, capacity).
    worker_concurrency: dict[str, int] = field(
        default_factory=lambda: {q.key: q.max_concurrency for q in QUEUES}  # local mode's too
    )
    worker_batch_size: dict[str, int] = field(default_factory=lambda: {"high": 5, "default": 10, "low": 10})
    worker_batch_window_seconds: dict[str, int] = field(
        default_factory=lambda: {"high": 0, "default": 1, "low": 5}
    )
    # SQS event source provisioned mode per queue (0 = the default, on-demand polling, free).
    # Pollers stay ready and scale ~3x faster (1,000 concurrency a minute instead of 300), for
    # a top-of-hour burst; each poller is billed while provisioned. Provisioned mode excludes
    # MaximumConcurrency: the queue's ceiling becomes 10 invocations per maximum poller.
    worker_min_pollers: dict[str, int] = field(default_factory=lambda: {"high": 0, "default": 0, "low": 0})
    worker_max_pollers: dict[str, int] = field(default_factory=lambda: {"high": 0, "default": 0, "low": 0})
    # Concurrency reserved for the worker out of the account's (0 = none): an API or sweep
    # burst then cannot take what a top-of-hour drain needs. Also the worker's cap.
    worker_reserved_concurrency: int = 0
    # Concurrency reserved for the API function (0 = none), which is also its cap: requests
    # waiting on a slow dependency then cannot take the concurrency the worker and the
    # outbox need. Reserved out of the account's quota like any reservation, so off by default
    # (a new account reserves nothing); API Gateway answers a request Lambda throttles with
    # a 5xx, so size it from the stage's rate and the API's latency.
    api_reserved_concurrency: int = 0
    # The grants parameter's SSM tier: "auto" (standard while the grants fit its 4 KB, advanced
    # past them) or "advanced". SSM never turns an advanced parameter back into a standard one,
    # so grants that outgrew 4 KB and shrank back need "advanced" (the migration gate says so).
    grants_parameter_tier: str = "auto"
    # Stage throttling, shared by every tenant; each tenant is held to tenantRequestsPerSecond
    # by the function, after the stage admitted the request. The stage must hold at least
    # api_tenants_at_limit tenants at their limit at once (checked below): 500 >= 10 x 50.
    api_rate_limit: int = 500
    api_burst_limit: int = 1000
    api_tenants_at_limit: int = 10
    # The largest request body the stage passes on (Content-Length, refused with a 413 by the
    # API's web ACL; 0 = no web ACL). Lambda refuses an event past 6 MB with a 500, below API
    # Gateway's own 10 MB: the body is JSON-escaped in the event (up to 6 bytes a byte), so
    # 1,000,000 bytes is the most that fits whatever it holds.
    api_max_body_bytes: int = MAX_BODY_BYTES  # local mode's front refuses the same (jobsched.edge)
    queue_age_alarm_seconds: dict[str, int] = field(
        default_factory=lambda: {"high": 1200, "default": 1800, "low": 3600}
    )
    repair_alarm_threshold: int = 5
    iterator_age_alarm_seconds: int = 120
    log_retention_days: int = 30
    retain_data: bool = True
    # The account's Lambda concurrency quota in the region, as `jobsched doctor` reads it
    # (GetAccountSettings). 0, the default, reserves nothing: a new account's quota is 10 and
    # Lambda keeps 100 unreserved, so it refuses any reservation. Given the quota (the
    # preflight refuses a value above the real one, and says what it would reserve), the
    # sweeper and the reconciler reserve what their ticks need at once out of it, synth
    # refuses a stack whose reservations and worker ceilings do not fit it, and an alarm
    # watches the account's concurrency against it.
    account_concurrency: int = 0
    # API Gateway writes execution and access logs through ONE role per account and region
    # (AWS::ApiGateway::Account), which a new region does not have: without it the stage's
    # logging fails the deploy. On (the default), the stack creates a role for it and sets
    # it, replacing the account's current one for every API of the region (with the same
    # AWS-managed policy; kept on destroy, so the setting never points at a deleted role).
    # Off keeps the account's own role, which must then exist (the preflight checks).
    api_gateway_account_role: bool = True
    # on-demand: pay per request, absorbs a top-of-hour burst at once. provisioned: capacity
    # auto-scaled to a target utilisation, ~2.5x cheaper per write at a steady load, but a
    # burst beyond it is throttled (and retried) until scaling catches up, minutes later.
    billing_mode: str = "on-demand"
    provisioned_capacity: dict[str, int] = field(
        default_factory=lambda: {
            "minRead": 5,
            "maxRead": 4000,
            "minWrite": 5,
            "maxWrite": 4000,
            "targetUtilization": 70,
        }
    )

    # DynamoDB warm throughput (units per second a table, and each of its indexes, can take
    # at once; 0 = AWS's default, 12,000 reads and 4,000 writes for a new on-demand table).
    # Raising it is billed once per raise, not per hour.
    warm_throughput: dict[str, int] = field(
        default_factory=lambda: {"read": 0, "write": 0, "indexRead": 0, "indexWrite": 0}
    )
    # On-demand tables and indexes: the most request units per second each may use, a cost
    # ceiling (0 = no ceiling). Requests past it are throttled. On-demand billing only.
    on_demand_throughput: dict[str, int] = field(default_factory=lambda: {"maxRead": 0, "maxWrite": 0})

    def __post_init__(self) -> None:
        if isinstance(self.alarm_email, str) and not self.alarm_email.strip():
            # An empty address is a missing one: warned about (missing_subscriber), not refused.
            object.__setattr__(self, "alarm_email", None)
        self.runtime_settings()  # the runtime model's rules, reported by context key
        _check(1 <= self.shards_per_sweep <= self.shard_count, "shardsPerSweep must be 1..shardCount")
        for queue in QUEUE_KEYS:
            for name, table, low, high in (
                ("workerConcurrency", self.worker_concurrency, 2, 1000),  # Lambda's MaximumConcurrency range
                ("workerBatchSize", self.worker_batch_size, 1, 10),
                ("workerBatchWindowSeconds", self.worker_batch_window_seconds, 0, 300),
            ):
                _check(queue in table, f"{name} needs a value for '{queue}'")
                _check(low <= table[queue] <= high, f"{name}.{queue} must be {low}..{high}")
            least, most = self.worker_min_pollers.get(queue, 0), self.worker_max_pollers.get(queue, 0)
            if least or most:
                low, high = POLLERS_MIN_RANGE
                _check(
                    low <= least <= high,
                    f"workerMinPollers.{queue} must be {low}..{high} (or 0 with workerMaxPollers.{queue} 0)",
                )
                _check(
                    least <= most <= POLLERS_MAX_LIMIT,
                    f"workerMaxPollers.{queue} must be workerMinPollers.{queue}..{POLLERS_MAX_LIMIT}",
                )
        _check(self.worker_reserved_concurrency >= 0, "workerReservedConcurrency must be >= 0 (0 = none)")
        _check(self.api_reserved_concurrency >= 0, "apiReservedConcurrency must be >= 0 (0 = none)")
        _check(self.api_rate_limit >= 1, "apiRateLimit must be >= 1 (requests per second)")
        _check(self.api_burst_limit >= self.api_rate_limit, "apiBurstLimit must be >= apiRateLimit")
        _check(
            self.api_tenants_at_limit >= MIN_TENANTS_AT_LIMIT,
            f"apiTenantsAtLimit must be >= {MIN_TENANTS_AT_LIMIT}: two tenants at their limit "
            "must never fill the stage",
        )
        if self.tenant_requests_per_second:
            needed = self.api_tenants_at_limit * self.tenant_requests_per_second
            _check(
                self.api_rate_limit >= needed,
                f"apiRateLimit {self.api_rate_limit} is shared by every tenant: {self.api_tenants_at_limit} "
                f"tenants (apiTenantsAtLimit) at tenantRequestsPerSecond {self.tenant_requests_per_second} "
                f"need {needed}; raise apiRateLimit or lower tenantRequestsPerSecond",
            )
        _check(
            0 <= self.api_max_body_bytes <= MAX_API_BODY_BYTES,
            f"apiMaxBodyBytes must be 0 (no web ACL) or 1..{MAX_API_BODY_BYTES}: a larger body may "
            "not fit Lambda's 6 MB event once escaped, and comes back as a 500",
        )
        try:
            self.grants_document(CHECK_HOME)
        except ValidationError as exc:
            error = exc.errors()[0]
            key = {"targets": "tenantTargets", "event_sources": "tenantEventSources"}.get(
                str(error["loc"][-1]) if error["loc"] else "", "assumableRoles"
            )
            if error["loc"] and error["loc"][0] == "tenants" and error["loc"][-1] == "tenant":
                key = "tenantTargets"
            raise ConfigError(f"{key}: {error['msg']}") from None
        _check(
            self.grants_parameter_tier in GRANTS_PARAMETER_TIERS,
            f"grantsParameterTier must be one of {', '.join(GRANTS_PARAMETER_TIERS)}",
        )
        size = self.grants_bytes()
        _check(
            size <= ADVANCED_PARAMETER_BYTES,
            f"tenantTargets, tenantEventSources and assumableRoles take about {size} bytes; the "
            f"grants parameter holds {ADVANCED_PARAMETER_BYTES}: use wildcards, or let tenants "
            "bring a roleArn of their own",
        )
        # The stack's sweeper runs every minute (local mode may tick faster, with a shorter horizon).
        _check(self.horizon_seconds >= 60, "horizonSeconds must be >= 60: the sweeper runs every minute")
        _check(self.event_archive_days >= 0, "eventArchiveDays must be >= 0 (0 = keep indefinitely)")
        _check(
            self.handler_code is None or Path(self.handler_code).is_dir(),
            f"handlerCode: {self.handler_code!r} is not a directory (relative to {Path.cwd()})",
        )
        try:
            code_asset_packages(self.handler_modules, self.handler_code)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        _check(
            self.alarm_email is None
            or (isinstance(self.alarm_email, str) and _EMAIL.fullmatch(self.alarm_email) is not None),
            f"alarmEmail must be an e-mail address (name@domain, no spaces), got {self.alarm_email!r}; "
            "leave it out for no subscriber (synth then warns)",
        )
        _check(self.billing_mode in BILLING_MODES, f"billingMode must be one of {', '.join(BILLING_MODES)}")
        _check(self.account_concurrency >= 0, "accountConcurrency must be >= 0 (0 = reserve nothing)")
        if self.account_concurrency:
            reserved = self.reserved_concurrency()
            needed = self.concurrency_needed(reserved)
            named = ", ".join(f"{name} {n}" for name, n in reserved.items())
            _check(
                needed <= self.account_concurrency,
                f"accountConcurrency {self.account_concurrency} cannot hold the reservations "
                f"({named}), the worker ceilings beyond its own reservation and the "
                f"{UNRESERVED_MINIMUM} Lambda keeps unreserved (needs {needed}). The quota is "
                "Lambda's 'Concurrent executions' (L-B99A9384; `jobsched doctor` reads it): "
                "raise it in Service Quotas (aws service-quotas request-service-quota-increase "
                f"--service-code lambda --quota-code L-B99A9384 --desired-value {needed}) and "
                "pass the new value as accountConcurrency, lower shardCount or "
                "workerConcurrency, or set accountConcurrency to 0 (reserves nothing)",
            )
        for key, base in WARM_THROUGHPUT_BASE.items():
            units = self.warm_throughput.get(key, 0)
            _check(
                units == 0 or units >= base,
                f"warmThroughput.{key} must be 0 (AWS's default) or >= {base}, the warm throughput "
                "every new on-demand table and index already has",
            )
        for key in ("maxRead", "maxWrite"):
            units = self.on_demand_throughput.get(key, 0)
            _check(units >= 0, f"onDemandThroughput.{key} must be >= 0 (0 = no ceiling)")
            _check(
                units == 0 or self.billing_mode == "on-demand",
                f"onDemandThroughput.{key} caps on-demand tables; billingMode is {self.billing_mode}",
            )
        capacity = self.provisioned_capacity
        for kind in ("Read", "Write"):
            low, high = capacity.get(f"min{kind}", 0), capacity.get(f"max{kind}", 0)
            _check(
                1 <= low <= high <= 40_000,
                f"provisionedCapacity: need 1 <= min{kind} <= max{kind} <= 40000",
            )
        _check(
            20 <= capacity.get("targetUtilization", 0) <= 90,
            "provisionedCapacity.targetUtilization must be 20..90 (percent)",
        )

    def runtime_settings(self, **resources: Any) -> Settings:
        """What the functions run with: this config's runtime fields and the stack's resources
        (table names, queue URLs: tokens at synth time; the metric names, metric_names). Its
        `lambda_environment()` is the functions' environment."""
        named = {name: getattr(self, name) for name in METRIC_NAME_FIELDS if getattr(self, name)}
        try:
            return Settings(
                **{name: getattr(self, name) for name in RUNTIME_FIELDS}, **{**named, **resources}
            )
        except ValidationError as exc:
            error = exc.errors()[0]
            variable = env_name(tuple(error["loc"]))
            key = _CONTEXT_KEY_OF.get(variable, variable)
            raise ConfigError(f"{key} ({variable}): {error['msg']} (got {error.get('input')!r})") from None

    def metric_names(self, name: str) -> tuple[str, str]:
        """(namespace, service) of the scheduler named `name` (names.Naming): metricsNamespace
        and serviceName when set, else `jobsched/<name>` and `<name>`. What its functions emit
        under and what its alarms and dashboard read."""
        return (self.metrics_namespace or f"jobsched/{name}", self.service_name or name)

    def missing_subscriber(self) -> str | None:
        """What to say when no alarm would reach anyone (no alarmEmail and no explicit
        alarmsWithoutSubscriber), else None. A stack without one still deploys: synth, the
        preflight and the stack's AlarmSubscriber output say so, loudly."""
        if self.alarm_email or self.alarms_without_subscriber:
            return None
        return (
            "alarmEmail is empty, so no alarm reaches anyone: deploy with "
            "-c alarmEmail=ops@example.com, or with -c alarmsWithoutSubscriber=true if you "
            "subscribe to the AlarmTopicArn output yourself (docs/operate/alarms.md)"
        )

    def provisioned_pollers(self, queue: str) -> tuple[int, int] | None:
        """(minimum, maximum) event pollers of a queue's mapping in provisioned mode, else None."""
        least = self.worker_min_pollers.get(queue, 0)
        return (least, self.worker_max_pollers[queue]) if least else None

    def worker_ceilings(self) -> dict[str, int]:
        """Concurrent worker invocations each queue's mapping may reach."""
        ceilings = {}
        for queue in QUEUE_KEYS:
            pollers = self.provisioned_pollers(queue)
            ceilings[queue] = (
                pollers[1] * INVOCATIONS_PER_POLLER if pollers else self.worker_concurrency[queue]
            )
        return ceilings

    def tick_invocations(self) -> dict[str, int]:
        """Invocations each scheduled function gets at once, each tick."""
        return {
            SWEEPER: math.ceil(self.shard_count / self.shards_per_sweep),
            RECONCILER: self.shard_count,
        }

    def peak_concurrency(self) -> dict[str, int]:
        """Invocations of each scheduled function that may run at once: a minute's. A pass
        lasts at most 50 s, so the sweeper's ticks (a minute apart) never overlap, while the
        reconciler's (its rule tick, and the second tick half a minute later) overlap two a
        shard at a time."""
        return self.ticks_per_minute()

    def ticks_per_minute(self) -> dict[str, int]:
        """Invocations each scheduled function gets a minute: the sweeper one tick, the
        reconciler two (the rule's, and the second tick half a minute later)."""
        ticks = self.tick_invocations()
        return {SWEEPER: ticks[SWEEPER], RECONCILER: 2 * ticks[RECONCILER]}

    def tick_reservations(self) -> dict[str, int]:
        """What the scheduled functions reserve once accountConcurrency is given: their peak
        concurrency and a quarter more (at least 2), so a burst of workers or API calls cannot
        throttle a tick, and a pass running late does not throttle the next one."""
        return {name: n + max(2, math.ceil(n / 4)) for name, n in self.peak_concurrency().items()}

    def reserved_concurrency(self) -> dict[str, int]:
        """Reserved concurrency by function: the scheduled functions' with accountConcurrency
        (none without), and the worker's and the API's when asked for by name (kept even with
        accountConcurrency 0)."""
        reserved = self.tick_reservations() if self.account_concurrency else {}
        if self.worker_reserved_concurrency:
            reserved[WORKER] = self.worker_reserved_concurrency
        if self.api_reserved_concurrency:
            reserved[API] = self.api_reserved_concurrency
        return reserved

    def concurrency_needed(self, reserved: Mapping[str, int]) -> int:
        """The account quota that holds `reserved` (function -> reservation), the worker
        ceilings beyond the worker's own reservation, and the concurrency Lambda keeps
        unreserved."""
        ceilings = max(0, sum(self.worker_ceilings().values()) - reserved.get(WORKER, 0))
        return sum(reserved.values()) + ceilings + UNRESERVED_MINIMUM

    def targets_for(self, service: str) -> list[str]:
        """Every tenant's patterns for `service`: what the worker's own role may reach."""
        patterns = (p for arns in self.tenant_targets.values() for p in arns)
        return sorted({p for p in patterns if target_service(p) == service})

    def grants_document(self, home: dict[str, Any] | None = None) -> GrantsDocument:
        """The operator's grants as the functions read them (validated by the runtime model)."""
        return GrantsDocument.from_maps(
            self.tenant_targets, self.tenant_event_sources, self.assumable_roles, home
        )

    def grants_bytes(self) -> int:
        """The grants parameter's size at most, once the deploy has resolved its home."""
        text = self.grants_document(CHECK_HOME).model_dump_json(by_alias=True, exclude_defaults=True)
        return len(text.encode()) + GRANTS_OVERHEAD_BYTES

    def grants_parameter_advanced(self) -> bool:
        """Whether the grants parameter is an advanced one: asked for, or grants past 4 KB."""
        return self.grants_parameter_tier == "advanced" or self.grants_bytes() > STANDARD_PARAMETER_BYTES

    def secret_patterns(self, service: str) -> list[str]:
        """The ARN patterns of `service` (secretsmanager | ssm) granted to any tenant: what the
        worker may read, and nothing else. Sorted, without repeats."""
        assert service in SECRET_SERVICES, service
        return self.targets_for(service)

    @classmethod
    def from_context(cls, node: Node) -> Config:
        values: dict[str, Any] = {}
        for gone, instead in _REPLACED.items():
            if node.try_get_context(gone) not in (None, "", []):
                raise ConfigError(instead)
        for name, kind in _FIELDS.items():
            raw = node.try_get_context(name)
            if raw is None or raw == "":
                continue
            value = _coerce(name, raw, kind)
            if kind == "map":  # a partial map only overrides the keys it names
                factory = cls.__dataclass_fields__[_snake(name)].default_factory
                if not callable(factory):
                    raise TypeError(f"{name}: a map setting needs a default_factory")
                value = {**factory(), **value}
            values[_snake(name)] = value
        return cls(**values)


_FIELDS: dict[str, str] = {
    "shardCount": "int",
    "shardsPerSweep": "int",
    "retentionDays": "int",
    "horizonSeconds": "int",
    "sweepAheadSeconds": "int",
    "tenantConcurrency": "int",
    "maxJobsPerTenant": "int",
    "tenantRequestsPerSecond": "int",
    "leaseSeconds": "int",
    "fairQueues": "bool",
    "alarmEmail": "str",
    "alarmsWithoutSubscriber": "bool",
    "tenantTargets": "grants",
    "tenantEventSources": "grants",
    "assumableRoles": "list",
    "grantsParameterTier": "str",
    "httpAllowDestinations": "list",
    "handlerModules": "list",
    "handlerCode": "str",
    "secretCacheSeconds": "int",
    "runEvents": "str",
    "eventArchiveDays": "int",
    "metricsNamespace": "str",
    "serviceName": "str",
    "workerConcurrency": "map",
    "workerBatchSize": "map",
    "workerBatchWindowSeconds": "map",
    "workerMinPollers": "map",
    "workerMaxPollers": "map",
    "workerReservedConcurrency": "int",
    "apiReservedConcurrency": "int",
    "apiRateLimit": "int",
    "apiBurstLimit": "int",
    "apiTenantsAtLimit": "int",
    "apiMaxBodyBytes": "int",
    "queueAgeAlarmSeconds": "map",
    "repairAlarmThreshold": "int",
    "iteratorAgeAlarmSeconds": "int",
    "logRetentionDays": "int",
    "retainData": "bool",
    "accountConcurrency": "int",
    "apiGatewayAccountRole": "bool",
    "billingMode": "str",
    "provisionedCapacity": "map",
    "warmThroughput": "map",
    "onDemandThroughput": "map",
}
# Context keys that no longer exist, with what replaces them: refused rather than ignored.
_REPLACED = {
    "targetArns": (
        "targetArns is replaced by tenantTargets (tenant id -> ARN patterns): it let every "
        "tenant reach every listed target; grant each tenant its own (docs/concepts/targets.md)"
    ),
}
BILLING_MODES = ("on-demand", "provisioned")
GRANTS_PARAMETER_TIERS = ("auto", "advanced")
# What a new on-demand table or index can take at once without warm throughput set.
WARM_THROUGHPUT_BASE = {"read": 12_000, "write": 4_000, "indexRead": 12_000, "indexWrite": 4_000}
# Config fields the functions read at run time: same names as jobsched.settings.Settings fields.
RUNTIME_FIELDS = (
    "shard_count",
    "horizon_seconds",
    "sweep_ahead_seconds",
    "retention_days",
    "max_jobs_per_tenant",
    "tenant_requests_per_second",
    "fair_queues",
    "tenant_concurrency",
    "lease_seconds",
    "http_allow_destinations",
    "handler_modules",
    "secret_cache_seconds",
    "run_events",
)
# Runtime settings whose default is the scheduler's own (Config.metric_names), not the model's.
METRIC_NAME_FIELDS = ("metrics_namespace", "service_name")
CONTEXT_KEYS = tuple(_FIELDS)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


# Environment variable -> the context key that sets it (for errors raised by the runtime model).
_CONTEXT_KEY_OF = {
    str(Settings.model_fields[name].alias): _camel(name) for name in (*RUNTIME_FIELDS, *METRIC_NAME_FIELDS)
}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def _coerce(name: str, raw: Any, kind: str) -> Any:
    # `-c key=value` on the CLI always arrives as a string.
    try:
        if kind == "int":
            return int(raw)
        if kind == "bool":
            return raw if isinstance(raw, bool) else str(raw).strip().lower() in ("1", "true", "yes")
        if kind == "str":
            return str(raw)
        if kind == "list":
            if isinstance(raw, str):
                raw = json.loads(raw) if raw.strip().startswith("[") else raw.split(",")
            return tuple(str(x).strip() for x in raw if str(x).strip())
        if kind == "map":
            if isinstance(raw, str):
                raw = json.loads(raw)
            return {str(k): int(v) for k, v in dict(raw).items()}
        if kind == "grants":  # tenant id -> list of patterns
            if isinstance(raw, str):
                raw = json.loads(raw)
            grants = {}
            for tenant, patterns in dict(raw).items():
                if isinstance(patterns, str) or not isinstance(patterns, list | tuple):
                    raise TypeError(f"the patterns of tenant {tenant!r} must be a list")
                grants[str(tenant)] = tuple(str(p) for p in patterns)
            return grants
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"context '{name}': cannot read {raw!r} as {kind}: {exc}") from None
    raise AssertionError(kind)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


# --- the construct's props: the context keys in Python's spelling ---

PROP_OF = {key: _snake(key) for key in _FIELDS}  # context key -> prop
CONTEXT_KEY_OF_PROP = {prop: key for key, prop in PROP_OF.items()}
PROPS = tuple(PROP_OF.values())
_CONTEXT_KEY = re.compile(r"\b(" + "|".join(sorted(_FIELDS, key=len, reverse=True)) + r")\b")


def props_message(message: str) -> str:
    """A ConfigError's message in the construct's terms: each context key by its prop's name."""
    return _CONTEXT_KEY.sub(lambda m: PROP_OF[m.group(1)], message)


def check_prop_names(names: Iterable[str]) -> None:
    """Refuses a keyword that is no prop, naming the closest one."""
    for name in names:
        if name not in CONTEXT_KEY_OF_PROP:
            close = difflib.get_close_matches(name, PROPS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"{name}: no such JobScheduler prop{hint}")


_KINDS = {
    "int": "an int",
    "bool": "a bool",
    "str": "a str",
    "list": "a list of str",
    "map": "a mapping of str to int",
    "grants": "a mapping of tenant id to a list of ARN patterns",
}


def _prop_value(prop: str, value: Any, kind: str, default: Any) -> Any:
    """`value` of a prop of `kind`, typed as Config holds it (lists as tuples, a partial map
    over the default's keys), or ConfigError naming the prop."""

    def strings(items: Any) -> bool:
        return (
            not isinstance(items, str | bytes)
            and isinstance(items, list | tuple)
            and all(isinstance(x, str) for x in items)
        )

    ok = {
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "bool": lambda v: isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "list": strings,
        "map": lambda v: (
            isinstance(v, Mapping)
            and all(
                isinstance(k, str) and isinstance(n, int) and not isinstance(n, bool) for k, n in v.items()
            )
        ),
        "grants": lambda v: (
            isinstance(v, Mapping) and all(isinstance(k, str) and strings(p) for k, p in v.items())
        ),
    }[kind]
    if value is None and default is None:
        return None  # an optional prop left out (alarm_email, handler_code)
    if not ok(value):
        raise ConfigError(f"{prop}: expected {_KINDS[kind]}, got {value!r}")
    if kind == "list":
        return tuple(value)
    if kind == "map":
        return {**default, **value}
    if kind == "grants":
        return {tenant: tuple(patterns) for tenant, patterns in value.items()}
    return value


class JobSchedulerProps(Config):
    """The JobScheduler construct's props: Config's fields (the context keys in Python's
    spelling: shard_count for shardCount), each checked for its type, a map merged over its
    default's keys as the context's is, and every rule of Config applied; a ConfigError names
    the prop. Being a Config, it is what the construct builds from."""

    def __post_init__(self) -> None:
        defaults = Config()
        for spec in fields(Config):
            kind = _FIELDS[CONTEXT_KEY_OF_PROP[spec.name]]
            value = _prop_value(spec.name, getattr(self, spec.name), kind, getattr(defaults, spec.name))
            object.__setattr__(self, spec.name, value)
        try:
            super().__post_init__()
        except ConfigError as exc:
            raise ConfigError(props_message(str(exc))) from None

    def missing_subscriber(self) -> str | None:
        """Config.missing_subscriber in the construct's terms."""
        if self.alarm_email or self.alarms_without_subscriber:
            return None
        return (
            "alarm_email is empty, so no alarm reaches anyone: give alarm_email, or "
            "alarms_without_subscriber=True if you subscribe to the scheduler's alarm_topic "
            "yourself (docs/operate/alarms.md)"
        )

    @classmethod
    def of(cls, **props: Any) -> JobSchedulerProps:
        """Props from keywords, a keyword that is no prop refused by name."""
        check_prop_names(props)
        return cls(**props)
