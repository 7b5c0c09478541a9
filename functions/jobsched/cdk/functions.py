"""The functions (jobsched.cdk.names.FUNCTIONS): one code asset (functions/), one layer, one role
each with exactly the actions in jobsched.cdk.permissions, and the environment generated from
jobsched.settings.Settings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aws_cdk import Duration, Fn, RemovalPolicy, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from jobsched.settings import Settings
from jobsched.store.schema import DEFINITIONS, QUEUES, RUNS

from . import permissions
from .config import Config
from .layer_asset import function_code, layer_code
from .names import (
    FUNCTIONS,
    PYTHON_VERSION,
    RECONCILER,
    SWEEPER,
    FunctionSpec,
    code_asset_packages,
    function_id,
)
from .queues import Queues
from .storage import Storage

RUNTIME: lambda_.Runtime = getattr(lambda_.Runtime, "PYTHON_" + PYTHON_VERSION.replace(".", "_"))
ARCHITECTURE = lambda_.Architecture.ARM_64

# Invoked asynchronously by the every-minute rules. A failed or throttled tick is not worth
# retrying: the next tick (a minute later; the reconciler's second, half a minute) finds the
# same work (sweeps keep no watermark).
# Lambda's defaults would retry a failure twice and keep a throttled event for 6 hours.
SCHEDULED = (SWEEPER, RECONCILER)
# The keys kms:Decrypt names for secrets: any key (a tenant's secret may be under its own key,
# in its own account); the statement's conditions allow decrypting granted secrets only.
SECRET_KEYS = "arn:${AWS::Partition}:kms:*:*:key/*"
TICK_ASYNC_RETRIES = 0
TICK_MAX_EVENT_AGE = Duration.seconds(60)


_RETENTION = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    731: logs.RetentionDays.TWO_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}


def log_retention(days: int) -> logs.RetentionDays:
    """The smallest retention CloudWatch offers that keeps logs at least `days`."""
    return next((r for d, r in sorted(_RETENTION.items()) if d >= days), logs.RetentionDays.TEN_YEARS)


# Powertools' own variables beyond the service and namespace (runtime settings: the
# scheduler's own, Config.metric_names).
POWERTOOLS_ENVIRONMENT = {
    "POWERTOOLS_LOG_LEVEL": "INFO",
    "POWERTOOLS_METRICS_DISABLED": "false",  # local mode turns them off; Lambda keeps them
}


def runtime_settings(
    config: Config,
    storage: Storage,
    queues: Queues,
    grants_parameter: str,
    event_bus: events.IEventBus,
    source_name: str | None = None,
) -> Settings:
    """The settings every function runs with: the config's, pointed at this scheduler's
    resources. `source_name`: the scheduler's name (names.Naming), the stack's by default; its
    events' source and its metrics' namespace and service are made of it."""
    name = source_name or Stack.of(event_bus).stack_name
    namespace, service = config.metric_names(name)
    return config.runtime_settings(
        definitions_table=storage.table(DEFINITIONS).table_name,
        runs_table=storage.table(RUNS).table_name,
        queue_urls={q.key: queues.queues[q.key].queue_url for q in QUEUES},
        dlq_urls={q.key: queues.dlqs[q.key].queue_url for q in QUEUES},
        target_grants_parameter=grants_parameter,
        event_bus_name=event_bus.event_bus_name,
        event_source_name=name,
        metrics_namespace=namespace,
        service_name=service,
        notifications_queue_url=queues.notifications.queue_url,
        second_tick_queue_url=queues.second_ticks.queue_url,
        own_queue_urls=tuple(queue.queue_url for queue in queues.failure_queues().values()),
        events_failures_queue_url=queues.events_failures.queue_url,
    )


def environment(
    config: Config,
    storage: Storage,
    queues: Queues,
    grants_parameter: str,
    event_bus: events.IEventBus,
    source_name: str | None = None,
) -> dict[str, str]:
    """Generated from the runtime settings model: every variable it reads, and Powertools'."""
    settings = runtime_settings(config, storage, queues, grants_parameter, event_bus, source_name)
    return {**settings.lambda_environment(), **POWERTOOLS_ENVIRONMENT}


class Functions(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Config,
        storage: Storage,
        queues: Queues,
        grants_parameter: str,
        event_bus: events.IEventBus,
        layer_code_factory: Callable[[], lambda_.Code] = layer_code,
        name: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        self._event_bus = event_bus
        self._grants_parameter_arn: str | None = None
        self._storage = storage
        self._queues = queues
        self.layer = lambda_.LayerVersion(
            self,
            "Dependencies",
            code=layer_code_factory(),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="jobsched third-party dependencies (layers/requirements.txt)",
        )
        packages = code_asset_packages(config.handler_modules, config.handler_code)
        code = function_code(packages, handler_code=config.handler_code)
        env = environment(config, storage, queues, grants_parameter, event_bus, name)
        self.functions: dict[str, lambda_.Function] = {}
        self.roles: dict[str, iam.Role] = {}
        self.log_groups: dict[str, logs.LogGroup] = {}
        for spec in FUNCTIONS:
            self._function(spec, code, env)

    def _function(self, spec: FunctionSpec, code: lambda_.Code, env: dict[str, str]) -> None:
        base = function_id(spec.name)
        log_group = logs.LogGroup(
            self,
            base + "Logs",
            retention=log_retention(self._config.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        # No managed policies: every action the role holds is listed in jobsched.cdk.permissions.
        role = iam.Role(
            self,
            base + "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"jobsched {spec.name}",
        )
        function = lambda_.Function(
            self,
            base,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=spec.handler,
            code=code,
            layers=[self.layer],
            memory_size=spec.memory_mb,
            timeout=Duration.seconds(spec.timeout_seconds),
            environment=env,
            role=role,
            log_group=log_group,
            tracing=lambda_.Tracing.ACTIVE,
            description=spec.description,
            reserved_concurrent_executions=self._config.reserved_concurrency().get(spec.name),
            # No function re-sends the message that triggered it: the worker defers a wait by
            # the message's visibility, or hands the run to the outbox (DynamoDB stream, which
            # carries no recursion context). Lambda's guard stays on: a worker -> SQS ->
            # worker loop (a tenant target pointed at a jobsched queue, say) is stopped, and
            # the worker-recursion-dropped alarm says so.
            recursive_loop=lambda_.RecursiveLoop.TERMINATE,
        )
        if spec.name in SCHEDULED:
            function.configure_async_invoke(
                retry_attempts=TICK_ASYNC_RETRIES, max_event_age=TICK_MAX_EVENT_AGE
            )
        self.functions[spec.name] = function
        self.roles[spec.name] = role
        self.log_groups[spec.name] = log_group

    def grant_all(
        self, grants_parameter_arn: str, extra_targets: dict[str, Sequence[str]] | None = None
    ) -> None:
        """Attach the statements of jobsched.cdk.permissions to each role (after every resource exists)."""
        self._grants_parameter_arn = grants_parameter_arn
        for name, role in self.roles.items():
            for grant in permissions.grants(name):
                resources = [
                    arn for res in grant.resources for arn in self._arns(name, res, extra_targets or {})
                ]
                if not resources:
                    continue  # e.g. no target ARNs allowed for a service
                role.add_to_principal_policy(
                    iam.PolicyStatement(
                        actions=list(grant.actions), resources=resources, conditions=self._conditions(grant)
                    )
                )

    def _conditions(self, grant: permissions.Grant) -> dict[str, Any] | None:
        """The grant's own conditions (sts:ExternalId on AssumeRole), or for kms:Decrypt: only
        through the service holding a granted secret, for that secret (the encryption context
        each service binds to a secret's data key names the secret)."""
        if grant.decrypting_for is None:
            return {k: dict(v) for k, v in grant.conditions} or None
        context_key = {"secretsmanager": "SecretARN", "ssm": "PARAMETER_ARN"}[grant.decrypting_for]
        patterns = [Fn.sub(p) if "${" in p else p for p in self._config.secret_patterns(grant.decrypting_for)]
        return {
            "StringEquals": {
                "kms:ViaService": Fn.sub(f"{grant.decrypting_for}.${{AWS::Region}}.amazonaws.com")
            },
            "StringLike": {f"kms:EncryptionContext:{context_key}": patterns},
        }

    def _arns(self, function: str, res: permissions.Res, extra: dict[str, Sequence[str]]) -> list[str]:
        tables = self._storage.tables
        if res.kind == "table":
            return [tables[res.name].table_arn]
        if res.kind == "index":
            return [f"{tables[res.name].table_arn}/index/{res.index}"]
        if res.kind == "stream":
            arn = tables[res.name].table_stream_arn
            assert arn is not None, f"{res.name} has no stream"
            return [arn]
        if res.kind == "queue":
            return [self._queues.queues[res.name].queue_arn]
        if res.kind == "dlq":
            return [self._queues.dlqs[res.name].queue_arn]
        if res.kind == "outbox_failures":
            return [self._queues.outbox_failures.queue_arn]
        if res.kind == "events_failures":
            return [self._queues.events_failures.queue_arn]
        if res.kind == "notifications":
            return [self._queues.notifications.queue_arn]
        if res.kind == "second_ticks":
            return [self._queues.second_ticks.queue_arn]
        if res.kind == "event_bus":
            return [self._event_bus.event_bus_arn]
        if res.kind == "log_group":
            return [self.log_groups[function].log_group_arn]
        if res.kind == "targets":
            configured = [Fn.sub(a) if "${" in a else a for a in self._config.targets_for(res.name)]
            return configured + list(extra.get(res.name, ()))
        if res.kind == "secrets":
            return [Fn.sub(p) if "${" in p else p for p in self._config.secret_patterns(res.name)]
        if res.kind == "secret_keys":
            return [Fn.sub(SECRET_KEYS)] if self._config.secret_patterns(res.name) else []
        if res.kind == "roles":
            return [Fn.sub(a) if "${" in a else a for a in self._config.assumable_roles]
        if res.kind == "grants_parameter":
            assert self._grants_parameter_arn is not None
            return [self._grants_parameter_arn]
        if res.kind == "any":
            return ["*"]
        raise ValueError(f"unknown resource kind {res.kind}")
