"""JobScheduler: the whole of jobsched as one construct (storage, queues, functions, event
sources, schedules, API, monitoring, target grants and, optionally, the examples), each a
construct of this package; the cdk-nag exceptions are written down here with their reason.

The app's own stack (infra/stack.py) adds it with the id "Default", which CDK leaves out of
logical ids, so every resource keeps the logical id it had when the stack built them itself.
Anywhere else the fixed logical ids (tables, queues, bus, REST API) and the physical names
(alarms, rules, API, archive, grants parameter) are made the scheduler's own (names.Naming)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from aws_cdk import Annotations, Aws, Fn, Stack, Token
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from jobsched.domain.grants import TARGET_SERVICES

from . import nag
from .api import Api
from .config import (
    ADVANCED_PARAMETER_BYTES,
    STANDARD_PARAMETER_BYTES,
    Config,
    ConfigError,
    JobSchedulerProps,
)
from .event_bus import EventBus
from .event_sources import EventSources
from .examples import Examples
from .functions import SECRET_KEYS, Functions
from .grants import TargetGrants
from .grants import parameter_name as grants_parameter_name
from .layer_asset import layer_code
from .monitoring import Monitoring
from .names import (
    API,
    API_ROLES,
    API_STAGE,
    FUNCTIONS,
    NOTIFIER,
    PYTHON_VERSION,
    REST_API_LOGICAL_ID,
    ROUTES,
    WORKER,
    Route,
)
from .queues import Queues
from .schedules import Schedules
from .storage import Storage

# The id that keeps the app's logical ids: CDK leaves a "Default" out of every logical id.
APP_ID = "Default"
# The id of the warning synth gives a scheduler whose alarms reach no one (acknowledged by
# id in a CDK app that means it: Annotations.of(scope).acknowledge_warning).
NO_ALARM_SUBSCRIBER = "jobsched:noAlarmSubscriber"
# What grant_target adds to the grants parameter at most, per function: the ARN and its
# qualified pattern, resolved (a function ARN is at most 140 characters), and the tenant's entry.
_GRANT_ENTRY_BYTES = 2 * 150 + 60


@dataclass(frozen=True)
class Naming:
    """What one scheduler makes unique in its stack. `name`: what its physical names are made
    of (alarms, rules, API, event archive, grants parameter, its events' source): the stack's
    name for the app's scheduler, `<stack>-<prefix>` for any other. `prefix`: what goes before
    each fixed logical id: "" for the app's, else the construct's path below the stack (one id
    as it is; several joined, with 8 hex of the path so no two differ only by the slashes)."""

    name: str
    prefix: str

    @classmethod
    def of(cls, scope: Construct) -> Naming:
        stack = Stack.of(scope)
        below = scope.node.path.removeprefix(stack.node.path + "/").split("/")
        kept = [part for part in below if part != APP_ID]
        if not kept:
            return cls(stack.stack_name, "")
        joined = "".join(re.sub(r"[^A-Za-z0-9]", "", part) for part in kept)
        if len(kept) > 1:
            joined += hashlib.sha256("/".join(kept).encode()).hexdigest()[:8].upper()
        return cls(f"{stack.stack_name}-{joined}", joined)


def _props(props: Config | None, keywords: dict[str, Any]) -> Config:
    if props is not None and keywords:
        raise ConfigError(f"JobScheduler: give props or keyword props, not both ({', '.join(keywords)})")
    if props is None:
        return JobSchedulerProps.of(**keywords)
    if not isinstance(props, Config):
        raise ConfigError(f"props: expected a JobSchedulerProps (or Config), got {props!r}")
    return props


class JobScheduler(Construct):
    """jobsched in one construct. Props: a JobSchedulerProps (or the app's Config), or the same
    fields as keywords (`shard_count=16, alarm_email="ops@example.com"`), validated as the app's
    context is; a bad one raises ConfigError naming it. `examples`: the two example state
    machines (one creates a job through the API, the other is that job's target); the app
    deploys them, a construct user rarely wants them.

    Exposed: `api` (the API construct: `rest_api`, `url`, a managed policy per caller role in
    `policies`), `rest_api`, `tables` (by name: Definitions, Runs), `queues` (run queues, their
    dead letters, the failure queues), `functions` (by name, with `roles`), `event_bus`,
    `alarm_topic`, `dashboard`, `grants_parameter`, `config`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        props: Config | None = None,
        *,
        examples: bool = False,
        layer_code_factory: Callable[[], lambda_.Code] = layer_code,
        **keywords: Any,
    ) -> None:
        config = _props(props, keywords)
        super().__init__(scope, construct_id)
        self.config = config
        missing = config.missing_subscriber()
        if missing is not None:  # deployable, but said at every synth and deploy
            Annotations.of(self).add_warning_v2(NO_ALARM_SUBSCRIBER, missing)
        self.naming = Naming.of(self)
        prefix = self.naming.prefix
        self.storage = Storage(
            self,
            "Storage",
            retain=config.retain_data,
            provisioned=config.provisioned_capacity if config.billing_mode == "provisioned" else None,
            warm_throughput=config.warm_throughput,
            on_demand_throughput=config.on_demand_throughput,
            logical_prefix=prefix,
        )
        self.queues = Queues(self, "Queues", logical_prefix=prefix)
        self.events = EventBus(self, "Events", config=config, name=self.naming.name, logical_prefix=prefix)
        self.functions = Functions(
            self,
            "Functions",
            config=config,
            storage=self.storage,
            queues=self.queues,
            grants_parameter=grants_parameter_name(self.naming.name),
            event_bus=self.events.bus,
            layer_code_factory=layer_code_factory,
            name=self.naming.name,
        )
        self.event_sources = EventSources(
            self,
            "EventSources",
            config=config,
            storage=self.storage,
            queues=self.queues,
            functions=self.functions,
        )
        self.schedules = Schedules(
            self,
            "Schedules",
            config=config,
            functions=self.functions,
            dead_letters=self.queues.tick_failures,
            name=self.naming.name,
        )
        self.api = Api(
            self,
            "Api",
            config=config,
            handler=self.functions.functions[API],
            name=self.naming.name,
            logical_prefix=prefix,
        )
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            config=config,
            queues=self.queues,
            functions=self.functions,
            storage=self.storage,
            api=self.api,
            schedules=self.schedules,
            name=self.naming.name,
        )
        extra_grants: list[dict[str, Any]] = []
        extra_targets: dict[str, Sequence[str]] = {}
        self.examples: Examples | None = None
        self.example_tenant: str | None = None
        if examples:
            self.examples = Examples(
                self,
                "Examples",
                api=self.api,
                log_retention_days=config.log_retention_days,
                name=self.naming.name,
            )
            # The example machine that creates jobs is a tenant (its role); it may start the
            # example target machine, and no other tenant may.
            run_target = self.examples.run_target.state_machine_arn
            self.example_tenant = Fn.join(
                "", [Aws.ACCOUNT_ID, "/role/", self.examples.create_schedule.role.role_name]
            )
            extra_grants.append({"tenant": self.example_tenant, "targets": [run_target]})
            extra_targets["states"] = [run_target]
        # Every function and topic of the scheduler's, by ARN: refused to every tenant, however
        # CloudFormation named them (domain.grants.OwnNames).
        own = [f.function_arn for f in self.functions.functions.values()] + [self.monitoring.topic.topic_arn]
        self.grants = TargetGrants(
            self, "TargetGrants", config=config, name=self.naming.name, extra=extra_grants, own=own
        )
        self.functions.grant_all(self.grants.arn, extra_targets)
        self._granted_bytes = config.grants_bytes()
        self._acknowledgements()

    # --- what the scheduler exposes ---

    @property
    def rest_api(self) -> apigw.RestApi:
        return self.api.rest_api

    @property
    def url(self) -> str:
        """The API's base URL (the stage's; append v1/jobs)."""
        return self.api.url

    @property
    def tables(self) -> dict[str, dynamodb.Table]:
        return dict(self.storage.tables)

    @property
    def alarm_topic(self) -> sns.Topic:
        return self.monitoring.topic

    @property
    def event_bus(self) -> Any:
        return self.events.bus

    @property
    def grants_parameter(self) -> ssm.StringParameter:
        return self.grants.parameter

    @property
    def worker_role(self) -> iam.Role:
        """The principal a tenant's role trusts (with its sts:ExternalId), with the notifier's."""
        return self.functions.roles[WORKER]

    @property
    def notifier_role(self) -> iam.Role:
        return self.functions.roles[NOTIFIER]

    # --- grants ---

    def grant_invoke_api(self, grantee: iam.IGrantable, *roles: str) -> iam.Grant:
        """execute-api:Invoke on the API's routes: every route, or those of the caller `roles`
        named (reader, writer, operator, trigger, redriver, worker: names.API_ROLES). The
        tenant is the caller's IAM identity (docs/operate/deploy.md)."""
        unknown = sorted(set(roles) - set(API_ROLES))
        if unknown:
            raise ValueError(f"grant_invoke_api: no API role {unknown[0]!r} (one of {', '.join(API_ROLES)})")
        routes = [r for r in ROUTES if not roles or r.role in roles]
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["execute-api:Invoke"],
            resource_arns=[self.api.method_arn(r) for r in routes],
        )
        if Construct.is_construct(grantee):  # a role or user of this app: its policy's wildcards
            self._acknowledge_routes(cast(Construct, grantee), routes)
        return grant

    def _acknowledge_routes(self, scope: Construct, routes: Sequence[Route]) -> None:
        rest_api_id = self.naming.prefix + REST_API_LOGICAL_ID
        for route in routes:
            if "*" in route.arn_path:
                nag.acknowledge(
                    scope,
                    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:execute-api:<AWS::Region>:"
                    f"<AWS::AccountId>:<{rest_api_id}>/{API_STAGE}/{route.method}{route.arn_path}]",
                    "API Gateway method ARNs name path parameters with *; the method and the "
                    "rest of the path are fixed, so the policy grants exactly this route.",
                )

    def grant_target(self, tenant: str, function: lambda_.IFunction) -> iam.Grant:
        """Lets `tenant`'s jobs run `function` (its versions and aliases too): the tenant's grant
        in the grants parameter the worker checks before each run, and lambda:InvokeFunction on
        it for the worker's role. What tenantTargets grants, for a function of this app.

        The worker refuses the scheduler's own functions, and any function whose name starts
        with the scheduler's own name and a dash (`<name>-`, jobsched.domain.grants.OwnNames):
        give the function a name of its own, or keep it out of the app's scheduler's stack, if
        that stack's generated names would."""
        if not Token.is_unresolved(tenant):
            Config(tenant_targets={tenant: ()})  # the tenant id's own rules (ConfigError)
        arns = [function.function_arn, f"{function.function_arn}:*"]
        self.grants.extra.append({"tenant": tenant, "targets": arns})
        self._granted_bytes += _GRANT_ENTRY_BYTES + len(tenant.encode())
        if self._granted_bytes > ADVANCED_PARAMETER_BYTES:
            raise ConfigError(
                f"grant_target: the grants take about {self._granted_bytes} bytes; the grants "
                f"parameter holds {ADVANCED_PARAMETER_BYTES}: grant a wildcard through tenant_targets"
            )
        if self._granted_bytes > STANDARD_PARAMETER_BYTES:
            cfn = cast(ssm.CfnParameter, self.grants.parameter.node.default_child)
            cfn.tier = ssm.ParameterTier.ADVANCED.value
        worker = self.functions.roles[WORKER]
        grant = iam.Grant.add_to_principal(
            grantee=worker, actions=["lambda:InvokeFunction"], resource_arns=arns
        )
        nag.acknowledge(
            worker,
            f"AwsSolutions-IAM5[Resource::{nag.render_value(Stack.of(self).resolve(arns[1]))}]",
            "A function granted to a tenant (grant_target) may be run as any of its versions and "
            "aliases, which a job names by a qualified ARN; the worker lets only that tenant run it.",
        )
        return grant

    # --- cdk-nag ---

    def _acknowledgements(self) -> None:
        ack = nag.acknowledge
        for spec in FUNCTIONS:
            ack(
                self.functions.functions[spec.name],
                "AwsSolutions-L1",
                f"Pinned to Python {PYTHON_VERSION}, supported by Lambda for years: the layer is built "
                f"for it, and make test runs the unit and integration suites on CPython {PYTHON_VERSION} "
                "(x86_64; the functions run arm64) as well as every suite on the development "
                "interpreter; a newer runtime is a deliberate change of names.PYTHON_VERSION.",
            )
            ack(
                self.functions.roles[spec.name],
                "AwsSolutions-IAM5[Resource::*]",
                "X-Ray PutTraceSegments/PutTelemetryRecords (and, for the stream consumers, "
                "DynamoDB ListStreams) support no resource-level permissions.",
            )
        for name in (WORKER, NOTIFIER):
            self._acknowledge_tenant_reach(name)
        api = self.api
        if api.web_acl is None:
            ack(
                api.rest_api,
                "AwsSolutions-APIG3",
                "apiMaxBodyBytes is 0: no web ACL. Every method requires SigV4 (IAM) and the stage "
                "is throttled; attach an account WAF web ACL where your organisation mandates one.",
            )
        ack(
            api.rest_api,
            "AwsSolutions-COG4",
            "Callers authenticate with IAM (SigV4), which identifies the tenant; a Cognito user "
            "pool authorizer would be a second, weaker identity.",
        )
        ack(
            api.rest_api,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AmazonAPIGatewayPushToCloudWatchLogs]",
            "The account-level role API Gateway uses to write execution and access logs; AWS "
            "maintains this policy for exactly that purpose.",
        )
        for role in API_ROLES:
            self._acknowledge_routes(api.policies[role], [r for r in ROUTES if r.role == role])
        ack(
            self.queues.outbox_failures,
            "AwsSolutions-SQS3",
            "This queue is itself a dead letter: the on-failure destination of the stream "
            "mapping; its depth is alarmed like every DLQ.",
        )
        ack(
            self.queues.events_failures,
            "AwsSolutions-SQS3",
            "This queue is itself a dead letter: the on-failure destination of the events "
            "mappings; its depth is alarmed like every DLQ.",
        )
        ack(
            self.queues.second_ticks,
            "AwsSolutions-SQS3",
            "A tick: a message not taken within two minutes of being sent expires, and a pass "
            "that failed is never received again (the visibility timeout outlasts the "
            "retention); the next minute's tick does the same work, so nothing is lost.",
        )
        ack(
            self.queues.tick_failures,
            "AwsSolutions-SQS3",
            "This queue is itself a dead letter: the scheduled rules' targets' dead-letter "
            "queue; its depth and new messages are alarmed like every DLQ.",
        )
        if self.examples is not None:
            for machine in (self.examples.run_target, self.examples.create_schedule):
                ack(
                    machine.role,
                    "AwsSolutions-IAM5[Resource::*]",
                    "Step Functions log delivery and X-Ray actions support no resource-level permissions.",
                )

    def _acknowledge_tenant_reach(self, function: str) -> None:
        """The wildcards of what a function that calls tenants' targets (the worker's runs, the
        notifier's notifications) may reach: the operator's patterns, each tenant held to its
        own by the code (targets.authority)."""
        ack = nag.acknowledge
        role = self.functions.roles[function]
        granted = {p for service in TARGET_SERVICES for p in self.config.targets_for(service)}
        for arn in sorted(granted):
            if "*" in arn:
                ack(
                    role,
                    f"AwsSolutions-IAM5[Resource::{nag.render(arn)}]",
                    "Customer targets are named by jobs at run time; the function reaches the "
                    "patterns the operator granted to some tenant (tenantTargets), and its code "
                    "lets each tenant reach only its own (docs/concepts/targets.md).",
                )
        for arn in self.config.assumable_roles:
            if "*" in arn:
                ack(
                    role,
                    f"AwsSolutions-IAM5[Resource::{nag.render(arn)}]",
                    "Tenants name their own roles; the function may assume those the operator "
                    "allows (assumableRoles), only with the tenant's sts:ExternalId, and each "
                    "role's trust policy decides which tenant may use it (docs/design/security.md).",
                )
        for service in ("secretsmanager", "ssm"):
            for arn in self.config.secret_patterns(service):
                if "*" in arn:
                    ack(
                        role,
                        f"AwsSolutions-IAM5[Resource::{nag.render(arn)}]",
                        "Secrets that HTTP target headers reference are granted per tenant as ARN "
                        "patterns (tenantTargets); the function reads only those (docs/design/security.md).",
                    )
        if self.config.secret_patterns("secretsmanager") or self.config.secret_patterns("ssm"):
            ack(
                role,
                f"AwsSolutions-IAM5[Resource::{nag.render(SECRET_KEYS)}]",
                "kms:Decrypt of a granted secret's key, wherever the tenant keeps it: conditioned on "
                "kms:ViaService and on the encryption context naming a granted secret.",
            )
