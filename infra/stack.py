"""The jobsched stack: storage, queues, functions, event sources, schedules, API, monitoring
and examples, each a construct; cdk-nag exceptions are written down here with their reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from aws_cdk import Aws, CfnOutput, Fn, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_lambda as lambda_
from constructs import Construct
from jobsched.domain.grants import TARGET_SERVICES

from . import nag
from .api import Api
from .config import Config
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
    OUTPUT_ALARM_TOPIC,
    OUTPUT_API_ID,
    OUTPUT_API_URL,
    OUTPUT_CREATE_SCHEDULE_SM,
    OUTPUT_DASHBOARD,
    OUTPUT_DEAD_LETTER_ALARMS,
    OUTPUT_EVENT_ARCHIVE,
    OUTPUT_EVENT_BUS,
    OUTPUT_NOTIFIER_FUNCTION_ROLE,
    OUTPUT_RUN_TARGET_SM,
    OUTPUT_WORKER_FUNCTION_ROLE,
    PYTHON_VERSION,
    REST_API_LOGICAL_ID,
    ROUTES,
    WORKER,
    output_policy,
)
from .queues import Queues
from .schedules import Schedules
from .storage import Storage


class JobschedStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Config,
        layer_code_factory: Callable[[], lambda_.Code] = layer_code,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        config.require_alarm_subscriber()  # an alarm that reaches no one is no alarm
        self.config = config
        self.storage = Storage(
            self,
            "Storage",
            retain=config.retain_data,
            provisioned=config.provisioned_capacity if config.billing_mode == "provisioned" else None,
            warm_throughput=config.warm_throughput,
            on_demand_throughput=config.on_demand_throughput,
        )
        self.queues = Queues(self, "Queues")
        self.events = EventBus(self, "Events", config=config)
        self.functions = Functions(
            self,
            "Functions",
            config=config,
            storage=self.storage,
            queues=self.queues,
            grants_parameter=grants_parameter_name(self.stack_name),
            event_bus=self.events.bus,
            layer_code_factory=layer_code_factory,
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
            self, "Schedules", config=config, functions=self.functions, dead_letters=self.queues.tick_failures
        )
        self.api = Api(self, "Api", config=config, handler=self.functions.functions[API])
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            config=config,
            queues=self.queues,
            functions=self.functions,
            storage=self.storage,
            api=self.api,
            schedules=self.schedules,
        )
        self.examples = Examples(self, "Examples", api=self.api, log_retention_days=config.log_retention_days)
        # The example machine that creates jobs is a tenant (its role); it may start the example
        # target machine, and no other tenant may.
        run_target = self.examples.run_target.state_machine_arn
        self.example_tenant = Fn.join(
            "", [Aws.ACCOUNT_ID, "/role/", self.examples.create_schedule.role.role_name]
        )
        self.grants = TargetGrants(
            self,
            "TargetGrants",
            config=config,
            extra=[{"tenant": self.example_tenant, "targets": [run_target]}],
        )
        self.functions.grant_all(self.grants.parameter.parameter_arn, {"states": [run_target]})
        self._outputs()
        self._acknowledgements()

    def _outputs(self) -> None:
        CfnOutput(self, OUTPUT_API_URL, value=self.api.url, description="base URL (append v1/jobs)")
        CfnOutput(self, OUTPUT_API_ID, value=self.api.rest_api.rest_api_id)
        CfnOutput(self, OUTPUT_ALARM_TOPIC, value=self.monitoring.topic.topic_arn)
        # The end-to-end check of the alarm path (make e2e-aws) sets one of these to ALARM.
        dead_letter_alarms = [
            cast(cw.Alarm, self.monitoring.node.find_child(f"{name}-depth")).alarm_name
            for name in self.queues.all_dead_letter_queues()
        ]
        CfnOutput(
            self,
            OUTPUT_DEAD_LETTER_ALARMS,
            value=Fn.join(",", dead_letter_alarms),
            description="the dead-letter queues' depth alarms, comma-separated",
        )
        CfnOutput(self, OUTPUT_DASHBOARD, value=self.monitoring.dashboard.dashboard_name)
        CfnOutput(self, OUTPUT_CREATE_SCHEDULE_SM, value=self.examples.create_schedule.state_machine_arn)
        CfnOutput(self, OUTPUT_RUN_TARGET_SM, value=self.examples.run_target.state_machine_arn)
        CfnOutput(
            self,
            OUTPUT_WORKER_FUNCTION_ROLE,
            value=self.functions.roles[WORKER].role_arn,
            description="a principal a tenant's role trusts, with sts:ExternalId = its tenant's",
        )
        CfnOutput(
            self,
            OUTPUT_NOTIFIER_FUNCTION_ROLE,
            value=self.functions.roles[NOTIFIER].role_arn,
            description="the other principal a tenant's role trusts: it delivers notifications",
        )
        CfnOutput(
            self,
            OUTPUT_EVENT_BUS,
            value=self.events.bus.event_bus_name,
            description=f"run and job events (runEvents: {self.config.run_events}); add rules to subscribe",
        )
        CfnOutput(self, OUTPUT_EVENT_ARCHIVE, value=self.events.archive.archive_name)
        for role in API_ROLES:
            CfnOutput(self, output_policy(role), value=self.api.policies[role].managed_policy_arn)

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
            for route in ROUTES:
                if route.role == role and "*" in route.arn_path:
                    ack(
                        api.policies[role],
                        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:execute-api:<AWS::Region>:"
                        f"<AWS::AccountId>:<{REST_API_LOGICAL_ID}>/{API_STAGE}/{route.method}"
                        f"{route.arn_path}]",
                        "API Gateway method ARNs name path parameters with *; the method and the "
                        "rest of the path are fixed, so the policy grants exactly this route.",
                    )
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
            self.queues.tick_failures,
            "AwsSolutions-SQS3",
            "This queue is itself a dead letter: the scheduled rules' targets' dead-letter "
            "queue; its depth and new messages are alarmed like every DLQ.",
        )
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
